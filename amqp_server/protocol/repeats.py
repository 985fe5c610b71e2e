"""Publishes that repeat the one before them, found in a read in one pass.

Clients publishing in a loop send the same basic.publish method frame and
the same properties again and again, only the bodies differing.  Such a run
is routed once and queued together (Channel.publish_run); finding it costs
one byte comparison per publish of everything up to its body.
"""

from __future__ import annotations

import struct

_BODY_SIZE = struct.Struct(">Q")
_U32 = struct.Struct(">I")


def repeated_publishes(data: bytes, start: int, header_at: int, header: bytes, pos: int,
                       end: int, largest: int) -> tuple[list, list, int]:
    """The publishes from `pos` on that repeat the one whose method frame
    starts at `start` and content header frame (payload `header`) at
    `header_at`, followed by one body frame: the same method frame and
    properties, with a body of any size up to `largest` in one frame.
    Returns their content header payloads (one object per body size),
    their bodies, and where the next frame starts.

    Each body size met is checked once; after that, a publish is one byte
    comparison of everything up to its body."""
    body_at = header_at + 8 + len(header)
    method = data[start:header_at]
    lead = data[header_at : header_at + 11]  # frame header, class id, weight
    tail = data[header_at + 19 : body_at]  # property flags and values, frame end
    body_lead = data[body_at : body_at + 3]  # frame type and channel
    size_at = header_at + 11 - start  # a publish's body size, from its start
    before_body = data[start : body_at + 7]
    (last_size,) = _BODY_SIZE.unpack_from(header, 4)
    layouts = {last_size: (header, before_body)}
    step = len(before_body) + last_size + 1
    headers: list[bytes] = []
    bodies: list[bytes] = []
    startswith = data.startswith
    while True:
        if pos + step <= end and startswith(before_body, pos) and data[pos + step - 1] == 0xCE:
            headers.append(header)
            bodies.append(data[pos + len(before_body) : pos + step - 1])
            pos += step
            continue
        if pos + size_at + 8 > end:
            break
        (size,) = _BODY_SIZE.unpack_from(data, pos + size_at)
        if size == last_size:
            break  # not a repeat
        layout = layouts.get(size)
        if layout is None:
            header_at = pos + len(method)
            body_at = header_at + 19 + len(tail)
            if (not 0 < size <= largest or body_at + 7 > end
                    or not startswith(method, pos) or not startswith(lead, header_at)
                    or not startswith(tail, header_at + 19)
                    or not startswith(body_lead, body_at)
                    or _U32.unpack_from(data, body_at + 3)[0] != size):
                break
            layout = layouts[size] = (data[header_at + 7 : body_at - 1],
                                      data[pos : body_at + 7])
        header, before_body = layout
        last_size = size
        step = len(before_body) + size + 1
    return headers, bodies, pos
