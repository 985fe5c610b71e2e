"""What RabbitMQ 4.3 denies by default that 3.13 took (its deprecated
features in the denied_by_default phase), in its words, and the config key
that permits them again."""

from __future__ import annotations

import pytest

from amqp_server.broker.vhost import VirtualHost
from amqp_server.config import BrokerConfig, ConfigError
from amqp_server.errors import INTERNAL_ERROR, AMQPError
from amqp_server.wire.table import FieldTable
from policies.deprecated_features import denied_message

from .messages import FakeClock

# The reply text RabbitMQ 4.3 closes the connection with, as Erlang/OTP
# formats it (rabbit_binary_generator:amqp_exception_explanation/2 with
# io_lib's chars_limit of 255: 252 characters and "...").
TRANSIENT_REPLY = (
    "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.\n"
    "By default, this feature is not permitted anymore.\n"
    "The feature will be removed from a future major RabbitMQ version, regardless of the "
    "configuration; actual version to be determined.\nTo...")


def host(semantics: str = "4.3", permits=()) -> VirtualHost:
    return VirtualHost("/", clock=FakeClock(), semantics=semantics, permits=permits)


def refused(vhost, **declare) -> AMQPError:
    with pytest.raises(AMQPError) as caught:
        vhost.declare_queue(declare.pop("name", "q"), None, **declare)
    return caught.value


def test_a_transient_non_exclusive_queue_is_refused_in_4_3():
    # rabbit_amqqueue.erl:114-119 transient_nonexcl_queues, denied_by_default;
    # declare/7 answers protocol_error internal_error with its warning
    error = refused(host())
    assert (error.code, error.closes_connection) == (INTERNAL_ERROR, True)
    assert error.explanation == denied_message("transient_nonexcl_queues")
    assert error.reply_text == TRANSIENT_REPLY
    assert len(error.reply_text.encode()) == 255


def test_durable_or_exclusive_queues_are_taken():
    vhost = host()
    vhost.declare_queue("durable", None, durable=True)
    vhost.declare_queue("mine", object(), exclusive=True)
    assert set(vhost.queues) == {"durable", "mine"}


def test_a_server_named_transient_queue_is_refused_too():
    assert refused(host(), name="").code == INTERNAL_ERROR


def test_the_check_comes_before_the_quorum_queues_own():
    """is_queue_args_combination_permitted/1 runs before rabbit_quorum_queue
    sees the queue, so 4.3 answers 541 where 3.13 answered 406."""
    args = FieldTable({"x-queue-type": "quorum"})
    assert refused(host(), arguments=args).code == INTERNAL_ERROR
    assert refused(host("3.13"), arguments=args).explanation == (
        "invalid property 'non-durable' for queue 'q' in vhost '/'")


def test_3_13_and_a_permit_take_them():
    host("3.13").declare_queue("q", None)
    host(permits=("transient_nonexcl_queues",)).declare_queue("q", None)


def test_x_queue_master_locator_is_refused_in_4_3():
    # rabbit_queue_location.erl:25-32 queue_master_locator, denied_by_default;
    # rabbit_classic_queue:validate_arguments/1
    args = FieldTable({"x-queue-master-locator": "min-masters"})
    error = refused(host(), durable=True, arguments=args)
    assert error.code == INTERNAL_ERROR
    assert error.explanation == denied_message("queue_master_locator")
    host(permits=("queue_master_locator",)).declare_queue("q", None, durable=True,
                                                          arguments=args)


def test_the_config_names_the_features_it_permits(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('permit_deprecated_features = ["transient_nonexcl_queues"]\n')
    assert BrokerConfig.load(path).permit_deprecated_features == ["transient_nonexcl_queues"]
    path.write_text('permit_deprecated_features = ["transient_queues"]\n')
    with pytest.raises(ConfigError, match='unknown feature "transient_queues"'):
        BrokerConfig.load(path)


def test_a_long_reply_text_keeps_252_bytes_and_an_ellipsis_as_rabbitmq():
    # rabbit_binary_generator.erl (3.13 and 4.3 alike)
    error = AMQPError(406, "x" * 300)
    assert error.reply_text == "PRECONDITION_FAILED - " + "x" * 230 + "..."
