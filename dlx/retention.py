"""Which dead letters have outstayed a dead letter queue's retention
(`x-dead-letter-retention` / policy `dead-letter-retention`, ms): those are
archived, then leave the queue (amqp_server/broker/archiving.py).

A dead letter's stay counts from the time of its latest death (x-death[0]
`time`), which travels with the message and survives a restart.  That
time is cut to the second, so the stay counts from the end of that second:
a dead letter is kept at least its retention, at most a second longer,
never less.
A message with no death history is not a dead letter and stays, however
old: retention never removes what did not die.  Dead letters arrive in
roughly the order they died, so the walk from the head stops at the first
dead letter still within retention once it has looked at `lookahead`
messages past the last one due, and takes at most `batch`.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_due(death_time: int, retention_ms: int, now_ms: float) -> bool:
    """A dead letter that died at `death_time` (s) has stayed past retention."""
    return next_due(death_time, retention_ms) <= now_ms


def due(messages: Iterable[tuple[int, int | None, int]], retention_ms: int, now_ms: float,
        batch: int = 1000, lookahead: int = 1000, batch_bytes: int = 64 << 20) -> list[int]:
    """The seqs, in queue order, of the dead letters past retention among
    `messages` ((seq, time of latest death in seconds or None for a
    message that is not a dead letter, body bytes), head first): at most
    `batch` of them, and no more bodies than `batch_bytes` (one at least)."""
    chosen: list[int] = []
    since_due = 0
    size = 0
    for seq, death_time, body_bytes in messages:
        if death_time is not None and is_due(death_time, retention_ms, now_ms):
            if chosen and size + body_bytes > batch_bytes:
                break
            chosen.append(seq)
            size += body_bytes
            since_due = 0
            if len(chosen) >= batch:
                break
            continue
        since_due += 1
        if since_due > lookahead:
            break
    return chosen


def next_due(death_time: int, retention_ms: int) -> float:
    """When (ms) a dead letter that died at `death_time` comes due: its
    death second's end plus the retention."""
    return (death_time + 1) * 1000 + retention_ms
