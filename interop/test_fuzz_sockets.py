"""The fuzz inputs over real TCP: the broker survives them, closes every
connection, leaks no task and still delivers (the long run is
`python -m bench.fuzz --socket`)."""

from __future__ import annotations

from bench.fuzz import run_sockets


def test_mutated_frames_over_sockets():
    done, problems = run_sockets(count=150, seconds=60, seed=11)
    assert done == 150
    assert problems == []
