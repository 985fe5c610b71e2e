"""The pytest plugin as its users meet it: pytester writes a small project
(test files and an ini, nothing of this repository's conftest) and runs
pytest on it; the plugin comes from the installed package's entry point."""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path

import pytest

import amqp_server.pytest_plugin

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
amqp_broker_scope = {scope}
{extra}
"""

# Each test notes which broker and vhost it got, for the outer test to compare.
CONFTEST = """
import json, pathlib
import pytest

@pytest.fixture
def note(request, amqp_broker):
    def write(**extra):
        with pathlib.Path("seen.jsonl").open("a") as seen:
            seen.write(json.dumps(dict(test=request.node.nodeid, port=amqp_broker.port,
                                       vhost=amqp_broker.vhost, **extra)) + "\\n")
    return write
"""

CLIENTS = """
import aio_pika, kombu, pika, pytest

def test_pika_declares_publishes_and_gets(amqp_broker, note):
    note()
    connection = pika.BlockingConnection(pika.URLParameters(amqp_broker.url))
    channel = connection.channel()
    channel.queue_declare("seen-once")
    channel.basic_publish("", "seen-once", b"pika")
    assert amqp_broker.queue_depth("seen-once") == 1
    connection.close()

def test_a_queue_of_the_test_before_is_not_here(amqp_url, note):
    note()
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
        connection.channel().queue_declare("seen-once", passive=True)
    connection.close()

async def test_aio_pika_round_trip(amqp_url, note):
    note()
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("seen-once")
        assert queue.declaration_result.message_count == 0
        await channel.default_exchange.publish(aio_pika.Message(b"aio"), "seen-once")
        message = await queue.get(timeout=5)
        assert message.body == b"aio"
        await message.ack()

def test_kombu_simple_queue(amqp_url, note):
    note()
    with kombu.Connection(amqp_url) as connection:
        queue = connection.SimpleQueue("seen-once")
        queue.put({"order": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"order": 1}
        message.ack()
        queue.close()
"""


def seen(pytester: pytest.Pytester) -> list[dict]:
    return [json.loads(line) for line in
            (pytester.path / "seen.jsonl").read_text().splitlines()]


def project(pytester: pytest.Pytester, scope: str, extra: str = "", **files: str) -> None:
    pytester.makeini(INI.format(scope=scope, extra=extra))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in files.items()})


@pytest.mark.parametrize("scope", ["function", "module", "session"])
def test_pika_aio_pika_and_kombu_get_an_isolated_broker_in_each_scope(pytester, scope):
    project(pytester, scope, test_first=CLIENTS, test_second=CLIENTS)
    pytester.runpytest().assert_outcomes(passed=8)
    tests = seen(pytester)
    brokers = {test["port"] for test in tests}
    modules = {test["test"].split("::")[0] for test in tests}
    if scope == "function":
        assert len(brokers) == 8 and {test["vhost"] for test in tests} == {"/"}
    else:
        assert len(brokers) == (2 if scope == "module" else 1)
        # a fresh vhost for each test
        assert len({(test["port"], test["vhost"]) for test in tests}) == 8
        for module in modules:
            assert len({test["port"] for test in tests if test["test"].startswith(module)}) == 1


@pytest.mark.parametrize("scope", ["function", "session"])
def test_a_connection_left_open_is_closed_with_a_warning_that_names_it(pytester, scope):
    project(pytester, scope, test_leaky="""
        import pika, pytest

        left = []

        def test_forgets_its_connection(amqp_url):
            params = pika.URLParameters(amqp_url)
            params.client_properties = {"connection_name": "forgotten"}
            left.append(pika.BlockingConnection(params))

        def test_the_next_test_runs_and_the_connection_is_closed(amqp_broker):
            assert amqp_broker.open_connections() == 0
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="320"):
                left[0].channel()
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines([
        "*test_leaky.py:5: LeftoverConnectionWarning: 1 AMQP connection left open by the "
        "test was closed by the amqp_broker fixture: 127.0.0.1:* -> 127.0.0.1:* "
        "(Pika Python Client Library *, 'forgotten')"])
    # Made an error, the warning fails the test that leaked (at teardown).
    strict = pytester.runpytest("-W", "error::amqp_server.pytest_plugin.LeftoverConnectionWarning")
    strict.assert_outcomes(passed=2, errors=1)


def test_a_port_that_cannot_be_bound_is_named_with_the_reason(pytester):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        project(pytester, "session", extra=f"amqp_port = {port}", test_bind="""
            def test_one(amqp_url):
                pass

            def test_two(amqp_url):
                pass
        """)
        result = pytester.runpytest()
    finally:
        holder.close()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        f"*amqp_broker: the broker could not start: cannot listen on 127.0.0.1:{port} "
        "(AMQP): *ddress already in use*"])


def test_markers_set_up_queues_policies_and_a_broker_config(pytester):
    project(pytester, "session", test_markers="""
        import time
        import pika, pytest

        pytestmark = pytest.mark.amqp_queue("orders.dead")

        @pytest.mark.amqp_config(message_expiry_scan_period=20)
        @pytest.mark.amqp_policy("expire", "^orders$", {"message-ttl": 10}, apply_to="queues")
        @pytest.mark.amqp_queue("orders", arguments={"x-dead-letter-exchange": "",
                                                     "x-dead-letter-routing-key": "orders.dead"})
        def test_an_expired_order_is_peeked_in_its_dead_letter_queue(amqp_broker, note):
            note()
            connection = pika.BlockingConnection(pika.URLParameters(amqp_broker.url))
            connection.channel().basic_publish("", "orders", b"late",
                                               pika.BasicProperties(message_id="o-9"))
            connection.close()
            deadline = time.monotonic() + 10
            while amqp_broker.queue_depth("orders.dead") == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            [dead] = amqp_broker.peek("orders.dead")
            assert (dead.body, dead.properties["message_id"]) == (b"late", "o-9")
            assert [(d.reason, d.queue, d.count) for d in dead.deaths] == [("expired", "orders", 1)]
            assert amqp_broker.queue_depth("orders.dead") == 1  # peeking took nothing

        def test_without_the_config_marker_the_shared_broker(amqp_broker, note):
            note()
            assert amqp_broker.queue_depth("orders.dead") == 0
            with pytest.raises(KeyError, match="no queue 'orders'"):
                amqp_broker.queue_depth("orders")
    """)
    pytester.runpytest().assert_outcomes(passed=2)
    configured, plain = seen(pytester)
    assert configured["port"] != plain["port"]  # a broker for that config


def test_ini_options_set_up_every_test(pytester):
    Path(pytester.path / "broker.toml").write_text('[address-settings."#"]\n'
                                                   'max-delivery-attempts = 2\n')
    project(pytester, "module", extra=textwrap.dedent("""
        amqp_config = broker.toml
        amqp_queues =
            jobs.dead
            jobs {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.dead"}
        amqp_policies =
            short ^jobs$ {"max-length": 2}
    """), test_ini="""
        import time
        import pika

        def test_the_queues_policy_and_config_are_there(amqp_broker):
            connection = pika.BlockingConnection(pika.URLParameters(amqp_broker.url))
            channel = connection.channel()
            channel.confirm_delivery()
            for body in (b"1", b"2", b"3"):
                channel.basic_publish("", "jobs", body)
            assert amqp_broker.queue_depth("jobs") == 2  # the policy's max-length
            for _ in range(2):  # two attempts (the config file), then dead
                method, _, body = channel.basic_get("jobs")
                assert body == b"2"
                channel.basic_nack(method.delivery_tag, requeue=True)
            deadline = time.monotonic() + 10
            while amqp_broker.queue_depth("jobs.dead") < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            # "1" was dropped from the head by max-length: dead-lettered too.
            assert [(m.body, m.deaths[0].reason) for m in amqp_broker.peek("jobs.dead")] == \
                [(b"1", "maxlen"), (b"2", "delivery_limit")]
            connection.close()
    """)
    pytester.runpytest().assert_outcomes(passed=1)


def test_mistakes_in_markers_and_ini_options_are_named(pytester):
    project(pytester, "session", test_mistakes="""
        import pytest

        @pytest.mark.amqp_queue()
        def test_a_queue_without_a_name(amqp_url):
            pass

        @pytest.mark.amqp_queue("q", arguments={"x-max-length": -1})
        def test_a_queue_the_broker_refuses(amqp_url):
            pass

        @pytest.mark.amqp_policy("p", "^q$", {"max-length": "many"})
        def test_a_policy_the_broker_refuses(amqp_url):
            pass

        @pytest.mark.amqp_config(no_such_key=1)
        def test_a_config_the_broker_refuses(amqp_url):
            pass
    """)
    result = pytester.runpytest()
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines([
        "*@pytest.mark.amqp_queue: amqp_queue() missing 1 required positional argument: "
        "'name'*",
        "*amqp_broker: cannot set up queue 'q': PRECONDITION_FAILED - *x-max-length*",
        "*amqp_broker: cannot set up policy 'p': <<\"many\">> is not a valid maximum length*",
        "*amqp_broker: the broker could not start: unknown config key \"no_such_key\"*",
    ], consecutive=False)
    pytester.makeini(INI.format(scope="class", extra=""))
    wrong = pytester.runpytest()
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*amqp_broker_scope must be one of function, module, "
                                "session, got 'class'*"])


def test_the_plugin_comes_from_the_package_entry_point(pytester):
    pytester.makepyfile(test_plain="""
        def test_url(amqp_url):
            assert amqp_url.startswith("amqp://guest:guest@127.0.0.1:")
    """)
    # A separate interpreter: nothing is imported or registered but what
    # the installed distribution's metadata says.
    result = pytester.runpytest_subprocess("--trace-config")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        f"*amqp-server-{amqp_server.__version__} at *amqp_server*pytest_plugin.py*"])
    off = pytester.runpytest_subprocess("-p", "no:amqp_server")
    off.stdout.fnmatch_lines(["*fixture 'amqp_url' not found*"])


def test_this_suite_has_the_plugin_once_from_its_entry_point(request):
    manager = request.config.pluginmanager
    assert manager.get_plugin("amqp_server") is amqp_server.pytest_plugin
    assert [plugin for plugin in manager.get_plugins()
            if plugin is amqp_server.pytest_plugin] == [amqp_server.pytest_plugin]
