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
    path.write_text('port = 6000\nheartbeat = 30\n[address-settings."#"]\nmax-delivery-attempts = 3\n')
    config = BrokerConfig.load(path, port=7000)
    assert (config.port, config.heartbeat) == (7000, 30)
    assert config.address_settings.match("any.queue") == {"max-delivery-attempts": 3}


@pytest.mark.parametrize("text,message", [
    ("bogus = 1\n", "unknown config keys: bogus"),
    ("port = 'x'\n", "config key 'port' must be int"),
    ("port = \n", "is not valid TOML"),
    ('[address-settings."q"]\nredelivery-delay = "soon"\n',
     'address-settings."q"\\]: redelivery-delay = <<"soon">> is not a valid redelivery delay'),
    ("max_redelivery_records = -2\n", "max_redelivery_records' must be -1 or more"),
    ("max_message_size = 0\n", "'max_message_size' must be between 1 and 536870912"),
    ("max_message_size = '1GB'\n", "'max_message_size' must be between 1 and 536870912"),
    ("disk_free_limit = 'lots'\n", "'disk_free_limit' must be a size such as 1000000"),
    ("vm_memory_high_watermark = 2\n", "must be a fraction between 0 and 1"),
    ("tls_fail_if_no_peer_cert = true\n", "needs 'tls_cacertfile'"),
    ("tls_certfile = 'a.pem'\n", "'tls_certfile' and 'tls_keyfile' go together"),
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
