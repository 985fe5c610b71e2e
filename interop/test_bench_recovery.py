"""bench/recovery.py at a tiny scale: a broker subprocess filled, stopped
and started again, with plain messages and with dead letters (the paged
tail's reasons are read at recovery).  No number is asserted (python -m
bench.recovery measures them); every wait is bounded in the bench."""

from __future__ import annotations

import pytest

from bench import recovery as bench


@pytest.mark.parametrize("dead_letters", [False, True], ids=["plain", "dead letters"])
def test_a_filled_broker_recovers_every_message(dead_letters):
    result = bench.ours(2000, dead_letters)
    assert result["messages"] == 2000
    assert result["recovery_seconds"] > 0 and result["disk_bytes_per_message"] > 100
