"""Choosing whose semantics the broker follows (docs/choosing-semantics.md):
RabbitMQ 3.13's by default, 4.3's by `--rabbitmq-semantics 4.3` or the
config key, and per virtual host in its metadata, kept across a restart."""

from __future__ import annotations

import pytest

from amqp_server.broker.broker import Broker
from amqp_server.broker.definitions import export, import_
from amqp_server.cli import parse_args
from amqp_server.config import BrokerConfig, ConfigError
from dlx.semantics import semantics_problem

from .disk_brokers import open_broker


def test_3_13_is_the_default():
    assert BrokerConfig.load().rabbitmq_semantics == "3.13"
    assert Broker().vhosts["/"].semantics == "3.13"


def test_the_config_key_chooses_4_3(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('rabbitmq_semantics = "4.3"\n')
    assert BrokerConfig.load(path).rabbitmq_semantics == "4.3"


def test_an_unquoted_version_in_toml_is_read_as_the_version(tmp_path):
    """TOML reads `rabbitmq_semantics = 4.3` as a number: taken as meant."""
    path = tmp_path / "broker.toml"
    path.write_text("rabbitmq-semantics = 4.3\n")
    assert BrokerConfig.load(path).rabbitmq_semantics == "4.3"


def test_an_unknown_version_is_refused_in_plain_words(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('rabbitmq_semantics = "4.0"\n')
    with pytest.raises(ConfigError, match='rabbitmq_semantics must be one of "3.13", "4.3", '
                                          'got "4.0"'):
        BrokerConfig.load(path)


def test_the_flag_chooses_4_3():
    args = parse_args(["--rabbitmq-semantics", "4.3"])
    assert BrokerConfig.load(rabbitmq_semantics=args.rabbitmq_semantics).rabbitmq_semantics \
        == "4.3"
    assert parse_args([]).rabbitmq_semantics is None  # not given: the config's


def test_the_flag_takes_only_the_two_versions(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--rabbitmq-semantics", "4.0"])
    assert "invalid choice: '4.0'" in capsys.readouterr().err


def test_every_vhost_follows_the_brokers_semantics_unless_it_chose():
    broker = Broker(BrokerConfig(rabbitmq_semantics="4.3"))
    broker.add_vhost("plain")
    broker.add_vhost("old", "3.13")
    assert [broker.vhosts[name].semantics for name in ("/", "plain", "old")] == \
        ["4.3", "4.3", "3.13"]
    assert broker.vhosts["plain"].metadata == {}
    assert broker.vhosts["old"].metadata == {"rabbitmq_semantics": "3.13"}


def test_a_queue_carries_its_vhosts_semantics():
    broker = Broker()
    broker.add_vhost("new", "4.3")
    queue = broker.vhosts["new"].declare_queue("q", None, durable=True)
    assert queue.settings.semantics == "4.3"
    assert broker.vhosts["/"].declare_queue("q", None).settings.semantics == "3.13"


def test_a_vhosts_semantics_cannot_change_while_it_exists():
    broker = Broker()
    broker.add_vhost("v", "4.3")
    broker.add_vhost("v", "4.3")  # the same: nothing to do
    with pytest.raises(ValueError, match="vhost 'v' follows RabbitMQ 4.3's semantics; they "
                                         "cannot change while it exists"):
        broker.add_vhost("v", "3.13")


def test_a_vhosts_choice_survives_a_restart(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.add_vhost("new", "4.3")
    broker.add_vhost("plain")
    again, problems = open_broker(tmp_path, rabbitmq_semantics="3.13")
    assert problems == []
    assert (again.vhosts["new"].semantics, again.vhosts["plain"].semantics) == ("4.3", "3.13")
    # A vhost that chose nothing follows the broker's flag at the next start.
    third, _ = open_broker(tmp_path, rabbitmq_semantics="4.3")
    assert (third.vhosts["new"].semantics, third.vhosts["plain"].semantics) == ("4.3", "4.3")


def test_definitions_carry_a_vhosts_choice_in_its_metadata():
    broker = Broker()
    broker.add_vhost("new", "4.3")
    document = export(broker)
    assert {"name": "new", "metadata": {"rabbitmq_semantics": "4.3"}} in document["vhosts"]
    assert {"name": "/"} in document["vhosts"]
    other = Broker()
    import_(other, document)
    assert other.vhosts["new"].semantics == "4.3"
    assert other.vhosts["new"].semantics_chosen


def test_definitions_naming_an_unknown_version_are_refused():
    with pytest.raises(ValueError, match="vhost 'v': rabbitmq_semantics must be \"3.13\" or "
                                         "\"4.3\", got \"5\""):
        import_(Broker(), {"vhosts": [{"name": "v", "metadata": {"rabbitmq_semantics": "5"}}]})


@pytest.mark.parametrize("value,problem", [
    ("3.13", None), ("4.3", None),
    ("4.0", 'rabbitmq_semantics must be "3.13" or "4.3", got "4.0"'),
    (4.3, 'rabbitmq_semantics must be "3.13" or "4.3", got 4.3'),
])
def test_semantics_problem_names_what_is_wrong(value, problem):
    assert semantics_problem(value) == problem
