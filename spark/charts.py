"""The report's charts, drawn from the collected tables as PNG (inlined in
report.html).  Nothing here touches Spark."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .buckets import BUCKET_LABELS  # noqa: E402

REASON_COLOURS = {"rejected": "#d62728", "expired": "#ff7f0e", "maxlen": "#9467bd",
                  "delivery_limit": "#1f77b4"}
MAX_BARS = 15
# A time axis keeps every bar but names at most this many: three days of
# hourly bars named one by one overlapped into an unreadable band.
MAX_TIME_LABELS = 15


def _count_ticks() -> MaxNLocator:
    """matplotlib's default ticks (AutoLocator's steps), whole numbers only:
    there are no 2.5 dead letters."""
    return MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True)


def _png(figure) -> str:
    buffer = io.BytesIO()
    # No metadata: the same tables give the same bytes (the tests compare
    # report.html between local mode and a cluster).
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight",
                   metadata={"Software": None})
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def _colours(names: list[str]) -> dict[str, str]:
    """Reasons in their own colours, anything else (nodes) in tab10's."""
    if all(name in REASON_COLOURS for name in names):
        return REASON_COLOURS
    palette = plt.get_cmap("tab10").colors
    return {name: matplotlib.colors.to_hex(palette[n % len(palette)])
            for n, name in enumerate(names)}


def _stacks(rows: list[dict], label: Callable[[dict], str], stack: str,
            keep_order: bool = False) -> tuple[list[str], dict[str, list[int]]]:
    """Events per label split by the `stack` column: the labels with the
    most events first (or in table order), at most MAX_BARS of them."""
    totals: dict[str, int] = {}
    parts: dict[str, dict[str, int]] = {}
    for row in rows:
        name = label(row)
        totals[name] = totals.get(name, 0) + row["events"]
        by_stack = parts.setdefault(str(row[stack]), {})
        by_stack[name] = by_stack.get(name, 0) + row["events"]
    labels = list(totals)
    if not keep_order:
        labels.sort(key=lambda name: -totals[name])
        labels = labels[:MAX_BARS]
    return labels, {name: [counts.get(label, 0) for label in labels]
                    for name, counts in sorted(parts.items())}


def _reordered(labels: list[str], stacks: dict[str, list[int]],
               key) -> tuple[list[str], dict[str, list[int]]]:
    order = sorted(range(len(labels)), key=lambda n: key(labels[n]))
    return [labels[n] for n in order], {k: [v[n] for n in order] for k, v in stacks.items()}


def stacked(labels: list[str], stacks: dict[str, list[int]], ylabel: str,
            horizontal: bool = False) -> str | None:
    if not labels:
        return None
    if horizontal:
        figure, axes = plt.subplots(figsize=(7, 0.35 * len(labels) + 1.2))
        labels, stacks = labels[::-1], {k: v[::-1] for k, v in stacks.items()}
    else:
        figure, axes = plt.subplots(figsize=(9, 3.2))
    colours = _colours(list(stacks))
    base = [0] * len(labels)
    for name, values in stacks.items():
        if not any(values):
            continue
        if horizontal:
            axes.barh(labels, values, left=base, color=colours[name], label=name)
        else:
            axes.bar(labels, values, bottom=base, color=colours[name], label=name)
        base = [a + b for a, b in zip(base, values)]
    (axes.xaxis if horizontal else axes.yaxis).set_major_locator(_count_ticks())
    if horizontal:
        axes.set_xlabel(ylabel)
    else:
        axes.set_ylabel(ylabel)
        step = -(-len(labels) // MAX_TIME_LABELS)
        axes.set_xticks(range(0, len(labels), step), labels[::step])
        axes.tick_params(axis="x", labelrotation=45, labelsize=7)
    axes.legend(fontsize=8)
    return _png(figure)


def _label(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if hasattr(value, "strftime") else str(value)


def _queue(row: dict) -> str:
    name = row["queue"] if row["vhost"] == "/" else f"{row['vhost']}/{row['queue']}"
    return f"{row['node']}: {name}" if "node" in row else name


def over_time(rows: list[dict]) -> str | None:
    """Stacked by reason; by node when the tables are split by node."""
    stack = "node" if rows and "node" in rows[0] else "reason"
    labels, stacks = _stacks(rows, lambda row: _label(row["bucket"]), stack, keep_order=True)
    return stacked(*_reordered(labels, stacks, key=lambda label: label), "dead letters")


def by_queue_reason(rows: list[dict]) -> str | None:
    return stacked(*_stacks(rows, _queue, "reason"), "dead letters", horizontal=True)


def by_node(rows: list[dict], reasons: tuple[str, ...]) -> str | None:
    labels = [row["node"] for row in rows]
    return stacked(labels, {reason: [row[reason] for row in rows] for reason in reasons},
                   "dead letters", horizontal=True)


def drops(rows: list[dict]) -> str | None:
    return stacked(*_stacks(rows, lambda row: row["drop_cause"], "reason"), "dropped",
                   horizontal=True)


def time_to_death(rows: list[dict]) -> str | None:
    labels, stacks = _stacks(rows, lambda row: row["bucket"], "reason", keep_order=True)
    return stacked(*_reordered(labels, stacks, key=BUCKET_LABELS.index), "dead letters",
                   horizontal=True)
