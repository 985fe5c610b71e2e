"""Celery end to end: a real Celery worker (on a thread of this process)
against the broker of the pytest plugin's `amqp_broker` fixture, set up as
the README's recipe shows.

Results go to Celery's in-memory cache backend, which the worker shares
because it runs in this process; one test shows the RPC backend (results
as AMQP messages) works too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.exceptions import Reject
from kombu import Queue

from .waiting import wait_for

WORKER = "embedtest@localhost"
TASKS, DEAD = "tasks", "tasks.dead"

pytestmark = [
    # The dead-letter queue, declared by the fixture in each test's vhost.
    pytest.mark.amqp_queue(DEAD),
    # The recipe leaves no connection open: the fixture would say so.
    pytest.mark.filterwarnings("error::amqp_server.pytest_plugin.LeftoverConnectionWarning"),
]


def make_app(url: str, **settings) -> Celery:
    app = Celery("embedtest", broker=url, backend="cache+memory://", set_as_current=False)
    app.conf.update(
        # A task that fails for good is rejected, not acknowledged, and the
        # task queue sends it on to its dead-letter queue.
        task_queues=[Queue(TASKS, queue_arguments={"x-dead-letter-exchange": "",
                                                   "x-dead-letter-routing-key": DEAD})],
        task_default_queue=TASKS,
        task_acks_late=True, task_acks_on_failure_or_timeout=False,
        # Without AMQP heartbeats the worker's loop wakes every second, not
        # every ten, to see it should stop: a test's worker stops in ~1 s.
        broker_heartbeat=0, worker_hijack_root_logger=False,
        **settings)
    return app


@pytest.fixture
def app(amqp_url):
    app = make_app(amqp_url)
    yield app
    close(app)


def close(app: Celery) -> None:
    # app.close() only forgets the connection pool; its connections would
    # stay open until collected.
    app.pool.force_close_all()
    app.close()


def add_task(app: Celery):
    @app.task(name="add", shared=False)
    def add(x, y):
        return x + y
    return add


def run_worker(app: Celery):
    return start_worker(app, pool="solo", perform_ping_check=False, hostname=WORKER,
                        shutdown_timeout=30)


def wait_dead_letter(amqp_broker):
    assert wait_for(lambda: amqp_broker.queue_depth(DEAD) == 1, seconds=10)
    [dead] = amqp_broker.peek(DEAD)
    return dead


def test_a_task_runs_and_its_result_comes_back(app):
    add = add_task(app)
    with run_worker(app):
        assert add.delay(2, 3).get(timeout=10) == 5
        assert add.apply_async((20, 22)).get(timeout=10) == 42


def test_results_also_come_back_over_amqp_with_the_rpc_backend(amqp_url):
    # Celery's RPC backend replies to a queue of its own (no direct reply-to).
    app = make_app(amqp_url, result_backend="rpc://")
    add = add_task(app)
    with run_worker(app):
        assert add.delay(2, 3).get(timeout=10) == 5
    app.backend.result_consumer.stop()  # its connection is not the pool's
    close(app)


def test_a_task_rejected_without_requeue_is_dead_lettered_with_its_x_death(app, amqp_broker):
    @app.task(name="poison", shared=False)
    def poison():
        raise Reject("cannot process", requeue=False)

    with run_worker(app):
        result = poison.delay()
        dead = wait_dead_letter(amqp_broker)
    assert dead.headers["task"] == "poison"
    assert dead.headers["id"] == result.id
    [death] = dead.deaths
    # Celery publishes to a direct queue through the default exchange.
    assert (death.reason, death.queue, death.exchange, death.routing_keys, death.count) == \
        ("rejected", TASKS, "", (TASKS,), 1)
    assert dead.headers["x-first-death-reason"] == "rejected"
    assert amqp_broker.queue_depth(TASKS) == 0


def test_a_failing_acks_late_task_is_dead_lettered(app, amqp_broker):
    @app.task(name="fails", shared=False)
    def fails(order_id):
        raise ValueError(f"order {order_id} is malformed")

    with run_worker(app):
        result = fails.delay(7)
        with pytest.raises(ValueError, match="order 7 is malformed"):
            result.get(timeout=10)
        dead = wait_dead_letter(amqp_broker)
    assert dead.headers["id"] == result.id
    assert dead.deaths[0].reason == "rejected"
    assert dead.deaths[0].queue == TASKS


def test_a_task_retried_with_a_countdown_succeeds_on_its_third_attempt(app, amqp_broker):
    attempts = []

    @app.task(name="flaky", bind=True, max_retries=3, shared=False)
    def flaky(self):
        attempts.append((self.request.retries, self.request.eta))
        if self.request.retries < 2:
            raise self.retry(countdown=0.3)
        return "done"

    with run_worker(app):
        assert flaky.delay().get(timeout=20) == "done"
    assert [retries for retries, _ in attempts] == [0, 1, 2]
    # The retries came back through the broker with an ETA: held by the
    # worker (which raises its prefetch for them) until due.
    assert attempts[0][1] is None
    assert all(eta is not None for _, eta in attempts[1:])
    assert amqp_broker.queue_depth(DEAD) == 0


def test_celery_inspect_ping_gets_an_answer(app, amqp_url):
    with run_worker(app):
        assert app.control.inspect(destination=[WORKER], timeout=10).ping() == \
            {WORKER: {"ok": "pong"}}
        # The command line, as an operator runs it.
        command = subprocess.run(
            [sys.executable, "-m", "celery", "-b", amqp_url, "inspect", "ping",
             "-d", WORKER, "-t", "10", "-j"],
            capture_output=True, text=True, timeout=60)
    assert command.returncode == 0, command.stderr
    assert json.loads(command.stdout) == {WORKER: {"ok": "pong"}}


def test_a_higher_priority_task_runs_first(amqp_url):
    app = make_app(amqp_url, worker_prefetch_multiplier=1, task_queue_max_priority=9,
                   task_default_priority=1)
    app.conf.task_queues[0].queue_arguments["x-max-priority"] = 9
    order = []
    done = threading.Event()

    @app.task(name="note", shared=False)
    def note(label):
        order.append(label)
        if len(order) == 3:
            done.set()

    try:
        # Queued before any worker consumes, so only priority decides.
        with app.connection_for_write() as connection:
            app.amqp.queues[TASKS].bind(connection.default_channel).declare()
        for label, priority in (("low", 1), ("middle", 5), ("high", 9)):
            note.apply_async((label,), priority=priority)
        with run_worker(app):
            assert done.wait(10)
    finally:
        close(app)
    assert order == ["high", "middle", "low"]
