"""Where a long audit is: each stage's name with the time since the start,
on stderr (stdout stays for the summary), and inside a stage that takes a
while, how far Spark's jobs are (read from Spark's status tracker on a
thread, a line every few seconds while the numbers move)."""

from __future__ import annotations

import sys
import threading
import time

# How long a stage may run without a word, and how often Spark is asked.
QUIET_SECONDS = 3.0
POLL_SECONDS = 0.5


class Progress:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.started = time.monotonic()
        self.stage = ""
        self._said_at = self.started
        self._lock = threading.Lock()
        self._follower: _Follower | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, stage: str) -> None:
        self.stage = stage
        self._say(stage)

    def _say(self, line: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._said_at = time.monotonic()
            print(f"amqp-dlq-audit [{self.elapsed():6.1f} s] {line}", file=sys.stderr,
                  flush=True)

    def follow(self, spark) -> None:
        """Say how far Spark's jobs are while a stage runs long (local mode
        and a cluster; a Spark Connect session has no status tracker)."""
        if self.quiet or self._follower is not None:
            return
        try:
            tracker = spark.sparkContext.statusTracker()
        except Exception:  # Spark Connect: no SparkContext on this side
            return
        self._follower = _Follower(self, tracker)

    def unfollow(self) -> None:
        """Stop asking Spark (before the session stops)."""
        if self._follower is not None:
            self._follower.stop()
            self._follower = None


class _Follower(threading.Thread):
    def __init__(self, progress: Progress, tracker) -> None:
        super().__init__(daemon=True, name="audit-progress")
        self.progress, self.tracker = progress, tracker
        self._stopped = threading.Event()
        self._stage = progress.stage
        self._before: set[int] = set(tracker.getJobIdsForGroup(None) or [])
        self.start()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)

    def run(self) -> None:
        last = None
        while not self._stopped.wait(POLL_SECONDS):
            try:
                said = self._where()
            except Exception:  # the session is going away: nothing more to say
                return
            if said is None or said == last:
                continue
            if time.monotonic() - self.progress._said_at >= QUIET_SECONDS:
                self.progress._say(f"  {said}")
                last = said

    def _where(self) -> str | None:
        """`N Spark jobs done, the running one at T of U tasks`, or None
        while no job runs."""
        known = set(self.tracker.getJobIdsForGroup(None) or [])
        if self.progress.stage != self._stage:  # a new stage counts afresh
            self._stage, self._before = self.progress.stage, known
        running, active = [], set(self.tracker.getActiveJobsIds())
        for job_id in active:
            job = self.tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = self.tracker.getStageInfo(stage_id)
                if stage is not None and stage.numActiveTasks + stage.numCompletedTasks:
                    running.append((stage.numCompletedTasks, stage.numTasks))
        if not running:
            return None
        finished = sum(1 for job_id in known - self._before - active
                       if (job := self.tracker.getJobInfo(job_id)) is not None
                       and job.status == "SUCCEEDED")
        done, total = (sum(column) for column in zip(*running))
        return (f"{finished} Spark job{'s' if finished != 1 else ''} done, "
                f"the running one at {done} of {total} tasks")
