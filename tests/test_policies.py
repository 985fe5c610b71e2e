"""Policies: validation wording, matching, priority, apply-to, live
re-application and persistence, without sockets."""

from __future__ import annotations

import json

import pytest

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.wire.table import FieldTable
from policies.effective import resolve
from policies.model import (
    PolicyError,
    effective_definition,
    make_policy,
    match_exchange,
    match_queue,
)
from policies.store import PolicyStore


@pytest.mark.parametrize("definition,message,plain", [
    ({"message-ttl": "5"}, '<<"5">> is not a valid message TTL',
     'message-ttl must be a whole number of milliseconds, 0 or more, got "5"'),
    ({"message-ttl": -1}, "-1 is not a valid message TTL",
     "message-ttl must be a whole number of milliseconds, 0 or more, got -1"),
    ({"expires": 0}, "0 is not a valid queue expiry",
     "expires must be a whole number of milliseconds, 1 or more, got 0"),
    ({"max-length": 1.5}, "1.5 is not a valid maximum length",
     "max-length must be a whole number of messages, 0 or more, got 1.5"),
    ({"overflow": "drop-hed"}, '<<"drop-hed">> is not a valid overflow value',
     ('overflow must be one of "drop-head", "reject-publish", "reject-publish-dlx", '
      'got "drop-hed"; did you mean "drop-head"?')),
    ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name",
     "dead-letter-exchange must be an exchange name (a string), got 5"),
    ({"delivery-limit": True}, "true is not a valid delivery limit",
     "delivery-limit must be a whole number of deliveries, 0 or more, got true"),
    # rabbit_policy:validate0/2: the unknown {Key, Value} pairs in key order
    ({"zz": 1, "dead-leter-exchange": "x"},
     '[{<<"dead-leter-exchange">>,<<"x">>},{<<"zz">>,1}] are not recognised policy settings',
     ('unknown policy keys "dead-leter-exchange", "zz"; '
      'did you mean "dead-letter-exchange" for "dead-leter-exchange"?')),
    ({"dead-leter-exchange": "x"},
     '[{<<"dead-leter-exchange">>,<<"x">>}] are not recognised policy settings',
     'unknown policy key "dead-leter-exchange"; did you mean "dead-letter-exchange"?'),
    ({"colour": "red"}, '[{<<"colour">>,<<"red">>}] are not recognised policy settings',
     'unknown policy key "colour"'),
    # known keys' values first, in key order, as RabbitMQ checks them
    ({"zz": 1, "message-ttl": "x", "expires": 0}, "0 is not a valid queue expiry",
     "expires must be a whole number of milliseconds, 1 or more, got 0"),
    ({"queue-mode": "lazzy"}, '<<"lazzy">> is not a valid queue-mode value',
     'queue-mode must be one of "default", "lazy", got "lazzy"; did you mean "lazy"?'),
    ({"max-in-memory-length": -1}, "-1 is not a valid maximum memory in bytes",
     "max-in-memory-length must be a whole number of messages, 0 or more, got -1"),
    ({"queue-version": 3}, "3 is not a valid queue-version value",
     "queue-version must be 1 or 2, got 3"),
    ([1, 2], "definition must be a dictionary: [1,2]",
     'the definition must be a JSON object such as {"max-length": 1000}, got [1,2]'),
    ({}, "no policy settings given",
     'the definition sets nothing: give a policy key, such as {"max-length": 1000}'),
])
def test_definition_validation(definition, message, plain):
    with pytest.raises(PolicyError) as info:
        make_policy("/", "p", ".*", definition)
    assert (str(info.value), info.value.plain) == (message, plain)


@pytest.mark.parametrize("definition,message,plain", [
    ({"dead-letter-exchange": "x"},
     '[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings',
     ('an operator policy cannot set "dead-letter-exchange"; it takes only "expires", '
      '"message-ttl", "max-length", "max-length-bytes", "max-in-memory-length", '
      '"max-in-memory-bytes", "overflow", "queue-version", "delivery-limit"')),
    ({"max-lenght": 5}, '[{<<"max-lenght">>,5}] are not recognised policy settings',
     'unknown operator policy key "max-lenght"; did you mean "max-length"?'),
])
def test_operator_definition_validation(definition, message, plain):
    with pytest.raises(PolicyError) as info:
        make_policy("/", "p", ".*", definition, operator=True)
    assert (str(info.value), info.value.plain) == (message, plain)


def test_the_3_13_policy_keys_are_taken():
    """rabbit_policies 3.13: queue-mode, queue-version and the in-memory
    limits are policy keys; the in-memory limits, overflow and queue-version
    are operator policy keys too."""
    make_policy("/", "p", ".*", {"queue-mode": "lazy", "queue-version": 2,
                                 "max-in-memory-length": 5, "max-in-memory-bytes": 0})
    make_policy("/", "p", ".*", {"max-in-memory-length": 5, "max-in-memory-bytes": 10,
                                 "overflow": "reject-publish", "queue-version": 1},
                operator=True)


def test_apply_to_priority_and_pattern_validation():
    with pytest.raises(PolicyError, match="apply-to 'topics' unrecognised") as info:
        make_policy("/", "p", ".*", {"max-length": 1}, apply_to="topics")
    assert info.value.plain == ('apply-to must be one of "queues", "classic_queues", '
                                '"quorum_queues", "streams", "exchanges", "all", got "topics"')
    with pytest.raises(PolicyError) as info:
        make_policy("/", "p", ".*", {"max-length": 1}, apply_to="queue")
    assert info.value.plain.endswith('got "queue"; did you mean "queues"?')
    with pytest.raises(PolicyError, match="priority must be a number"):
        make_policy("/", "p", ".*", {"max-length": 1}, priority="high")
    with pytest.raises(PolicyError, match="not a valid regular expression"):
        make_policy("/", "p", "(", {"max-length": 1})
    with pytest.raises(PolicyError, match="not recognised"):
        make_policy("/", "p", ".*", {"dead-letter-exchange": "x"}, operator=True)


def test_highest_priority_wins_and_ties_go_to_the_first_name():
    low = make_policy("/", "b-low", "^orders", {"max-length": 1}, priority=1)
    high = make_policy("/", "a-high", "orders", {"max-length": 2}, priority=5)
    assert match_queue([low, high], "orders.eu", "classic") is high
    tie_a = make_policy("/", "a", "", {"max-length": 1}, priority=5)
    assert match_queue([high, tie_a], "orders", "classic") is tie_a
    assert match_queue([low], "my.orders", "classic") is None  # ^ anchors
    assert make_policy("/", "p", "rders", {"max-length": 1}).matches_queue("orders", "classic")


def test_apply_to_and_queue_type_support():
    queues = make_policy("/", "q", ".*", {"max-length": 1}, apply_to="queues")
    exchanges = make_policy("/", "x", ".*", {"alternate-exchange": "ae"}, apply_to="exchanges")
    quorum = make_policy("/", "qq", ".*", {"max-length": 1}, apply_to="quorum_queues")
    limit = make_policy("/", "dl", ".*", {"delivery-limit": 3})
    assert match_queue([exchanges], "a", "classic") is None
    assert match_exchange([queues], "a") is None
    assert match_queue([quorum], "a", "classic") is None
    assert match_queue([quorum], "a", "quorum") is quorum
    # delivery-limit is a quorum-only key: RabbitMQ skips the whole policy elsewhere.
    assert match_queue([limit], "a", "classic") is None
    assert match_queue([limit], "a", "quorum") is limit


def _broker_with_queue(**arguments):
    broker = Broker()
    vhost = broker.vhosts["/"]
    args = FieldTable({k.replace("_", "-"): v for k, v in arguments.items()})
    return broker, vhost, vhost.declare_queue("work", None, arguments=args)


def test_policy_applies_to_live_queue_and_clearing_restores():
    broker, _vhost, queue = _broker_with_queue()
    broker.set_policy("/", "dlx", "^work$", {"dead-letter-exchange": "from-policy",
                                             "message-ttl": 1000})
    assert queue.settings.dead_letter_exchange == "from-policy"
    assert queue.settings.message_ttl == 1000 and not queue.plain
    assert queue.policy.name == "dlx"
    broker.clear_policy("/", "dlx")
    assert queue.settings.dead_letter_exchange is None and queue.plain
    assert queue.policy is None


def test_argument_beats_policy_and_smaller_limit_wins():
    broker, _vhost, queue = _broker_with_queue(x_dead_letter_exchange="from-arg",
                                              x_max_length=10)
    broker.set_policy("/", "p", ".*", {"dead-letter-exchange": "from-policy", "max-length": 3})
    assert queue.settings.dead_letter_exchange == "from-arg"
    assert queue.settings.max_length == 3
    broker.set_policy("/", "cap", ".*", {"max-length": 2}, operator=True)
    assert queue.settings.max_length == 2


@pytest.mark.parametrize("argument, policy, resolved", [
    (60000, 700, 700),
    (500, 700, 500),
    ("soon", 700, 700),       # erlang:min: a number sorts before a string
    ("soon", None, "soon"),   # unchecked, then not enforced (not an integer)
    (None, 700, 700),
    (1.5, 700, 1.5),
])
def test_consumer_timeout_the_smaller_as_erlang_compares(argument, policy, resolved):
    arguments = FieldTable({"x-consumer-timeout": argument} if argument is not None else {})
    definition = {"consumer-timeout": policy} if policy is not None else None
    assert resolve(arguments, definition).consumer_timeout == resolved


def test_policy_precedence_switch_lets_the_policy_win():
    broker = Broker(BrokerConfig(policy_precedence="policy"))
    queue = broker.vhosts["/"].declare_queue(
        "q", None, arguments=FieldTable({"x-dead-letter-exchange": "from-arg",
                                         "x-max-length": 1}))
    broker.set_policy("/", "p", ".*", {"dead-letter-exchange": "from-policy", "max-length": 5})
    assert queue.settings.dead_letter_exchange == "from-policy"
    assert queue.settings.max_length == 1  # numeric limits: still the smaller


def test_gaining_a_max_length_trims_at_once():
    broker, vhost, queue = _broker_with_queue()
    vhost.declare_queue("dlq", None)
    from tests.messages import message, publish
    for n in range(5):
        publish(vhost, message("work", str(n).encode()))
    broker.set_policy("/", "short", "^work$", {"max-length": 2, "dead-letter-exchange": "",
                                               "dead-letter-routing-key": "dlq"})
    assert [e.message.body for e in queue.ready] == [b"3", b"4"]
    assert len(vhost.queues["dlq"].ready) == 3


def test_new_queues_and_exchanges_pick_up_policies():
    broker = Broker()
    broker.set_policy("/", "ae", "^in$", {"alternate-exchange": "fallback"},
                      apply_to="exchanges")
    vhost = broker.vhosts["/"]
    assert vhost.declare_exchange("in", "direct").alternate == "fallback"
    assert vhost.declare_exchange("other", "direct").alternate is None
    broker.set_policy("/", "ttl", ".*", {"message-ttl": 5}, apply_to="queues")
    assert vhost.declare_queue("later", None).settings.message_ttl == 5


def test_setting_a_policy_keeps_bindings():
    broker = Broker()
    vhost = broker.vhosts["/"]
    exchange = vhost.declare_exchange("in", "direct")
    vhost.bind("in", vhost.declare_queue("q", None), "k", None)
    broker.set_policy("/", "ae", ".*", {"alternate-exchange": "other", "message-ttl": 5})
    assert [b.routing_key for b in exchange.bindings.values()] == ["k"]
    assert exchange.alternate == "other"


def test_a_deleted_vhost_takes_its_policies_along():
    broker = Broker()
    broker.add_vhost("v")
    broker.set_policy("v", "ttl", ".*", {"message-ttl": 5})
    broker.set_policy("v", "cap", ".*", {"max-length": 5}, operator=True)
    broker.delete_vhost("v")
    broker.add_vhost("v")
    assert broker.vhosts["v"].declare_queue("q", None).settings.message_ttl is None
    assert broker.policies.in_vhost("v") == broker.policies.in_vhost("v", True) == []


def test_unknown_vhost_and_policy():
    broker = Broker()
    with pytest.raises(KeyError):
        broker.set_policy("nope", "p", ".*", {"max-length": 1})
    with pytest.raises(KeyError):
        broker.clear_policy("/", "never-set")


def test_policies_persist(tmp_path):
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    broker.open_data_dir()
    broker.set_policy("/", "p", "^a", {"max-length": 4}, priority=2, apply_to="queues")
    broker.set_policy("/", "op", ".*", {"max-length": 9}, operator=True)
    saved = json.loads((tmp_path / "policies.json").read_text())
    assert saved["policies"][0]["definition"] == {"max-length": 4}
    broker.close_data_dir()
    again = Broker(BrokerConfig(data_dir=str(tmp_path)))
    assert again.open_data_dir() == []
    queue = again.vhosts["/"].declare_queue("abc", None)
    assert queue.policy.name == "p" and queue.settings.max_length == 4
    assert queue.operator_policy.name == "op"


def test_a_corrupt_saved_policy_is_skipped_not_fatal(tmp_path):
    (tmp_path / "policies.json").write_text(json.dumps({"policies": [
        {"vhost": "/", "name": "bad", "pattern": ".*", "definition": {"bogus": 1}},
        {"vhost": "/", "name": "good", "pattern": ".*", "definition": {"max-length": 1}}]}))
    store = PolicyStore()
    problems = store.open(tmp_path)
    assert len(problems) == 1 and "bogus" in problems[0]
    assert list(store.policies) == [("/", "good")]


# ---- queue-mode, queue-version and the in-memory limits, as 3.13 takes them ------

def test_a_policy_with_queue_mode_skips_quorum_queues():
    """rabbit_quorum_queue capabilities: queue-mode is an unsupported policy
    key, so a quorum queue skips the whole policy."""
    lazy = make_policy("/", "lazy", ".*", {"queue-mode": "lazy", "max-length": 1})
    assert match_queue([lazy], "q", "classic") is lazy
    assert match_queue([lazy], "q", "quorum") is None


def test_a_policy_with_in_memory_limits_skips_classic_queues():
    """3.13 lists max-in-memory-length/-bytes among a classic queue's
    unsupported policies (3.10 did not: a version difference)."""
    capped = make_policy("/", "cap", ".*", {"max-in-memory-length": 5, "max-length": 1})
    assert match_queue([capped], "q", "classic") is None
    assert match_queue([capped], "q", "quorum") is capped


def test_in_memory_limits_take_the_smallest_of_argument_policy_and_operator_policy():
    arguments = FieldTable({"x-queue-type": "quorum", "x-max-in-memory-length": 50,
                            "x-max-in-memory-bytes": 1000})
    settings = resolve(arguments, {"max-in-memory-length": 20, "max-in-memory-bytes": 5000},
                       {"max-in-memory-length": 30})
    assert (settings.max_in_memory_length, settings.max_in_memory_bytes) == (20, 1000)


def test_queue_mode_and_version_argument_beats_policy():
    """rabbit_amqqueue_process: res_arg for queue-mode and queue-version."""
    settings = resolve(FieldTable({"x-queue-mode": "default"}),
                       {"queue-mode": "lazy", "queue-version": 2})
    assert (settings.queue_mode, settings.queue_version) == ("default", 2)
    assert resolve(FieldTable(), {"queue-mode": "lazy"}).queue_mode == "lazy"


def test_an_operator_overflow_replaces_the_policy_but_not_the_argument():
    """rabbit_policies:merge_policy_value/3 takes the operator's overflow
    over the user policy's; the queue's own argument still wins (res_arg)."""
    user, operator = {"overflow": "drop-head"}, {"overflow": "reject-publish"}
    assert resolve(FieldTable(), user, operator).overflow == "reject-publish"
    assert resolve(FieldTable({"x-overflow": "drop-head"}), user, operator).overflow \
        == "drop-head"


def test_arguments_only_settings_are_read_from_the_table():
    settings = resolve(FieldTable({"x-max-priority": 5, "x-single-active-consumer": True,
                                   "x-qpid-maximum-delivery-count": 0}))
    assert (settings.max_priority, settings.single_active_consumer,
            settings.qpid_maximum_delivery_count) == (5, True, None)


def test_a_lazy_policy_caps_what_a_live_queue_keeps_in_memory():
    from amqp_server.broker.queue.paging import LAZY_BYTES, LAZY_MESSAGES
    broker, _vhost, queue = _broker_with_queue()
    unlimited = queue.pager.cap
    broker.set_policy("/", "lazy", "^work$", {"queue-mode": "lazy"})
    assert queue.settings.queue_mode == "lazy"
    assert queue.pager.cap == (LAZY_MESSAGES, LAZY_BYTES)
    broker.clear_policy("/", "lazy")
    assert queue.pager.cap == unlimited


def test_an_in_memory_policy_caps_a_quorum_queue():
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue(
        "qq", None, durable=True, arguments=FieldTable({"x-queue-type": "quorum"}))
    broker.set_policy("/", "cap", ".*", {"max-in-memory-length": 0,
                                         "max-in-memory-bytes": 4096})
    assert queue.pager.cap == (1, 4096)  # at least one message stays in memory


def test_the_effective_definition_merges_as_rabbit_policy_does():
    """rabbit_policy:effective_definition/1: both policies' keys; for a key
    of both, the smaller limit or the operator's overflow."""
    user = make_policy("/", "p", ".*", {"max-length": 10, "overflow": "drop-head",
                                        "dead-letter-exchange": "dlx"})
    cap = make_policy("/", "cap", ".*", {"max-length": 5, "overflow": "reject-publish",
                                         "message-ttl": 1000}, operator=True)
    assert effective_definition(user, cap) == {
        "dead-letter-exchange": "dlx", "max-length": 5, "message-ttl": 1000,
        "overflow": "reject-publish"}
    assert effective_definition(user, None) == user.definition
    assert effective_definition(None, None) == {}
