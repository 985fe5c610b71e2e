"""The embedding API before anything listens: where its config comes from,
what replaces which key, and what `import amqp_server` costs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import amqp_server
from amqp_server.config import BrokerConfig, ConfigError
from amqp_server.embed import EmbeddedBroker, load_config, serve
from amqp_server.embed_thread import BrokerThread, run_in_thread


def test_a_config_comes_from_an_object_a_toml_file_or_keys(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('message-expiry-scan-period = 100\n[address-settings."#"]\n'
                    'max-delivery-attempts = 3\n')
    given = BrokerConfig(heartbeat=5)
    assert load_config(given) is given
    from_file = load_config(path)
    assert from_file.message_expiry_scan_period == 100
    assert from_file.address_settings.match("q") == {"max-delivery-attempts": 3}
    from_keys = load_config({"message-expiry-scan-period": 50, "heartbeat": 7})
    assert (from_keys.message_expiry_scan_period, from_keys.heartbeat) == (50, 7)
    # Keys over a file, as a marker's keys over the ini's file.
    both = load_config(str(path), heartbeat=9)
    assert (both.message_expiry_scan_period, both.heartbeat) == (100, 9)
    assert load_config(None) == BrokerConfig()


def test_a_config_that_cannot_be_used_says_why(tmp_path):
    with pytest.raises(ConfigError, match='unknown config key "bogus"'):
        load_config({"bogus": 1})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")


def test_the_arguments_replace_the_listener_and_data_dir_keys(tmp_path):
    config = BrokerConfig(host="0.0.0.0", port=5672, management_port=15672,
                          data_dir="./elsewhere", heartbeat=5)
    embedded = EmbeddedBroker(config=config, data_dir=tmp_path)
    assert (embedded.config.host, embedded.config.port, embedded.config.management_port,
            embedded.config.data_dir) == ("127.0.0.1", 0, 0, str(tmp_path))
    assert embedded.config.heartbeat == 5
    assert embedded.url == "amqp://guest:guest@127.0.0.1:0/%2F"


def test_the_management_api_is_off_when_the_config_or_the_argument_says(tmp_path):
    off = EmbeddedBroker(config=BrokerConfig(management_port=-1), data_dir=tmp_path)
    assert off.config.management_port == -1
    with pytest.raises(RuntimeError, match="management API is off"):
        off.management_url
    assert EmbeddedBroker(management_port=-1, data_dir=tmp_path).config.management_port == -1
    assert EmbeddedBroker(management_port=15999, data_dir=tmp_path).config.management_port \
        == 15999


def test_urls_name_the_vhost_and_user_escaped(tmp_path):
    embedded = EmbeddedBroker(host="::", data_dir=tmp_path)
    assert embedded.url_for("orders/eu", "b@b", "p:w") == \
        "amqp://b%40b:p%3Aw@[::1]:0/orders%2Feu"


def test_a_broker_never_started_removes_its_temporary_directory_at_stop():
    thread = run_in_thread()
    directory = Path(thread.data_dir)
    assert isinstance(thread, BrokerThread) and directory.is_dir()
    thread.stop()
    thread.stop()
    assert not directory.exists()
    embedded = serve()
    assert isinstance(embedded, EmbeddedBroker)
    asyncio.run(embedded.stop())
    assert not Path(embedded.data_dir).exists()


def test_the_package_exports_the_api_and_imports_the_broker_only_when_asked():
    assert amqp_server.serve is serve
    assert amqp_server.run_in_thread is run_in_thread
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        amqp_server.nothing
    code = ("import sys, amqp_server; "
            "print(sorted(m for m in sys.modules if m.startswith('amqp_server.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert loaded.strip() == "[]"
