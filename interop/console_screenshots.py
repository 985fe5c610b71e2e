"""Screenshots of the web console for the README, taken the way the browser
tests drive it: `python -m interop.console_screenshots docs/`."""

from __future__ import annotations

import sys
from pathlib import Path

import pika

from amqp_server.testing import BrokerThread

from .browser import Console, start_chromium
from .test_console_browser import dead_letters_of_every_kind, row_of


def main(out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with BrokerThread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        dead_letters_of_every_kind(connection.channel())
        driver = start_chromium()
        try:
            console = Console(driver, broker.management_url)
            console.login("guest", "guest")
            console.open("queues")
            console.until(lambda: "orders.dlq" in (console.column("queues", "Name") or ()))
            driver.save_screenshot(str(folder / "console-queues.png"))
            console.open("dead-letters/%2F/orders.dlq")
            console.until(lambda: len(console.column("messages", "Seq") or ()) == 3)
            row_of(console, "rejected-1").click()
            console.until(lambda: console.find("timeline").is_displayed())
            driver.save_screenshot(str(folder / "console-workbench.png"))
        finally:
            driver.quit()
            connection.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs")
