"""Config loading and the amqp-server command line."""

from __future__ import annotations

import pytest

from amqp_server.cli import main
from amqp_server.config import BrokerConfig, ConfigError


def test_embedded_defaults():
    config = BrokerConfig.load()
    assert (config.host, config.port, config.default_user, config.default_vhost) == (
        "127.0.0.1", 5672, "guest", "/")


def test_toml_then_flags_override(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('port = 6000\nheartbeat = 30\n'
                    '[address-settings."#"]\nmax-delivery-attempts = 3\n')
    config = BrokerConfig.load(path, port=7000)
    assert (config.port, config.heartbeat) == (7000, 30)
    assert config.address_settings.match("any.queue") == {"max-delivery-attempts": 3}


@pytest.mark.parametrize("text,message", [
    ("bogus = 1\n", 'unknown key "bogus"$'),
    ("prot = 1\n", 'unknown key "prot"; did you mean "port"\\?$'),
    ("message-expiry-scan-priod = 5\n",
     'unknown key "message-expiry-scan-priod"; did you mean "message-expiry-scan-period"\\?'),
    ("[brokr]\nport = 1\n", "unknown table \\[brokr\\]; did you mean \\[broker\\]\\?"),
    ("port = 'x'\n", 'port must be a whole number, got "x"'),
    ("heartbeat = true\n", "heartbeat must be a whole number, got true"),
    ("port = \n", "is not valid TOML"),
    ('[address-settings."q"]\nredelivery-delay = "soon"\n',
     ('address-settings."q"\\]: redelivery-delay must be a whole number of milliseconds, '
      '0 or more, got "soon"')),
    ('[address-settings."q"]\ndead-leter-exchange = "x"\n',
     ('address-settings."q"\\]: unknown setting "dead-leter-exchange"; '
      'did you mean "dead-letter-exchange"\\?')),
    ('[address-settings."q"]\noverflow = "drop-hed"\n',
     ('overflow must be one of "drop-head", "reject-publish", "reject-publish-dlx", '
      'got "drop-hed"; did you mean "drop-head"\\?')),
    ("max_redelivery_records = -2\n", "max_redelivery_records must be -1 \\(no limit\\) or more"),
    ("max_message_size = 0\n", "max_message_size must be between 1 and 536870912, got 0"),
    ("max_message_size = '1GB'\n", "max_message_size must be between 1 and 536870912"),
    ("disk_free_limit = 'lots'\n", ('disk_free_limit must be a size such as 1000000, "512MiB" '
                                    'or "2GB", got "lots"$')),
    ("disk_free_limit = '2GiBB'\n", 'got "2GiBB"; did you mean "GiB"\\?'),
    ("vm_memory_high_watermark = 2\n", "must be a fraction between 0 and 1"),
    ("tls_fail_if_no_peer_cert = true\n", "needs tls_cacertfile"),
    ("tls_certfile = 'a.pem'\n", "tls_certfile and tls_keyfile go together"),
    ('policy_precedence = "polcy"\n',
     ('policy_precedence must be one of "argument", "policy", got "polcy"; '
      'did you mean "policy"\\?')),
    ('log_level = "verbos"\n', 'log_level must be one of .*, got "verbos"$'),
])
def test_bad_config_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "broker.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.load(path)


def test_cli_rejects_bad_input(capsys, tmp_path):
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert main(["--port", "70000"]) == 2
    assert "--port must be 0-65535" in capsys.readouterr().err


def test_a_bad_key_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text("heartbeat = 'often'\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(path)
    assert str(info.value) == f'config file {path}: heartbeat must be a whole number, got "often"'


def test_flags_and_keywords_are_checked_like_the_file():
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, heartbat=5)
    assert str(info.value) == 'unknown config key "heartbat"; did you mean "heartbeat"?'
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, port="5672")
    assert str(info.value) == 'port must be a whole number, got "5672"'


def test_top_level_keys_and_the_broker_table_both_count(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text("port = 6000\n[broker]\nheartbeat = 30\nlog_level = 'WARNING'\n")
    config = BrokerConfig.load(path)
    assert (config.port, config.heartbeat, config.log_level) == (6000, 30, "warning")


def test_policy_precedence_is_checked(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('policy_precedence = "sometimes"\n')
    with pytest.raises(ConfigError, match="policy_precedence"):
        BrokerConfig.load(path)


def test_sizes_take_rabbitmq_units(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('disk_free_limit = "2GB"\nvm_memory_high_watermark_absolute = "512MiB"\n'
                    'max_message_size = 1048576\n')
    config = BrokerConfig.load(path)
    assert (config.disk_free_limit, config.vm_memory_high_watermark_absolute,
            config.max_message_size) == (2 * 10**9, 512 << 20, 1 << 20)
