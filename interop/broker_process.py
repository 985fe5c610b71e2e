"""A broker in a process of its own on a data directory, to be killed with
SIGKILL or stopped and started again on the same directory."""

from __future__ import annotations

import signal
import subprocess
import sys

import pika

QUEUE = "durable-work"


class BrokerProcess:
    def __init__(self, data_dir: str, config: str | None = None) -> None:
        extra = ["--config", config] if config else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_server", "--port", "0", "--management-port", "-1",
             "--prometheus-port", "-1", "--data-dir", data_dir, "--log-level", "warning", *extra],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.url = f"amqp://guest:guest@127.0.0.1:{int(line.rsplit(':', 1)[1])}/%2F"

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def drain(url: str) -> list[tuple[bytes, bool]]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    got = []
    while True:
        method, _, body = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        got.append((body, method.redelivered))
    conn.close()
    return got
