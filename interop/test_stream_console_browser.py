"""A stream in the web console, in a real browser (Debian's chromium through
Selenium), issue 30: streams are marked in the queue list; a stream's page
shows its size, segments, first and last offset and each consumer's
offset; its workbench browses the dead letters a dead-letter exchange
routed into it by offset and time, filtered and paged forward, and
redrives a selection, or all that a filter takes from a start offset, to
its origin (checked with pika): the stream keeps them, marked as
redriven, and redriving one again is a second, deliberate choice."""

from __future__ import annotations

import datetime

import pika
import pytest

from .browser import Console
from .dead_letters import REJECTED, STREAM, count, dead_letters_into_a_stream
from .waiting import wait_get

pytestmark = pytest.mark.browser


def offsets(first: int, last: int) -> list[str]:
    return [str(n) for n in range(first, last + 1)]


@pytest.fixture
def dead_letter_stream(channel):
    dead_letters_into_a_stream(channel)
    return channel


@pytest.fixture
def stream_reader(broker, dead_letter_stream):
    """A consumer reading the stream from offset 5 with a prefetch of 2: it
    stops at offset 7 until it acks."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=2)
    tag = channel.basic_consume(STREAM, lambda *a: None, arguments={"x-stream-offset": 5})
    conn.process_data_events(0.2)
    yield tag
    conn.close()


def page_of_20(console: Console) -> None:
    from selenium.webdriver.support.ui import Select
    Select(console.find("page-size")).select_by_value("20")


def picks(console: Console, *offsets: int) -> None:
    for offset in offsets:
        console.css(f'#stream-messages input.pick[data-offset="{offset}"]')[0].click()


def redriven_marks(console: Console) -> dict[str, str]:
    return {row.get_attribute("data-offset"): row.get_attribute("data-redriven")
            for row in console.css("#stream-messages tbody tr[data-offset]")}


def test_streams_are_marked_and_a_streams_page_shows_its_log_and_consumers(
        broker, console, dead_letter_stream, stream_reader):
    console.login("guest", "guest")
    console.open("queues")
    console.until(lambda: len(console.css(f'#queues [data-stream="{STREAM}"]')) == 1)
    assert console.css('#queues [data-stream="orders"]') == []
    assert sorted(console.column("queues", "Type")) == ["classic", "classic", "stream"]

    console.open(f"queues/%2F/{STREAM}")
    console.until(lambda: console.find("stream-log").is_displayed())
    console.until(lambda: console.text("stream-last-offset").startswith(str(REJECTED)))
    assert console.text("stream-first-offset").startswith("0")
    assert console.text("stream-segments").startswith("1")
    assert console.text("stream-messages-count").startswith(str(REJECTED + 1))
    size = console.text("stream-size").splitlines()[0]
    assert size.endswith((" B", " KiB")), size
    console.shows("stream-consumers", "Consumer", [stream_reader])
    console.shows("stream-consumers", "Next offset", ["7"])
    console.shows("stream-consumers", "Behind", [str(REJECTED + 1 - 7)])


def test_the_stream_workbench_browses_by_offset_time_and_filter_and_pages_forward(
        broker, console, dead_letter_stream):
    console.login("guest", "guest")
    console.open("dead-letters")
    console.until(lambda: any(link.text == STREAM for link in console.css("#dead-letter-queues a")))
    assert console.css(f'#dead-letter-queues [data-stream="{STREAM}"]')
    next(link for link in console.css("#dead-letter-queues a") if link.text == STREAM).click()
    console.shows("stream-messages", "Offset", offsets(0, 22))
    assert console.text("workbench-title") == f"{STREAM} (/) stream"
    assert console.find("page-next").get_attribute("disabled") is not None
    page_of_20(console)
    console.shows("stream-messages", "Offset", offsets(0, 19))
    assert console.column("stream-messages", "Message id")[:2] == ["bad-0", "bad-1"]
    assert set(console.column("stream-messages", "Reason")) == {"rejected"}
    assert set(console.column("stream-messages", "Original queue")) == {"orders"}
    assert console.find("page-prev").get_attribute("disabled") is not None
    console.find("page-next").click()
    console.shows("stream-messages", "Offset", offsets(20, 22))
    assert console.column("stream-messages", "Reason") == ["rejected", "rejected", "expired"]
    assert console.column("stream-messages", "Original queue")[-1] == "orders.ttl"
    assert console.find("page-next").get_attribute("disabled") is not None
    console.find("page-prev").click()
    console.shows("stream-messages", "Offset", offsets(0, 19))

    # A message's deaths under its row, as in a queue's workbench.
    console.css('#stream-messages tr[data-offset="3"]')[0].click()
    console.until(lambda: console.find("timeline").is_displayed())
    assert console.css("#timeline li")[1].text.startswith("orders rejected")
    assert console.css("#timeline li")[-1].text == f"Now in {STREAM}"

    console.type("stream-offset", "18")
    console.find("stream-go").click()
    console.shows("stream-messages", "Offset", offsets(18, 22))
    console.find("filter-reason").send_keys("expired")
    console.find("stream-go").click()
    console.shows("stream-messages", "Message id", ["late-1"])
    console.find("filter-reset").click()
    console.shows("stream-messages", "Offset", offsets(0, 19))
    console.type("filter-message_id", "bad-21")
    console.find("stream-go").click()
    console.shows("stream-messages", "Offset", ["21"])
    console.find("filter-reset").click()

    # From a moment: an hour ahead holds nothing yet, an hour ago everything.
    def start_at(moment: datetime.datetime) -> None:
        console.driver.execute_script("arguments[0].value = arguments[1]",
                                      console.find("stream-time"),
                                      moment.strftime("%Y-%m-%dT%H:%M:%S"))
        console.find("stream-go").click()
    start_at(datetime.datetime.now() + datetime.timedelta(hours=1))
    console.until(lambda: console.text("page-position") == "no messages here")
    assert console.css("#stream-messages tbody tr") == []
    start_at(datetime.datetime.now() - datetime.timedelta(hours=1))
    console.shows("stream-messages", "Offset", offsets(0, 19))
    assert count(dead_letter_stream, STREAM) == REJECTED + 1  # nothing consumed


def test_redrive_of_a_selection_reaches_the_origin_and_the_stream_keeps_it_marked(
        broker, console, dead_letter_stream):
    channel = dead_letter_stream
    console.login("guest", "guest")
    console.open(f"dead-letters/%2F/{STREAM}")
    console.shows("stream-messages", "Offset", offsets(0, 22))
    picks(console, 0, 1)
    assert console.text("stream-picked") == "2 selected"
    console.find("stream-redrive").click()
    console.until(lambda: console.text("stream-redrive-result") == "2 redriven to origin.")
    got = [wait_get(channel, "orders")[2] for _ in range(2)]
    assert got == [b'{"n": 0}', b'{"n": 1}']  # back in the queue they died in
    assert count(channel, STREAM) == REJECTED + 1  # the stream keeps them
    console.until(lambda: redriven_marks(console).get("1") == "true")
    marks = redriven_marks(console)
    assert (marks["0"], marks["1"], marks["2"]) == ("true", "true", "false")
    assert console.column("stream-messages", "Redriven")[:3] == ["redriven", "redriven", ""]

    # One of the selection was redriven before: asked first; only the other goes.
    picks(console, 1, 2)
    assert console.text("stream-picked") == "2 selected, 1 of them redriven before"
    console.find("stream-redrive").click()
    console.until(lambda: console.find("stream-confirm").is_displayed())
    assert console.text("stream-confirm-text").startswith(
        "1 of the 2 selected was redriven before (offset 1). Redrive it again?")
    assert count(channel, "orders") == 0  # nothing sent while asking
    console.find("stream-redrive-others").click()
    console.until(lambda: console.text("stream-redrive-result") ==
                  "1 redriven to origin; 1 left: redriven before.")
    assert wait_get(channel, "orders")[2] == b'{"n": 2}'
    assert count(channel, "orders") == 0

    # Again, deliberately.
    console.until(lambda: redriven_marks(console).get("2") == "true")
    picks(console, 0)
    console.find("stream-redrive").click()
    console.until(lambda: console.find("stream-confirm").is_displayed())
    console.find("stream-redrive-again").click()
    console.until(lambda: console.text("stream-redrive-result") == "1 redriven to origin.")
    method, props, body = wait_get(channel, "orders")
    assert body == b'{"n": 0}' and props.message_id == "bad-0"
    assert count(channel, STREAM) == REJECTED + 1


def test_redrive_of_all_matching_sends_what_the_filter_takes_from_the_start_once(
        broker, console, dead_letter_stream):
    channel = dead_letter_stream
    console.login("guest", "guest")
    console.open(f"dead-letters/%2F/{STREAM}")
    console.shows("stream-messages", "Offset", offsets(0, 22))
    # From offset 5, bodies holding a "1": 10-19 and 21; not 0-4 (before the
    # start), nor 5-9, 20 and late-1 at 22 (the filter leaves them).
    matching = [n for n in range(5, REJECTED) if "1" in str(n)]
    console.type("stream-offset", "5")
    console.type("filter-body", "1")
    console.find("stream-go").click()
    console.shows("stream-messages", "Offset", [str(n) for n in matching])

    console.find("stream-redrive-all").click()
    console.until(lambda: console.find("stream-all-confirm").is_displayed())
    assert console.text("stream-all-confirm-text") == (
        'Redrive all messages matching body containing "1" from offset 5 on to their '
        "origin? Those redriven before are left out.")
    assert count(channel, "orders") == 0  # nothing sent while asking
    console.find("stream-redrive-all-yes").click()
    console.until(lambda: console.text("stream-redrive-result") ==
                  f"{len(matching)} redriven to origin.")
    got = [wait_get(channel, "orders")[2] for _ in matching]
    assert got == [b'{"n": %d}' % n for n in matching]  # exactly those, in stream order
    assert count(channel, "orders") == 0 and count(channel, "orders.ttl") == 0
    assert count(channel, STREAM) == REJECTED + 1  # the stream keeps them all
    console.until(lambda: set(redriven_marks(console).values()) == {"true"})
    assert console.find("stream-redrive-left-again").is_displayed() is False

    # Pressed again: nothing goes, until the deliberate button says so.
    console.find("stream-redrive-all").click()
    console.until(lambda: console.find("stream-all-confirm").is_displayed())
    console.find("stream-redrive-all-yes").click()
    console.until(lambda: console.text("stream-redrive-result") ==
                  f"0 redriven to origin; {len(matching)} left: redriven before.")
    assert count(channel, "orders") == 0
    again = console.find("stream-redrive-left-again")
    assert again.is_displayed() and again.text == f"Redrive those {len(matching)} again"
    again.click()
    console.until(lambda: console.text("stream-redrive-result") ==
                  f"{len(matching)} redriven to origin.")
    assert console.find("stream-redrive-left-again").is_displayed() is False
    got = [wait_get(channel, "orders")[2] for _ in matching]
    assert got == [b'{"n": %d}' % n for n in matching]
    assert count(channel, "orders") == 0 and count(channel, STREAM) == REJECTED + 1

    # Unfiltered, the marks are on the matching ones only.
    console.find("filter-reset").click()
    console.shows("stream-messages", "Offset", offsets(0, 22))
    marks = redriven_marks(console)
    assert [int(o) for o, mark in marks.items() if mark == "true"] == matching


def test_redrive_of_all_matching_from_a_moment_says_where_the_scan_limit_stopped_it(
        broker, console, dead_letter_stream, monkeypatch):
    from amqp_server.management import stream_browse
    monkeypatch.setattr(stream_browse, "SCAN_MAX", 8)  # the broker runs in this process
    channel = dead_letter_stream
    console.login("guest", "guest")
    console.open(f"dead-letters/%2F/{STREAM}")
    console.shows("stream-messages", "Offset", offsets(0, 7))
    console.driver.execute_script(
        "arguments[0].value = arguments[1]", console.find("stream-time"),
        (datetime.datetime.now() - datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"))
    console.type("filter-body", "1")
    console.find("stream-go").click()
    console.shows("stream-messages", "Offset", ["1"])  # of offsets 0-7, read
    console.find("stream-redrive-all").click()
    console.until(lambda: console.find("stream-all-confirm").is_displayed())
    # A page started at a moment: all matching starts at its first match.
    assert "from offset 1 on" in console.text("stream-all-confirm-text")
    console.find("stream-redrive-all-yes").click()
    console.until(lambda: console.text("stream-redrive-result") ==
                  "1 redriven to origin; the read stopped at the scan limit, before offset 9: "
                  "start there for the rest.")
    assert wait_get(channel, "orders")[2] == b'{"n": 1}'
    assert count(channel, "orders") == 0
