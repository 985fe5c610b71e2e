"""Policies set with `rabbitmqctl set_policy` on a real RabbitMQ and with
`amqpctl set_policy` here must dead-letter the same messages to the same
places, with the argument-beats-policy and smaller-limit-wins merges."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from policies import ctl

from .test_dlx_differential import Scenario

RABBITMQCTL = shutil.which("rabbitmqctl")


def rabbitmqctl(*args: str) -> None:
    done = subprocess.run([RABBITMQCTL, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl cannot manage the reference broker: {done.stderr.strip()}")


def scenario(s: Scenario, set_policy, clear_policy) -> list:
    for target in ("policy", "arg"):
        s.exchange(f"{target}-dlx")
        s.queue(f"{target}-dlq")
        s.bind(f"{target}-dlq", f"{target}-dlx")
    s.queue("work")
    s.queue("pinned", x_dead_letter_exchange="arg-dlx", x_max_length=10)
    name = s.name("p")
    set_policy(name, f"^{s.prefix}(work|pinned)$",
               f'{{"dead-letter-exchange": "{s.name("policy-dlx")}", "max-length": 2}}')
    time.sleep(0.5)  # RabbitMQ applies policies asynchronously
    for queue in ("work", "pinned"):
        for n in range(4):
            s.publish("", s.name(queue), body=f"{queue}-{n}".encode())
    seen = [s.look("policy-dlq"), s.look("policy-dlq"), s.look("arg-dlq"), s.look("arg-dlq"),
            s.empty("policy-dlq"), s.empty("arg-dlq")]
    clear_policy(name)
    time.sleep(0.5)
    for n in range(4):
        s.publish("", s.name("work"), body=f"after-{n}".encode())
    seen.append(s.empty("policy-dlq"))
    depth = s.ch.queue_declare(s.name("work"), passive=True).method.message_count
    seen.append(depth)
    return seen


@pytest.mark.skipif(RABBITMQCTL is None, reason="rabbitmqctl not installed")
def test_policy_dead_lettering_matches_rabbitmq(broker, rabbitmq_url):
    port = str(broker.server.management.port)
    ours_run = Scenario(broker.url)
    try:
        ours = scenario(
            ours_run,
            lambda name, pattern, definition: ctl.main(
                ["--port", port, "set_policy", "--apply-to", "queues", "-q", name, pattern,
                 definition]),
            lambda name: ctl.main(["--port", port, "clear_policy", "-q", name]))
    finally:
        ours_run.close()
    theirs_run = Scenario(rabbitmq_url)
    try:
        theirs = scenario(
            theirs_run,
            lambda name, pattern, definition: rabbitmqctl(
                "set_policy", "--apply-to", "queues", name, pattern, definition),
            lambda name: rabbitmqctl("clear_policy", name))
    finally:
        theirs_run.close()
    assert ours == theirs
    bodies = [m["body"] for m in ours[:4]]
    assert bodies == [b"work-0", b"work-1", b"pinned-0", b"pinned-1"]
    assert ours[-1] == 6  # 2 kept under the policy, then 4 more once it is cleared
