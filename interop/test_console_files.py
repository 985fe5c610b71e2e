"""The web console's files come from the package, without logging in; the
API behind them still asks for it.  The overview carries what the console's
first page shows beyond RabbitMQ's fields: dead letters by reason, alarms."""

from __future__ import annotations

from .dead_letters import dead_letters
from .management_api import fetch, http


def test_the_page_and_its_files_are_served_from_the_package(broker):
    status, headers, page = fetch(broker, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="/console/console.js"' in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    for name, kind in (("console.js", "application/javascript"), ("console.css", "text/css")):
        status, headers, body = fetch(broker, "/console/" + name)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    assert fetch(broker, "/console/__init__.py")[0] == 404
    assert fetch(broker, "/api/overview")[0] == 401


def test_overview_counts_dead_letters_by_reason_and_names_alarms(broker, channel):
    dead_letters(channel, [b"a", b"b"])
    status, overview = http(broker, "GET", "/api/overview")
    assert status == 200
    assert overview["dead_lettered"] == {"rejected": 2, "expired": 0, "maxlen": 0,
                                         "delivery_limit": 0}
    assert overview["alarms"] == []
