"""Screenshots of the web console for the docs, taken the way the browser
tests drive it, after a few minutes of traffic so that the charts have
something to show: `python -m interop.console_screenshots docs/ [minutes]`.

It writes console-overview.png, console-queue.png, console-queues.png,
console-workbench.png and console-stream.png."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

import pika

from amqp_server.testing import BrokerThread

from .browser import Console, row_of, start_chromium
from .dead_letters import STREAM, dead_letters_into_a_stream, dead_letters_of_every_kind
from .management_api import call

WIDTH = 1400
STREAM_VHOST = "streams"


def traffic(url: str, stop: threading.Event) -> None:
    """Payments published at a rate that swells and ebbs, most consumed and
    acked, some rejected, some left to expire or pushed out by a length
    limit: all dead-lettered through `dlx` into orders.dlq."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    dead = {"x-dead-letter-exchange": "dlx"}
    channel.queue_declare("payments", durable=True, arguments=dead)
    channel.queue_declare("payments.slow", durable=True,
                          arguments={**dead, "x-message-ttl": 4000, "x-max-length": 8})
    sent = 0
    step = 0
    try:
        while not stop.is_set():
            step += 1
            burst = 4 + round(12 * (1 + math.sin(step / 12)))
            for _ in range(burst):
                sent += 1
                body = json.dumps({"payment": sent, "amount": sent % 97 + 0.5}).encode()
                props = pika.BasicProperties(message_id=f"pay-{sent}", delivery_mode=2,
                                             content_type="application/json")
                channel.basic_publish("", "payments.slow" if sent % 9 == 0 else "payments",
                                      body, props)
            for taken in range(burst - 2 + step % 3):
                method, _props, _body = channel.basic_get("payments")
                if method is None:
                    break
                if (sent + taken) % 13 == 0:
                    channel.basic_reject(method.delivery_tag, requeue=False)
                else:
                    channel.basic_ack(method.delivery_tag)
            connection.sleep(0.5)
    finally:
        connection.close()


def full_page(driver, path: Path) -> None:
    """The whole page, however long."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, max(1000, height + 140))
    time.sleep(1)  # the charts follow the new size
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, 1000)


def stream_screenshot(broker, console: Console, folder: Path) -> None:
    """A dead-letter stream's workbench: two messages redriven, and the
    question asked when a selection holds one of them.  In a virtual host
    of its own: the stream's `dlx` and `orders` are durable, the other
    screenshots' are not."""
    for path in (f"/api/vhosts/{STREAM_VHOST}", f"/api/permissions/{STREAM_VHOST}/guest"):
        status, answer = call(broker.management_url, "PUT", path,
                              {"configure": ".*", "write": ".*", "read": ".*"})
        assert status in (201, 204), (path, status, answer)
    connection = pika.BlockingConnection(pika.URLParameters(
        broker.url.rsplit("/", 1)[0] + f"/{STREAM_VHOST}"))
    dead_letters_into_a_stream(connection.channel())
    connection.close()
    console.open(f"dead-letters/{STREAM_VHOST}/{STREAM}")
    console.until(lambda: len(console.column("stream-messages", "Offset") or ()) > 20)
    for offsets in ((0, 1), (1, 2)):
        for offset in offsets:
            console.css(f'#stream-messages input.pick[data-offset="{offset}"]')[0].click()
        console.find("stream-redrive").click()
        if offsets == (0, 1):
            console.until(lambda: console.text("stream-redrive-result"))
            console.until(lambda: console.css('#stream-messages tr[data-redriven="true"]'))
    console.until(lambda: console.find("stream-confirm").is_displayed())
    console.driver.save_screenshot(str(folder / "console-stream.png"))


def main(out: str, minutes: float) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with BrokerThread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        dead_letters_of_every_kind(connection.channel())
        connection.close()
        stop = threading.Event()
        sender = threading.Thread(target=traffic, args=(broker.url, stop), daemon=True)
        sender.start()
        driver = start_chromium()
        try:
            console = Console(driver, broker.management_url)
            console.login("guest", "guest")
            time.sleep(minutes * 60)
            console.open("overview")
            console.until(lambda: console.find("overview-rates-chart").get_attribute(
                "data-points"))
            full_page(driver, folder / "console-overview.png")
            console.open("queues/%2F/payments")
            console.until(lambda: console.find("queue-rates-chart").get_attribute("data-points"))
            full_page(driver, folder / "console-queue.png")
            console.open("queues")
            console.until(lambda: "orders.dlq" in (console.column("queues", "Name") or ()))
            time.sleep(5.5)  # the rate columns
            driver.save_screenshot(str(folder / "console-queues.png"))
            stop.set()
            sender.join(10)
            console.open("dead-letters/%2F/orders.dlq")
            console.until(lambda: len(console.column("messages", "Seq") or ()) >= 3)
            row_of(console, "rejected-1").click()
            console.until(lambda: console.find("timeline").is_displayed())
            driver.save_screenshot(str(folder / "console-workbench.png"))
            stream_screenshot(broker, console, folder)
        finally:
            stop.set()
            driver.quit()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs",
         float(sys.argv[2]) if len(sys.argv) > 2 else 5.0)
