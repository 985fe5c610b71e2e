"""Where a long audit is: each stage's name with the time since the start,
on stderr (stdout stays for the summary)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            print(f"amqp-dlq-audit [{self.elapsed():6.1f} s] {stage}", file=sys.stderr,
                  flush=True)
