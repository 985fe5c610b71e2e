"""The driver JVM's stderr without its launcher's incubator-module warning
(spark/jvm_stderr.py), with a stand-in for the JVM: a process started
inside `without_chatter`, which writes after the block is left, as the
JVM goes on writing once the session started."""

from __future__ import annotations

import subprocess
import sys
import time

from spark.jvm_stderr import without_chatter

WRITES = ("import sys, time; time.sleep(0.2); "
          "sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\n'); "
          "sys.stderr.write('ERROR SparkContext: it broke\\n')")


def test_a_started_process_keeps_its_stderr_but_the_incubator_warning(capfd):
    with without_chatter():
        child = subprocess.Popen([sys.executable, "-c", WRITES])
    assert child.wait(timeout=30) == 0
    err = ""
    deadline = time.monotonic() + 10
    while "it broke" not in err and time.monotonic() < deadline:
        time.sleep(0.02)
        err += capfd.readouterr().err
    assert err == "ERROR SparkContext: it broke\n"
