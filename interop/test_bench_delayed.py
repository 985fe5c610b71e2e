"""bench/delayed.py at a tiny scale against the broker in process: every way
to delay runs end to end in both shapes, and `--memory` reports a number.
No number is asserted (python -m bench.delayed measures them); every wait
is bounded in the bench itself."""

from __future__ import annotations

import asyncio

import pytest

from bench import delayed as bench


@pytest.mark.parametrize("method", bench.METHODS)
@pytest.mark.parametrize("burst", [False, True], ids=["accuracy", "burst"])
def test_every_way_to_delay_runs_end_to_end(broker, method, burst):
    result = asyncio.run(bench.measure(broker.url, method, 200, 300, burst, 20.0, 2000))
    assert "failed" not in result, result
    assert result["arrived"] == 200
    assert result["p99_late_ms"] >= result["p50_late_ms"]


@pytest.mark.parametrize("method", ["x-delay", "scheduled", "ttl-dlx"])
def test_memory_per_held_message_runs(broker, method):
    result = asyncio.run(bench.memory(broker.url, method, 2000))
    assert result["count"] == 2000 and "rss_bytes_per_held" in result
