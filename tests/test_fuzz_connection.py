"""Hostile input to the connection state machine, without a socket: random
bytes and mutated valid frames never raise out of it, never take its
internal-error path, and never make it write a malformed frame.  The
million-input run is `python -m bench.fuzz` (README)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from amqp_server.protocol.channel import Channel
from bench.fuzz import PRE_HANDSHAKE_SEEDS, SEEDS, SansIOFuzzer, chunks, mutate

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def fuzzer():
    running = SansIOFuzzer()
    yield running
    running.close()


@FUZZ
@given(seeds=st.lists(st.sampled_from(SEEDS), min_size=1, max_size=8),
       rng=st.randoms(use_true_random=False), mutated=st.booleans())
def test_mutated_frames_after_the_handshake(fuzzer, seeds, rng, mutated):
    data = b"".join(seeds)
    if mutated:
        data = mutate(data, rng)
    assert fuzzer.run_one(True, chunks(data, rng)) is None


@FUZZ
@given(seed=st.sampled_from(PRE_HANDSHAKE_SEEDS), rng=st.randoms(use_true_random=False))
def test_mutated_handshakes(fuzzer, seed, rng):
    assert fuzzer.run_one(False, chunks(mutate(seed, rng), rng)) is None


@FUZZ
@given(data=st.binary(min_size=1, max_size=512), opened=st.booleans())
def test_random_bytes(fuzzer, data, opened):
    assert fuzzer.run_one(opened, [data]) is None


def test_the_harness_reports_a_bug(fuzzer, monkeypatch):
    def broken(self, method):
        raise KeyError("a bug")

    monkeypatch.setattr(Channel, "handle_method", broken)
    problem = fuzzer.run_one(True, [SEEDS[0]])
    assert problem is not None and problem.startswith("internal error")


def test_seeds_are_valid_on_their_own(fuzzer):
    """Unmutated, every seed is accepted: the mutations start from real traffic."""
    rng = random.Random(7)
    for seed in SEEDS:
        assert fuzzer.run_one(True, chunks(seed, rng)) is None


def test_a_bystander_is_not_disturbed(fuzzer):
    rng = random.Random(3)
    for _ in range(200):
        fuzzer.run_one(True, chunks(mutate(b"".join(rng.choices(SEEDS, k=6)), rng), rng))
    assert fuzzer.bystander_problem() is None
