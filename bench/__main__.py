"""python -m bench: run scenarios against AMQP URLs, side by side.

    python -m bench --url amqp://guest:guest@127.0.0.1:5672/ --scenario transient
    python -m bench --compare amqp://guest:guest@127.0.0.1:5672/   # ours vs that broker
    python -m bench --compare URL --baseline ../old-checkout  # and an older build too

--compare starts this project's broker in a subprocess on a free port and
runs every scenario against it and the reference URL in one run, a run on
each in turn, printing a markdown table of ratios (ours / reference).
--baseline adds a third broker, started from another checkout of this
project (a redesign's "before"), run in the same rotation, so that a
before/after comparison sees the same machine over the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from .registry import SCENARIOS


def start_our_broker(data_dir: str, checkout: str | None = None
                     ) -> tuple[subprocess.Popen, str]:
    """The broker of this checkout, or of `checkout` (run from there, so
    that its own packages are the ones imported)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--management-port", "-1",
         "--prometheus-port", "-1", "--data-dir", data_dir, "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True, cwd=checkout)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    return proc, f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def run(urls: dict[str, str], names: list[str], scale: float, repeat: int) -> dict:
    """Each scenario `repeat` times per broker, interleaved (one run on each
    broker in turn, so both see the same machine over the same minutes);
    per broker, the run with the median metric is kept (a best-of-N would
    favour whichever broker varies more), with the spread of the metric and
    how many runs it is the median of.  A run that failed (timed out, lost
    messages, got nacks) gives no number: it is counted as failed, never
    averaged in."""
    results: dict = {who: {} for who in urls}
    for name in names:
        outcomes: dict = {who: [] for who in urls}
        for _ in range(repeat):
            for who, url in urls.items():
                outcomes[who].append(SCENARIOS[name]["run"](url, scale))
        for who in urls:
            results[who][name] = _median(SCENARIOS[name]["metric"], outcomes[who])
            print(f"  {who} {name}: {json.dumps(results[who][name])}",
                  file=sys.stderr, flush=True)
    return results


def _median(metric: str, outcomes: list[dict]) -> dict:
    runs = sorted((r for r in outcomes if "failed" not in r), key=lambda r: r[metric])
    failures = [r["failed"] for r in outcomes if "failed" in r]
    if runs:
        median = dict(runs[len(runs) // 2])
        median["spread"] = [runs[0][metric], runs[-1][metric]]
    else:
        median = {"failed": failures[0]}
    median["runs"] = len(runs)
    median["failed_runs"] = len(failures)
    return median


def _shown(result: dict, key: str) -> str:
    value = result.get(key)
    if value is None:
        return "failed" if "failed" in result else "-"
    return f"{value:,}"


def _runs(result: dict) -> str:
    failed = result["failed_runs"]
    return f"{result['runs']}" + (f" ({failed} failed)" if failed else "")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="run against this AMQP URL only")
    target.add_argument("--compare", metavar="REFERENCE_URL",
                        help="run against our broker and this reference broker")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="scenario to run (repeatable; default all)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply message/connection counts (default 1.0)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per scenario; the median is reported")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="with --compare: also run the broker of this other checkout")
    args = parser.parse_args()
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "amqp_server")):
        parser.error(f"--baseline {args.baseline}: not a checkout of this project")
    names = args.scenario or list(SCENARIOS)

    if args.url:
        only = run({"url": args.url}, names, args.scale, args.repeat)["url"]
        print(json.dumps(only, indent=2))
        return 0

    started = []
    try:
        urls = {}
        for who, checkout in (("ours", None), ("baseline", args.baseline)):
            if who == "baseline" and not checkout:
                continue
            data_dir = tempfile.mkdtemp(prefix="amqp-bench-")
            proc, urls[who] = start_our_broker(data_dir, checkout)
            started.append((proc, data_dir))
        urls["reference"] = args.compare
        print(", ".join(f"{who}: {url}" for who, url in urls.items()), file=sys.stderr)
        results = run(urls, names, args.scale, args.repeat)
    finally:
        for proc, data_dir in started:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(data_dir, ignore_errors=True)
    _table(results, names, "ours", "this broker")
    if args.baseline:
        print()
        _table(results, names, "baseline", f"baseline ({args.baseline})")
    return 0


def _table(results: dict, names: list[str], who: str, title: str) -> None:
    mine_all, reference = results[who], results["reference"]
    print(f"| scenario | metric | {title} | RabbitMQ | ratio (ours / RabbitMQ) "
          "| runs (ours / RabbitMQ) |")
    print("|---|---|---:|---:|---:|---|")
    for name in names:
        metric = SCENARIOS[name]["metric"]
        mine, theirs = mine_all[name], reference[name]
        for key in (metric, *SCENARIOS[name].get("extra", ())):
            a, b = mine.get(key), theirs.get(key)
            ratio = f"{a / b:.2f}x" if a is not None and b else "-"
            label = f"{name} ({SCENARIOS[name]['what']})" if key == metric else name
            print(f"| {label} | {key} | {_shown(mine, key)} | {_shown(theirs, key)} "
                  f"| {ratio} | {_runs(mine)} / {_runs(theirs)} |")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
