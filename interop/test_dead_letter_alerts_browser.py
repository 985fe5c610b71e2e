"""The console's overview names the dead letter queues whose alerts fire
(the broker evaluates the shipped rules' conditions itself, dlx/alerts.py),
with thresholds from the config, and says when retention's archive cannot
be written; the workbench shows a queue's archive beside it and redrives
from there; in a real browser (Debian's chromium)."""

from __future__ import annotations

import pika
import pytest

from amqp_server.testing import BrokerThread

from .browser import Console, start_chromium
from .management_api import http
from .waiting import wait_for, wait_get_noack

pytestmark = pytest.mark.browser

# A dead letter older than a second alerts; the broker looks every second.
CONFIG = {"port": 0, "management-port": 0, "prometheus-port": 0,
          "dead-letter-alert-max-age": 1, "dead-letter-alert-interval": 1}


@pytest.fixture
def alerting_broker(tmp_path):
    """With an archive directory that cannot be made (a file is in the way)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with BrokerThread({**CONFIG, "dead-letter-archive-dir": str(blocker / "archive")},
                      data_dir=str(tmp_path / "data")) as broker:
        yield broker


def test_the_overview_names_the_dead_letter_queues_whose_alerts_fire_and_archive_trouble(
        alerting_broker):
    broker = alerting_broker
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.exchange_declare("al.dlx", "fanout")
    channel.queue_declare("al.rotting")
    channel.queue_bind("al.rotting", "al.dlx")
    channel.queue_declare("al.quiet")
    channel.queue_declare("al.work", arguments={"x-dead-letter-exchange": "al.dlx"})
    channel.basic_publish("", "al.work", b"poison")
    channel.basic_publish("", "al.quiet", b"fine")
    method, _, _ = wait_get_noack(channel, "al.work")
    channel.basic_reject(method.delivery_tag, requeue=False)

    def firing() -> list:
        return http(broker, "GET", "/api/overview")[1]["dead_letter_alerts"]
    assert wait_for(lambda: firing() == [{"vhost": "/", "queue": "al.rotting",
                                          "alerts": ["DeadLetterTooOld"]}], 15), firing()

    driver = start_chromium()
    try:
        console = Console(driver, broker.management_url)
        console.login("guest", "guest")
        console.open("overview")
        console.until(lambda: "al.rotting" in console.text("overview-dead-letter-alerts"),
                      "the overview does not name the rotting queue")
        text = console.text("overview-dead-letter-alerts")
        assert "DeadLetterTooOld" in text
        assert "al.quiet" not in text and "al.work" not in text
        # The archive that cannot be written is said beside the alarms.
        problem = console.text("overview-archive-problem")
        assert problem.startswith("Dead-letter archive: cannot use the dead-letter archive")
        assert "Not a directory" in problem
        link = console.css("#overview-dead-letter-alerts a")[0]
        assert link.get_attribute("href").endswith("#/queues/%2F/al.rotting")
        # Consumed, it stops alerting, and the overview says so.
        got, _, _ = channel.basic_get("al.rotting", auto_ack=True)
        assert got is not None
        console.until(lambda: console.text("overview-dead-letter-alerts")
                      == "No dead-letter alerts.", "the alert did not clear")
    finally:
        driver.quit()
        conn.close()


def test_the_workbench_shows_the_archive_beside_the_queue_and_redrives_from_it(tmp_path):
    with BrokerThread(CONFIG, data_dir=str(tmp_path / "data")) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.exchange_declare("ar.dlx", "fanout")
        channel.queue_declare("ar.dlq", durable=True,
                              arguments={"x-dead-letter-retention": 200})
        channel.queue_bind("ar.dlq", "ar.dlx")
        channel.queue_declare("ar.work", arguments={"x-dead-letter-exchange": "ar.dlx"})
        for n in range(2):
            channel.basic_publish("", "ar.work", f"archived {n}".encode(),
                                  pika.BasicProperties(message_id=f"arch-{n}"))
        for _ in range(2):
            method, _, _ = wait_get_noack(channel, "ar.work")
            channel.basic_reject(method.delivery_tag, requeue=False)
        assert wait_for(lambda: http(broker, "GET", "/api/queues/%2F/ar.dlq")[1][
            "dead_letters_archived"] == 2, 15)
        driver = start_chromium()
        try:
            console = Console(driver, broker.management_url)
            console.login("guest", "guest")
            console.open("dead-letters/%2F/ar.dlq")
            console.until(lambda: "2 archived" in console.text("archive-counts"),
                          "the workbench does not show the archive")
            row = console.css('#archived tbody tr[data-message-id="arch-1"]')[0]
            assert "rejected" in row.text and "ar.work" in row.text and "archived 1" in row.text
            console.css("input.archive-pick", row)[0].click()
            console.find("archive-redrive").click()
            console.until(lambda: console.text("archive-result").startswith("1 redriven"),
                          "no redrive result")
            console.until(lambda: console.css(
                '#archived tbody tr[data-message-id="arch-1"] td.time')[1].text != "",
                "the redrive is not shown")
            # A second redrive of it is a choice: left out, and offered.
            row = console.css('#archived tbody tr[data-message-id="arch-1"]')[0]
            console.css("input.archive-pick", row)[0].click()
            console.find("archive-redrive").click()
            console.until(lambda: "1 left: redriven before" in console.text("archive-result"),
                          "a second redrive was not held back")
            assert console.find("archive-redrive-again").text == "Redrive that one again"
            console.find("archive-redrive-again").click()
            console.until(lambda: console.text("archive-result").startswith("1 redriven"),
                          "the chosen second redrive did not happen")
        finally:
            driver.quit()
        for _ in range(2):  # the first redrive, then the one chosen again
            _, props, body = wait_get_noack(channel, "ar.work")
            assert body == b"archived 1" and props.message_id == "arch-1"
        conn.close()
