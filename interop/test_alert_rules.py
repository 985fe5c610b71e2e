"""The shipped dead-letter alert rules and dashboard (docs/prometheus/,
docs/grafana/): the rules pass their promtool tests, name the broker's own
thresholds, and every metric they or the dashboard's PromQL name is
exported by a running broker."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pika
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dlx.alerts import ALERTS, Thresholds

from .conftest import missing
from .metrics import dashboard_metrics, metric_names
from .waiting import wait_for

DOCS = Path(__file__).resolve().parent.parent / "docs"
RULES = DOCS / "prometheus" / "dead-letter-alerts.yml"
RULE_TESTS = DOCS / "prometheus" / "dead-letter-alerts.test.yml"
DASHBOARD = DOCS / "grafana" / "dead-letters.json"


def _rules() -> dict:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_the_alert_rules_pass_their_promtool_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool is not installed: `apt-get install -y prometheus` (Debian's "
                "package ships it; .ci/run installs it)")
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULES.parent,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_are_the_alerts_the_broker_evaluates_with_its_thresholds():
    rules = _rules()
    assert tuple(rules) == ALERTS
    defaults = Thresholds()
    growing = " ".join(rules["DeadLetterQueueGrowing"]["expr"].split())
    assert f"offset {int(defaults.growth_window // 60)}m" in growing
    assert growing.endswith(f"> {defaults.growth}")
    assert rules["DeadLetterTooOld"]["expr"].endswith(f"> {int(defaults.max_age)}")
    spike = " ".join(rules["DeadLetterRateSpike"]["expr"].split())
    assert f"[{int(defaults.rate_window // 60)}m]" in spike
    assert spike.endswith(f"> {int(defaults.rate)}")
    assert rules["AtLeastOnceDeadLettersStuck"]["for"] == f"{int(defaults.held_for // 60)}m"


def _scrape(url: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in ("", "_total") if family.type in ("counter", "gauge", "untyped")
            or suffix == ""}


@pytest.fixture
def dead_letters(broker):
    """A broker whose dead letter queue holds a rejected message."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.exchange_declare("ar.dlx", "fanout")
    channel.queue_declare("ar.dlq")
    channel.queue_bind("ar.dlq", "ar.dlx")
    channel.queue_declare("ar.work", arguments={"x-dead-letter-exchange": "ar.dlx"})
    channel.basic_publish("", "ar.work", b"poison")
    method, _, _ = channel.basic_get("ar.work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    yield broker
    conn.close()


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(dead_letters):
    exported = _scrape(dead_letters.prometheus_url + "/metrics/per-object")
    used = set().union(*(metric_names(rule["expr"]) for rule in _rules().values()))
    dashboard = json.loads(DASHBOARD.read_text())
    used |= dashboard_metrics(dashboard)
    assert used, "no metric names found"
    assert all(re.match(r"amqp_queue_", name) for name in used), used
    assert not used - exported, sorted(used - exported)


def _samples(url: str) -> dict:
    """{(name, frozenset of labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_the_gauges_say_what_waits_by_reason_and_how_old(dead_letters):
    url = dead_letters.prometheus_url + "/metrics/per-object"
    dlq = {("vhost", "/"), ("queue", "ar.dlq")}

    def value(name: str, **labels) -> float:
        return _samples(url)[(name, frozenset(dlq | set(labels.items())))]
    assert value("amqp_queue_dead_letters_waiting", reason="rejected") == 1
    assert value("amqp_queue_dead_letters_waiting", reason="expired") == 0
    assert value("amqp_queue_dead_letters_received_total", reason="rejected") == 1
    assert value("amqp_queue_dead_letters_held") == 0
    # The age of the oldest message is known once the broker's tick marked
    # its arrival (once a second), that of the dead letter from its x-death.
    assert wait_for(lambda: value("amqp_queue_oldest_message_age_seconds") >= 1.0, 10)
    assert value("amqp_queue_oldest_dead_letter_age_seconds") >= 1.0
    work = {("vhost", "/"), ("queue", "ar.work")}
    samples = _samples(url)
    assert samples[("amqp_queue_oldest_message_age_seconds", frozenset(work))] == 0
    assert samples[("amqp_queue_dead_letters_waiting",
                    frozenset(work | {("reason", "rejected")}))] == 0
