"""Hostile input to the connection state machine, without a socket: random
bytes and mutated valid frames never raise out of it, never take its
internal-error path, and never make it write a malformed frame.  The
million-input run is `python -m bench.fuzz` (README)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.protocol.channel import Channel
from amqp_server.protocol.connection import Connection
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from bench.fuzz import OPENED, PRE_HANDSHAKE_SEEDS, SEEDS, SansIOFuzzer, chunks, mutate

from .sansio import methods

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


# What `python -m bench.fuzz --inputs 1000000 --seed 1125` found: a publish
# whose headers table holds an array (CC) whose length runs past the table.
# Checking the table read past the frame (IndexError) and the connection
# ended in its internal-error catch-all (541) instead of a syntax error.
# Each is (the bytes, where the fuzzer cut them into reads); the number is
# the input's place in that run.
FOUND_BY_THE_FUZZER = [
    # input 280429
    ((
        b"\x01\x00\x01\x00\x00\x00\x07\x00<\x00\x1e\x01c\x00\xce\x01\x00\x01\x00\x00\x00\n"
        b"\x00<\x00(\x00\x00\x00\x01q\x01\xce\x02\x00\x01\x00\x00\x00\x89\x00<\x00\x00\x00"
        b"\x00\x00@\x00\x00\x00\x04\xb9\x80\ntext/plain\x00\x00\x00e\x03BCCA\x00\x00\x00"
        b"\x08S\x00\x00\x00\x03art\x02CCA\x80\x00\x00\x07S\x00\x04\x00\x02dl\x01ff?\xc0"
        b"\x00\x00\x01nb\x01\x07x-deathA\x00\x00\x00-F\x00\x00\x00(\x05countb\x01\x05queue"
        b"S\x00\x00\x00\x01q\x06reasonS\x00\x00\x00\x08rejected\x02\x03\x015\x02m1\xce\x03"
        b"\x00\x01\xeb\x83A)\xc4\x1f\x12?yK\xae\x00\x00\x00\x04body\xce\x01\x00\x01\x00"
        b"\x00\x00\x0f\x00<\x00\x14\x00\x00\x02dl\x00\x06\x00\x00\x00\x00\xce\x01\x00\x01"
        b"\x00\x00\x00\x05\x00U\x00\n\x00\xce\x01\x00\x01\x00\x00\x00\x04\x00Z\x00\x1e\xce"
        b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00)\xce\x01\x00\x01\x00\x00\x00/\x00<\x00"
        b"\x14\x00\x00\x02dl\x00\x06\x00\x00\x00\x00\xce\x01\x00\x01\x00\x00\x00\t\x00("
        b"\x00\x14\x00\x00\x01h\x00\xce"
    ), []),
    # input 517002
    ((
        b"\x01\x00\x01\x00\x00\x00\n\x00<\x00(\x00\x00\x00\x01q\x01\xce\x02\x00\x01\x00"
        b"\x00\x00\x89\x00<\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\xb9\x80\ntext/plain"
        b"\x00\x00\x00e\x03BCCA\x00\x01\x00\x08S\x00\x00\x00\xff\xff\xff\xff\x02CCA\x00"
        b"\x00\x00\x07S\x00\x00\x00\x02dl\x01ff?\xc0\x00\x00\x01nb\x01\x07x-deathA\x00\x00"
        b"\x00-F\x00\x00\x00(\x05countb\x01\x05\x00\x00\x00\x01eS\x00\x00\x00\x01q\x06reas"
        b"onS\x00\x00\x00\x08rejected\x02\x03\x015\x02m1\xce\x03\x00\x01\x00\x00\x00\x04bo"
        b"dy\xce\x01\x00\x01\x00\x00\x00\xac\x002\x00\n\x00\x00\x03art\x00\x00\x00\x00\x9d"
        b"\x10x-expiry-addressS\x00\x00\x00\x03EXP\x17x-max-delivery-attem"
    ), [41, 88, 92, 138, 168, 220]),
    # input 528871 (exchange h and queue q declared before it)
    ((
        b"\x01\x00\x01\x00\x00\x00\x05\x00<\x00n\x01\xce\x01\x00\x01\x00\x00\x00$\x002\x00"
        b"\x14\x00\x00\x01q\x01h\x00\x00\x00\x00\x00\x14\x01ab\x01\x07x-matchS\x00\x00\x00"
        b"\x03any\xce\x01\x00\x01\x00\x00\x00\n\x00<\x00(\x00\x00\x00\x01q\x01\xce\x02\x00"
        b"\x01\x00\x00\x00\x89\x00<\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\xb9\x80\ntext/"
        b"plain\x00\x00\x00e\x03BCCA\x00\x00\x00\x08S\x00\x00\x00\x03art\x02CCA\x01\x00"
        b"\x00\x07S\x00\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f?\xc0\x00\x00\x01nb\x01\x07x-deathA"
        b"\x00\x00\x00-F\x00\x00\x00(\x05countb\x01\x05queueS\x00\x00\x00\x01q\x06reasonS"
        b"\x00\x00\x00\x08rejected\x02\x03\x015\x02m1\xce\x03\x00\x01\x00\x00\x00\x04body"
        b"\xce\x01\x00\x01\x00\x00\x00\x10\x00<\x00(\x00\x00\x03dlx\x04dead\x00\xce\x02"
        b"\x00\x01\x00\x00\x00\x0e\x00<\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
        b"\xce\x03\x00\x01\x00\x00\x00\x00\x02\x00\x00\x01\x00\x00\x00\r\x002\x00\n\x00"
        b"\x00\x01q\x01\x00\x00\x00\x00\xce\x01\x00\x00\x00\x00\x00\x04\x00\n\x003\xce\x01"
        b"\x00\x01\x00\x00\x00\x15\x00(\x00\n\x00\x00\x03dlx\x05topic\x00\x00\x00\x00\x00"
        b"\xce\x01\x00\x01\x00\x00\x00\t\x00(\x00\x14\x00\x00\x01h\x00\xce"
    ), [50, 70, 112, 133, 192, 197, 259, 280, 313, 364]),
]


@pytest.mark.parametrize("number", range(len(FOUND_BY_THE_FUZZER)))
def test_inputs_the_fuzzer_found_are_syntax_errors(number):
    data, cuts = FOUND_BY_THE_FUZZER[number]
    conn = Connection(Broker(BrokerConfig()))
    conn.receive_data(OPENED)
    if number == 2:  # it binds q to h, as the fuzzer's earlier inputs had declared them
        conn.receive_data(
            frames.method_frame(1, make(spec.Exchange.Declare, exchange="h",
                                        exchange_type="headers"))
            + frames.method_frame(1, make(spec.Queue.Declare, queue="q")))
    conn.data_to_send()
    for start, end in zip([0, *cuts], [*cuts, len(data)]):
        conn.receive_data(data[start:end])
    close = methods(conn.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Connection.Close, 502)
    assert close.reply_text == (
        "SYNTAX_ERROR - malformed content header: field value exceeds table")
