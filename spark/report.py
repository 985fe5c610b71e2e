"""The audit's outputs from collected (small) tables: a self-contained
report.html with inlined PNG charts, CSV files, summary.json and the
terminal summary.  Nothing here touches Spark."""

from __future__ import annotations

import csv
import html
import io
import json
from datetime import date, datetime
from pathlib import Path

from dlx.deaths import REASONS

TITLES = {
    "over_time": "Dead letters over time, by reason",
    "by_node": "By broker (node) and reason",
    "by_queue_reason": "By queue, split by reason",
    "by_exchange": "By exchange (the one it was last published to)",
    "top_poison": "Top poison messages: died twice or more (x-death total or deaths in the "
                  "log), by message-id, else body digest; most deaths first, at most 100",
    "cycles": "Messages that cycled: dead-lettered back to a queue they had died in (not "
              "redriven there), with their path (first death first)",
    "time_to_death": "Time from publish (timestamp property) to death",
    "delivery_counts": "Deaths so far and quorum delivery counts",
    "reasons_per_queue": "Expired against rejected, per queue",
    "first_to_last": "First-death queue to the queue it died in last",
    "drops": "Dead letters that went nowhere, by cause",
    "replay_candidates": "Replay candidates (died once, transient reason, in a dead-letter "
                         "queue now; expires_again: its queue's own TTL expired it, and will "
                         "again if it goes back there); also in replay-candidates.ndjson",
}


class Table:
    def __init__(self, columns: list[str], rows: list[tuple]) -> None:
        self.columns = columns
        self.rows = rows

    def dicts(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def cell(value) -> str:
    """One value as text, the same in the CSV, the HTML and the terminal."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
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


# ---- the HTML report -------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f2f2f2} td.n{text-align:right}
.headline{display:flex;gap:2em;flex-wrap:wrap}
.headline div{background:#f7f7f7;padding:.6em 1em;border-radius:6px}
.headline b{display:block;font-size:1.6em}
.note{background:#fff6d5;padding:.6em 1em;border-radius:6px}
"""
MAX_HTML_ROWS = 200


def _html_table(table: Table) -> str:
    if not table.rows:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows[:MAX_HTML_ROWS]:
        cells = "".join(
            f'<td class="n">{v}</td>' if isinstance(v, int) and not isinstance(v, bool)
            else f"<td>{html.escape(cell(v))}</td>"
            for v in row)
        body.append(f"<tr>{cells}</tr>")
    more = len(table.rows) - MAX_HTML_ROWS
    note = f"<p>{more} more rows in the CSV and Parquet files.</p>" if more > 0 else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{note}"


def _img(png: str | None) -> str:
    return f'<img alt="chart" src="data:image/png;base64,{png}">' if png else ""


# The tables the charts draw (the replay candidates can be as many rows as events).
CHARTED = ("over_time", "by_node", "by_queue_reason", "drops", "time_to_death")


def _charts(tables: dict[str, Table]) -> dict[str, str | None]:
    # Imported here: matplotlib takes half a second, which audit.py spends
    # while the JVM starts (see CHARTS there).
    from . import charts

    rows = {name: tables[name].dicts() for name in CHARTED}
    return {
        "over_time": charts.over_time(rows["over_time"]),
        "by_node": charts.by_node(rows["by_node"], REASONS),
        "by_queue_reason": charts.by_queue_reason(rows["by_queue_reason"]),
        "drops": charts.drops(rows["drops"]),
        "time_to_death": charts.time_to_death(rows["time_to_death"]),
    }


def expiring_again_note(count: int) -> str:
    return ("replay candidates that expired by their queue's own TTL (x-death records no "
            f"expiration of the message's own): {count}; redriven to that queue, such a "
            "message expires again when the TTL runs out unless a consumer takes it first "
            "(marked expires_again)")


def headline(summary: dict) -> str:
    events = summary["events"]
    return f"{events} dead letter{'' if events == 1 else 's'}"


def render_html(summary: dict, tables: dict[str, Table]) -> str:
    boxes = "".join(
        f"<div>{html.escape(label)}<b>{summary.get(key, 0)}</b></div>"
        for key, label in (("events", "events"), ("dead_lettered", "dead-lettered"),
                           ("dropped", "dropped"), ("messages", "distinct messages"),
                           ("cycled_messages", "cycled"),
                           ("died_again_after_redrive", "died again after a redrive"),
                           ("queues", "queues"),
                           ("nodes", "brokers")))
    notes = "".join(f"<p class='note'>{html.escape(note)}</p>" for note in summary["notes"])
    reasons = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v}</td></tr>"
                      for k, v in summary["by_reason"].items())
    causes = "".join(f"<tr><td>{html.escape(k)}</td><td class='n'>{v}</td></tr>"
                     for k, v in summary["drops_by_cause"].items())
    pictures = _charts(tables)
    sections = "".join(f"<h2>{html.escape(TITLES.get(name, name))}</h2>"
                       f"{_img(pictures.get(name))}{_html_table(table)}"
                       for name, table in tables.items())
    span = f"{summary.get('first_event') or '-'} to {summary.get('last_event') or '-'}"
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>Dead-letter audit</title><style>{_STYLE}</style></head><body>"
            f"<h1>Dead-letter audit: {html.escape(headline(summary))}</h1>"
            f"<p>{html.escape(span)}</p>{notes}"
            f"<div class='headline'>{boxes}</div>"
            f"<h2>By reason</h2><table>{reasons}</table>"
            f"<h2>Drops by cause</h2><table>{causes}</table>"
            f"{sections}</body></html>")


# ---- the terminal ------------------------------------------------------------------

LABELS = {"died_again_after_redrive": "died again after a redrive"}


def terminal_summary(summary: dict, out: Path) -> str:
    # rich draws the terminal's table only: the report's files need none of
    # the audit extra but pyarrow (the broker's own dependency).
    from rich.console import Console
    from rich.table import Table as RichTable

    table = RichTable(title=f"Dead-letter audit: {headline(summary)}", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("events", "dead_lettered", "dropped", "messages", "cycled_messages",
                "died_again_after_redrive", "nodes"):
        table.add_row(LABELS.get(key, key.replace("_", " ")), str(summary[key]))
    for reason, count in summary["by_reason"].items():
        if count:
            table.add_row(f"reason {reason}", str(count))
    for cause, count in summary["drops_by_cause"].items():
        if count:
            table.add_row(f"dropped: {cause}", str(count))
    if "replay_candidates" in summary:
        table.add_row("replay candidates", str(summary["replay_candidates"]))
    console = Console(file=io.StringIO(), width=70)
    console.print(table)
    for note in summary["notes"]:
        console.print(f"note: {note}", highlight=False)
    console.print(f"report: {out / 'report.html'}", highlight=False)
    return console.file.getvalue()
