"""The audit's outputs from collected (small) tables: a self-contained
report.html with inlined PNG charts, CSV files and the terminal summary.
Nothing here touches Spark."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from datetime import date, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

REASON_COLOURS = {"rejected": "#d62728", "expired": "#ff7f0e", "maxlen": "#9467bd",
                  "delivery_limit": "#1f77b4"}
TITLES = {
    "over_time": "Dead letters over time, by reason",
    "by_queue_reason": "By queue and reason",
    "by_exchange": "By exchange (the one it was last published to)",
    "top_poison": "Top poison messages (by message-id, else body digest), ranked by deaths",
    "cycles": "Messages that cycled, with their path (first death first)",
    "time_to_death": "Time from publish (timestamp property) to death",
    "delivery_counts": "Deaths so far and quorum delivery counts",
    "reasons_per_queue": "Expired against rejected, per queue",
    "first_to_last": "First-death queue to the queue it died in last",
    "drops": "Dead letters that went nowhere, by cause",
    "replay_candidates": "Safe to move back (first death, transient reason, no cycle)",
}


class Table:
    def __init__(self, columns: list[str], rows: list[tuple]) -> None:
        self.columns = columns
        self.rows = rows


def cell(value) -> str:
    """One value as text, the same in the CSV, the HTML and the terminal."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "; ".join(cell(v) for v in value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def write_csv(path: Path, table: Table) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(table.columns)
        writer.writerows([cell(v) for v in row] for row in table.rows)


def write_summary(path: Path, summary: dict) -> None:
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


# ---- charts -------------------------------------------------------------------

def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def chart_over_time(table: Table) -> str | None:
    if not table.rows:
        return None
    buckets = sorted({row[0] for row in table.rows})
    figure, axes = plt.subplots(figsize=(9, 3.2))
    bottom = [0] * len(buckets)
    for reason, colour in REASON_COLOURS.items():
        counts = {row[0]: row[2] for row in table.rows if row[1] == reason}
        values = [counts.get(bucket, 0) for bucket in buckets]
        if any(values):
            axes.bar([cell(b) for b in buckets], values, bottom=bottom, color=colour,
                     label=reason)
            bottom = [a + b for a, b in zip(bottom, values)]
    axes.set_ylabel("dead letters")
    axes.legend(fontsize=8)
    axes.tick_params(axis="x", labelrotation=45, labelsize=7)
    return _png(figure)


def chart_bars(labels: list[str], values: list[int], xlabel: str) -> str | None:
    if not labels:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(labels) + 1))
    axes.barh(labels[::-1], values[::-1], color="#4c72b0")
    axes.set_xlabel(xlabel)
    return _png(figure)


# ---- the HTML report -------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f2f2f2} td.n{text-align:right}
.headline{display:flex;gap:2em;flex-wrap:wrap}
.headline div{background:#f7f7f7;padding:.6em 1em;border-radius:6px}
.headline b{display:block;font-size:1.6em}
"""
MAX_HTML_ROWS = 200


def _html_table(table: Table) -> str:
    if not table.rows:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows[:MAX_HTML_ROWS]:
        cells = "".join(
            f'<td class="n">{v}</td>' if isinstance(v, int) else f"<td>{html.escape(cell(v))}</td>"
            for v in row)
        body.append(f"<tr>{cells}</tr>")
    more = len(table.rows) - MAX_HTML_ROWS
    note = f"<p>{more} more rows in the CSV and Parquet files.</p>" if more > 0 else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{note}"


def _img(png: str | None) -> str:
    return f'<img alt="chart" src="data:image/png;base64,{png}">' if png else ""


def render_html(summary: dict, tables: dict[str, Table]) -> str:
    headline = "".join(
        f"<div>{html.escape(label)}<b>{summary.get(key, 0)}</b></div>"
        for key, label in (("events", "events"), ("dead_lettered", "dead-lettered"),
                           ("dropped", "dropped"), ("messages", "distinct messages"),
                           ("cycled_messages", "cycled"), ("queues", "queues")))
    reasons = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v}</td></tr>"
                      for k, v in summary["by_reason"].items())
    causes = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v}</td></tr>"
                     for k, v in summary["drops_by_cause"].items())
    charts = {
        "over_time": chart_over_time(tables["over_time"]),
        "by_queue_reason": chart_bars(*_totals(tables["by_queue_reason"], 1), "dead letters"),
        "drops": chart_bars(*_totals(tables["drops"], 0), "dropped"),
        "time_to_death": chart_bars(*_totals(tables["time_to_death"], 1, keep_order=True),
                                    "dead letters"),
    }
    sections = []
    for name, table in tables.items():
        sections.append(f"<h2>{html.escape(TITLES.get(name, name))}</h2>"
                        f"{_img(charts.get(name))}{_html_table(table)}")
    span = f"{summary.get('first_event') or '-'} to {summary.get('last_event') or '-'}"
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>Dead-letter audit</title><style>{_STYLE}</style></head><body>"
            f"<h1>Dead-letter audit</h1><p>{html.escape(span)}</p>"
            f"<div class='headline'>{headline}</div>"
            f"<h2>By reason</h2><table>{reasons}</table>"
            f"<h2>Drops by cause</h2><table>{causes}</table>"
            f"{''.join(sections)}</body></html>")


def _totals(table: Table, label_column: int, keep_order: bool = False,
            limit: int = 15) -> tuple[list[str], list[int]]:
    """Events added up per label (the `events` column), largest first."""
    index = table.columns.index("events")
    totals: dict[str, int] = {}
    for row in table.rows:
        label = cell(row[label_column])
        totals[label] = totals.get(label, 0) + row[index]
    items = list(totals.items())
    if not keep_order:
        items.sort(key=lambda item: -item[1])
    items = items[:limit]
    return [label for label, _ in items], [value for _, value in items]


# ---- the terminal ------------------------------------------------------------------

def terminal_summary(summary: dict, out: Path) -> str:
    from rich.console import Console
    from rich.table import Table as RichTable

    table = RichTable(title="Dead-letter audit", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("events", "dead_lettered", "dropped", "messages", "cycled_messages"):
        table.add_row(key.replace("_", " "), str(summary[key]))
    for reason, count in summary["by_reason"].items():
        if count:
            table.add_row(f"reason {reason}", str(count))
    for cause, count in summary["drops_by_cause"].items():
        if count:
            table.add_row(f"dropped: {cause}", str(count))
    console = Console(file=io.StringIO(), width=70)
    console.print(table)
    console.print(f"report: {out / 'report.html'}")
    return console.file.getvalue()
