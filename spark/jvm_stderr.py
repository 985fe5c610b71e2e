"""The driver JVM's stderr, less the one start-up line no setting silences.

Spark's launcher starts every JVM with `--add-modules=jdk.incubator.vector`
(its JavaModuleOptions, not configurable), and Java announces an incubator
module on System.err before any log configuration is read: "WARNING: Using
incubator modules: jdk.incubator.vector", even under `--quiet`.  Spark's
own log is kept to errors by jvm_start.py's log configuration.

While the session starts, this process's stderr (fd 2, which the JVM that
PySpark launches inherits) is a pipe; a thread copies what comes through
it to the real stderr, line by line, but for that warning.  The JVM keeps
writing through the pipe after the session started, so anything else it
says (an error, a crash report) still reaches the terminal.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CHATTER = (b"WARNING: Using incubator modules: ",)


def _forward(pipe: int, target: int) -> None:
    """Copies lines from `pipe` to `target`, but for CHATTER, until every
    process holding the pipe's other end has closed it."""
    writable = True
    with os.fdopen(pipe, "rb") as lines, os.fdopen(target, "wb", buffering=0) as out:
        for line in lines:
            if not writable or line.startswith(CHATTER):
                continue  # a closed stderr: read on, so no writer ever blocks
            try:
                out.write(line)
            except OSError:
                writable = False


def _flush() -> None:
    if sys.stderr is not None:
        sys.stderr.flush()


@contextmanager
def without_chatter() -> Iterator[None]:
    """Inside, fd 2 goes through the filter; processes started inside keep
    writing through it once it is left (the thread ends when they exit)."""
    _flush()
    try:
        target = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep quiet
        yield
        return
    pipe, inlet = os.pipe()
    saved = os.dup(2)
    threading.Thread(target=_forward, args=(pipe, target), daemon=True,
                     name="jvm-stderr").start()
    os.dup2(inlet, 2)
    os.close(inlet)
    try:
        yield
    finally:
        _flush()
        os.dup2(saved, 2)
        os.close(saved)
