"""Reading Prometheus metrics: one scrape of the exporter as {name: {labels:
value}}, and the metric names a PromQL expression or a Grafana dashboard
selects."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(broker, path: str = "/metrics") -> dict:
    """{metric family name: {frozenset(labels): value}} of one scrape."""
    with urllib.request.urlopen(broker.prometheus_url + path, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    found: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return found


def value(metrics: dict, name: str, **labels) -> float:
    return metrics[name][frozenset(labels.items())]


_NOT_METRICS = {  # PromQL's functions and keywords, and Grafana's label_values
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "rate", "irate", "increase", "delta", "idelta", "deriv",
    "predict_linear", "abs", "ceil", "floor", "round", "exp", "ln", "log2", "log10", "sqrt",
    "clamp", "clamp_min", "clamp_max", "histogram_quantile", "label_replace", "label_join",
    "vector", "scalar", "time", "timestamp", "absent", "sort", "sort_desc", "changes",
    "resets", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "last_over_time", "quantile_over_time", "bool", "and", "or", "unless",
    "offset", "label_values",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values()
    query) selects: identifiers left once strings, label matchers, ranges,
    the label lists of by/on/without/ignoring/group_left/group_right,
    functions, keywords and Grafana variables are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"label_values\(([^,()]+),[^)]*\)", r" \1 ", expr)
    names = set()
    for found in re.finditer(r"(?<![\w$.])[a-zA-Z_:][\w:]*", expr):
        name = found.group(0)
        if name not in _NOT_METRICS and not expr[found.end():].lstrip().startswith("("):
            names.add(name)
    return names


def dashboard_metrics(dashboard: dict) -> set[str]:
    """Every metric name of a Grafana dashboard's panels and query variables."""
    names: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                names.update(metric_names(node["expr"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            names.update(metric_names(query["query"] if isinstance(query, dict) else query))
    return names
