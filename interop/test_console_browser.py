"""The web console and the dead-letter workbench in a real browser
(Debian's chromium through Selenium), against a broker in this process that
pika fills: users see what their tags and permissions allow, dead letters
made by the broker itself are browsed, filtered and redriven, connections
closed, policy errors shown; rates and depths are charted; the workbench
keeps its list at full width and its actions in view; toggles are legible;
nothing but the login is there before one logs in."""

from __future__ import annotations

import datetime
import json
import re

import pika
import pytest
from pika.exceptions import AMQPConnectionError

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .browser import Console, row_of
from .dead_letters import count, dead_letters, dead_letters_of_every_kind
from .management_api import http
from .users import ctl
from .waiting import wait_for, wait_get_noack

pytestmark = pytest.mark.browser

PW = "pw"
# The console's colours for the lines these tests look for (console.js).
PUBLISH_BLUE = (0x1F, 0x5F, 0xBF)  # Publish in a rates chart, Ready in a depth chart
REJECTED_RED = (0xC8, 0x32, 0x2C)  # rejected in a dead-letter chart
DATE_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def add_user(broker, name: str, tags: str, vhost: str | None = None) -> None:
    assert ctl(broker, "add_user", name, PW) == 0
    assert ctl(broker, "set_user_tags", name, *tags.split()) == 0
    if vhost is not None:
        assert ctl(broker, "set_permissions", "-p", vhost, name, ".*", ".*", ".*") == 0


# How far a chart's line of one colour rises on its canvas, in pixels: the
# rows between the highest and the lowest pixel of that colour (a line
# flat at zero spans its own width, a line that rose spans much more);
# None before the chart has drawn.
LINE_RISE = """
const [selector, r, g, b] = arguments;
const canvas = document.querySelector(selector + " canvas");
if (!canvas || !canvas.width || !canvas.height) return null;
const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
let top = null, bottom = null;
for (let y = 0; y < canvas.height; y++) {
  for (let x = 0; x < canvas.width; x++) {
    const i = (y * canvas.width + x) * 4;
    if (pixels[i + 3] > 200 && Math.abs(pixels[i] - r) + Math.abs(pixels[i + 1] - g) +
        Math.abs(pixels[i + 2] - b) < 40) {
      if (top === null) top = y;
      bottom = y;
      break;
    }
  }
}
return top === null ? null : bottom - top;
"""


def line_rise(console: Console, chart_id: str, colour: tuple[int, int, int]) -> int:
    return console.driver.execute_script(LINE_RISE, "#" + chart_id, *colour) or 0


def rises(console: Console, chart_id: str, colour: tuple[int, int, int]) -> None:
    """Wait until the line has drawn points well above zero."""
    console.until(lambda: line_rise(console, chart_id, colour) > 20,
                  f"no line of {colour} rose in #{chart_id}")


# An element's computed text colour and the first opaque background behind it.
COLOURS = """
const parse = (css) => css.match(/[\\d.]+/g).map(Number);
const element = arguments[0];
let node = element;
let background = [255, 255, 255];
while (node && node.nodeType === 1) {
  const colour = parse(getComputedStyle(node).backgroundColor);
  if (colour.length < 4 || colour[3] > 0) { background = colour.slice(0, 3); break; }
  node = node.parentElement;
}
return [parse(getComputedStyle(element).color).slice(0, 3), background];
"""


def contrast(first, second) -> float:
    """WCAG 2's contrast ratio of two sRGB colours."""
    def luminance(rgb) -> float:
        def linear(value: float) -> float:
            value /= 255
            return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4
        r, g, b = (linear(v) for v in rgb)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_log_in_with_the_brokers_users_and_see_only_what_tags_and_permissions_allow(
        broker, console):
    assert ctl(broker, "add_vhost", "other") == 0
    add_user(broker, "mandy", "management", "other")
    add_user(broker, "nobody", "")
    assert http(broker, "PUT", "/api/queues/%2F/DLQ.secret", {})[0] == 201
    assert http(broker, "PUT", "/api/queues/other/DLQ.theirs", {})[0] == 201

    console.login("guest", "wrong", refused=True)
    console.until(lambda: "Login failed" in console.text("login-error"))
    console.login("nobody", PW, refused=True)
    console.until(lambda: console.text("login-error") == "Not management user")

    console.login("mandy", PW)
    console.open("queues")
    console.shows("queues", "Name", ["DLQ.theirs"])
    console.open("dead-letters")
    console.shows("dead-letter-queues", "Name", ["DLQ.theirs"])
    assert not console.find("nav-admin").is_displayed()
    console.open("admin")
    console.until(lambda: "for administrators" in console.find("view").text)
    # The workbench of a queue in a vhost it may not see says so.
    console.open("dead-letters/%2F/DLQ.secret")
    console.until(lambda: console.text("workbench-error") ==
                  "User not authorised to access virtual host")
    assert console.css("#messages tbody tr") == []

    console.login("guest", "guest")
    console.open("queues")
    console.shows("queues", "Name", ["DLQ.secret", "DLQ.theirs"])
    console.find("queues-filter").send_keys("their")
    console.shows("queues", "Name", ["DLQ.theirs"])
    console.open("admin")
    console.until(lambda: {"guest", "mandy", "nobody"}
                  <= set(console.column("users", "Name") or ()))
    assert set(console.column("vhosts", "Name")) == {"/", "other"}


def test_tables_sort_by_a_clicked_column(broker, console, channel):
    for name, depth in (("b.two", 2), ("a.three", 3), ("c.one", 1)):
        channel.queue_declare(name)
        for _ in range(depth):
            channel.basic_publish("", name, b"x")
    assert wait_for(lambda: count(channel, "a.three") == 3)
    console.login("guest", "guest")
    console.open("queues")
    console.shows("queues", "Name", ["a.three", "b.two", "c.one"])
    header = console.css('#queues th[data-column="Ready"]')[0]
    header.click()
    console.shows("queues", "Name", ["c.one", "b.two", "a.three"])
    header.click()
    console.shows("queues", "Name", ["a.three", "b.two", "c.one"])


def test_workbench_browses_filters_and_redrives_dead_letters_back_with_their_history(
        broker, console, channel):
    dead_letters_of_every_kind(channel)
    console.login("guest", "guest")
    console.open("dead-letters")
    console.shows("dead-letter-queues", "Name", ["orders.dlq"])
    console.css("#dead-letter-queues a")[0].click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    assert console.column("messages", "Reason") == ["rejected", "expired", "maxlen"]
    assert console.column("messages", "Original queue") == ["orders", "orders.ttl",
                                                            "orders.capped"]

    # A message's history, properties, headers and body.
    row_of(console, "rejected-1").click()
    console.until(lambda: console.find("timeline").is_displayed())
    steps = [li.text for li in console.css("#timeline li")]
    assert steps[0].startswith("Published to exchange shop with routing keys order")
    assert steps[1].startswith("orders rejected") and "via exchange shop, keys order" in steps[1]
    # x-death keeps the time of the first death of its kind: said as such.
    assert ", first at " in steps[1] and "last at" not in steps[1]
    assert "First died" in [th.text for th in console.css("#messages th")]
    assert steps[-1] == "Now in orders.dlq"
    headers = json.loads(console.text("headers"))
    assert headers["trace"] == "rejected-1"
    # x-death's time is a date-time, the same instant the message carries.
    shown = headers["x-death"][0]["time"]
    assert re.fullmatch(DATE_TIME + r" [+-]\d\d:\d\d", shown), shown
    peeked = http(broker, "GET", "/api/queues/%2F/orders.dlq/messages")[1]["messages"]
    carried = next(m for m in peeked if m["properties"]["message_id"] == "rejected-1")
    assert datetime.datetime.strptime(shown, "%Y-%m-%d %H:%M:%S %z").timestamp() == \
        carried["headers"]["x-death"][0]["time"]
    assert all(re.fullmatch(DATE_TIME, cell) for cell in console.column("messages", "First died"))
    assert console.text("body-view") == json.dumps({"sku": "A-1", "qty": 2}, indent=2)
    console.find("body-text").click()
    assert console.text("body-view") == '{"sku": "A-1", "qty": 2}'
    row_of(console, "maxlen-1").click()
    console.until(lambda: console.text("body-view").startswith(
        "00000000  00 01 20 6e 6f 74 20 74"))
    assert "maxlen" in console.css("#timeline li")[1].text

    # Filters: by reason, by body, cleared.
    console.find("filter-reason").send_keys("expired")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["expired-1"])
    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    console.type("filter-body", "sku")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1"])
    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])

    # Redrive two selected messages: each goes back where it was published.
    for message_id in ("rejected-1", "maxlen-1"):
        row_of(console, message_id).find_element(console.by.CSS_SELECTOR, "input.pick").click()
    assert "(2)" in console.find("action-scope").text
    console.find("action-redrive").click()
    console.until(lambda: console.find("task-status").get_attribute("data-state") == "completed")
    assert console.text("task-status").startswith(
        "redrive completed: 2 of 2 done; 2 moved, 0 failed")
    console.shows("messages", "Message id", ["expired-1"])

    _method, props, body = wait_get_noack(channel, "orders")
    assert body == b'{"sku": "A-1", "qty": 2}' and props.message_id == "rejected-1"
    death = props.headers["x-death"][0]
    assert (death["queue"], death["reason"], death["count"]) == ("orders", "rejected", 1)
    _method, props, body = wait_get_noack(channel, "orders.capped")
    assert body == b"\x00\x01 not text \xff"
    assert props.headers["x-death"][0]["reason"] == "maxlen"
    assert count(channel, "orders.dlq") == 1


def test_a_pages_address_opens_it_after_login_with_the_workbenchs_filter(broker, console,
                                                                         channel):
    """A link to a page, opened by someone not logged in yet, shows that
    page once they are; a queue's workbench keeps its filter in the address,
    so the filtered list is a link too."""
    dead_letters_of_every_kind(channel)
    console.driver.get(console.base + "/")
    console.driver.execute_script("sessionStorage.clear()")
    console.driver.get(console.base + "/?fresh#/dead-letters/%2F/orders.dlq?reason=expired")
    console.until(lambda: console.find("login").is_displayed())
    console.type("login-username", "guest")
    console.type("login-password", "guest")
    console.find("login-submit").click()
    console.shows("messages", "Message id", ["expired-1"])
    assert console.find("filter-reason").get_attribute("value") == "expired"

    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    assert console.driver.current_url.endswith("#/dead-letters/%2F/orders.dlq")
    console.type("filter-body", "sku")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["rejected-1", "expired-1"])
    filtered = console.driver.current_url
    assert filtered.endswith("#/dead-letters/%2F/orders.dlq?body=sku")

    console.open("queues")
    console.driver.get(filtered)
    console.shows("messages", "Message id", ["rejected-1", "expired-1"])
    assert console.find("filter-body").get_attribute("value") == "sku"


def test_move_and_delete_all_filtered_messages_with_progress(broker, console, channel):
    dead_letters_of_every_kind(channel)
    channel.queue_declare("parking")
    console.login("guest", "guest")
    console.open("dead-letters/%2F/orders.dlq")
    console.shows("messages", "Message id", ["rejected-1", "expired-1", "maxlen-1"])
    console.find("filter-reason").send_keys("expired")
    console.find("filter-apply").click()
    console.shows("messages", "Message id", ["expired-1"])
    console.find("action-scope").send_keys("all")
    console.type("move-exchange", "")
    console.type("move-routing-key", "parking")
    console.find("action-move").click()
    console.until(lambda: console.find("task-status").get_attribute("data-state") == "completed")
    assert wait_get_noack(channel, "parking")[2] == b'{"sku": "B-2"}'

    console.find("filter-reset").click()
    console.shows("messages", "Message id", ["rejected-1", "maxlen-1"])
    console.find("action-scope").send_keys("all")
    delete = console.find("action-delete")
    delete.click()
    assert delete.text == "Confirm delete"
    delete.click()
    console.until(lambda: console.text("task-status").startswith(
        "delete completed: 2 of 2 done; 2 deleted"))
    console.shows("messages", "Message id", [])
    assert count(channel, "orders.dlq") == 0


def test_close_a_connection_from_the_connections_page(broker, console):
    client = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        console.login("guest", "guest")
        console.open("connections")
        console.until(lambda: len(console.column("connections", "Name") or ()) == 1)
        close = console.css("#connections button")[0]
        close.click()
        close.click()
        console.shows("connections", "Name", [])

        def closed() -> bool:
            try:
                client.process_data_events(0.05)
            except AMQPConnectionError:
                return True
            return not client.is_open
        assert wait_for(closed, 10)
    finally:
        if client.is_open:
            client.close()


def test_policies_are_set_with_their_validation_errors_shown_and_cleared(broker, console):
    console.login("guest", "guest")
    console.open("policies")
    console.type("policy-name", "bad")
    console.type("policy-definition", '{"dead-letter-exchanges": "dlx"}')
    console.find("policy-submit").click()
    console.until(lambda: "are not recognised policy settings" in console.text("policy-error"))
    assert console.text("policy-error").startswith("Validation failed")
    console.type("policy-definition", "{not json")
    console.find("policy-submit").click()
    console.until(lambda: console.text("policy-error").startswith("The definition is not JSON"))
    assert http(broker, "GET", "/api/policies")[1] == []

    console.type("policy-name", "dead")
    console.type("policy-pattern", "^orders$")
    console.type("policy-definition", '{"dead-letter-exchange": "dlx"}')
    console.find("policy-submit").click()
    console.shows("policies", "Name", ["dead"])
    assert console.text("policy-error") == ""
    assert http(broker, "GET", "/api/policies/%2F/dead")[1]["definition"] == {
        "dead-letter-exchange": "dlx"}
    clear = console.css('#policies button[data-policy="dead"]')[0]
    clear.click()
    clear.click()
    console.shows("policies", "Name", [])
    assert http(broker, "GET", "/api/policies")[1] == []


def test_overview_shows_alarms_and_charts_dead_letters_by_reason(chromium):
    config = BrokerConfig(port=0, management_port=0, vm_memory_high_watermark_absolute=1)
    with BrokerThread(config) as broker:
        console = Console(chromium, broker.management_url)
        console.login("guest", "guest")
        console.open("overview")
        console.until(lambda: "memory alarm" in console.text("overview-alarms"))
        console.until(lambda: "rejected: 0 in all" in console.text("dead-rejected"))
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            channel = connection.channel()
            channel.queue_declare("work", arguments={"x-dead-letter-exchange": "",
                                                     "x-dead-letter-routing-key": "work.dlq"})
            channel.queue_declare("work.dlq")
            # Consuming still works under a memory alarm: deliver and reject
            # what is there (the queue is filled by the broker's own API).
            assert http(broker, "POST", "/api/exchanges/%2F/amq.default/publish",
                        {"routing_key": "work", "payload": "x", "payload_encoding": "string",
                         "properties": {}})[1] == {"routed": True}
            method, _props, _body = wait_get_noack(channel, "work")
            channel.basic_reject(method.delivery_tag, requeue=False)
            # The broker's next sample shows it: in the last minute's count
            # and as a rise of the rejected line.
            console.until(lambda: console.text("dead-rejected").split("\n") == [
                "1", "rejected: 1 in all"])
            rises(console, "overview-dead-chart", REJECTED_RED)
        finally:
            connection.close()


def test_overview_charts_message_rates_and_queue_depths_after_traffic(broker, console, channel):
    console.login("guest", "guest")
    console.open("overview")
    # The rate boxes say something from the first answer on.
    console.until(lambda: re.fullmatch(r"\d+(\.\d+)?/s\nPublish", console.text("rate-publish")))
    assert line_rise(console, "overview-rates-chart", PUBLISH_BLUE) < 10
    channel.queue_declare("work")
    for _ in range(40):
        channel.basic_publish("", "work", b"x")
    for acked in (True,) * 10 + (False,) * 5:
        method, _props, _body = wait_get_noack(channel, "work")
        if acked:
            channel.basic_ack(method.delivery_tag)
    rises(console, "overview-rates-chart", PUBLISH_BLUE)  # publishes per second
    rises(console, "overview-depth-chart", PUBLISH_BLUE)  # ready messages
    assert int(console.find("overview-rates-chart").get_attribute("data-points")) >= 1
    console.until(lambda: console.text("total-ready") == "25\nReady")


def test_overview_lists_the_nodes_with_their_role_and_sync(broker, console):
    console.login("guest", "guest")
    console.open("overview")
    console.until(lambda: "amqp-server@localhost" in console.text("overview-nodes"))
    row = console.text("overview-nodes").splitlines()[-1]
    assert row.split() == ["amqp-server@localhost", "leader", "yes", "0"]


def test_a_queue_page_charts_its_depth_and_leads_to_its_messages(broker, console, channel):
    channel.queue_declare("orders")
    console.login("guest", "guest")
    console.open("queues")
    console.shows("queues", "Name", ["orders"])
    console.css("#queues a")[0].click()
    console.until(lambda: console.text("queue-title") == "orders (/)")
    for _ in range(25):
        channel.basic_publish("", "orders", b"x")
    rises(console, "queue-depth-chart", PUBLISH_BLUE)  # ready messages
    rises(console, "queue-rates-chart", PUBLISH_BLUE)  # publishes per second
    console.until(lambda: console.text("queue-ready").startswith("25"))
    console.find("queue-browse").click()
    console.until(lambda: console.text("workbench-title") == "orders (/)")
    console.shows("messages", "Seq", [str(n) for n in range(25)])


# The workbench's list and action bar against the window (CSS pixels).
GEOMETRY = """
const box = (node) => node.getBoundingClientRect();
const rows = [...document.querySelectorAll("#messages tbody tr")];
const redrive = box(document.getElementById("action-redrive"));
const atRedrive = document.elementFromPoint(redrive.left + redrive.width / 2,
                                            redrive.top + redrive.height / 2);
return {width: document.documentElement.clientWidth, height: window.innerHeight,
        scrolled: window.scrollY, table: box(document.getElementById("messages")).width,
        rows: rows.map((row) => box(row).height),
        actions: [box(document.getElementById("actions")).top,
                  box(document.getElementById("actions")).bottom],
        redriveShown: atRedrive !== null && atRedrive.id === "action-redrive"};
"""


def test_workbench_list_takes_the_full_width_and_its_actions_stay_in_view(broker, console,
                                                                        channel):
    notes = "a note long enough to have wrapped over several lines before " * 3
    dead_letters(channel, [json.dumps({"order": n, "note": notes}).encode() for n in range(50)])
    console.login("guest", "guest")
    console.open("dead-letters/%2F/work.dlq")
    console.until(lambda: len(console.column("messages", "Seq") or ()) == 50)
    at_top = console.driver.execute_script(GEOMETRY)
    assert at_top["table"] >= 0.9 * at_top["width"], at_top
    # One line a message: every row as tall as the shortest.
    assert max(at_top["rows"]) - min(at_top["rows"]) <= 1 and max(at_top["rows"]) < 40, at_top
    assert 0 <= at_top["actions"][0] and at_top["actions"][1] <= at_top["height"], at_top
    assert at_top["redriveShown"]

    last = row_of(console, "m-49")
    console.driver.execute_script("arguments[0].scrollIntoView({block: 'end'})", last)
    at_end = console.driver.execute_script(GEOMETRY)
    assert at_end["scrolled"] > 0, "50 rows should not fit the window"
    assert 0 <= at_end["actions"][0] and at_end["actions"][1] <= at_end["height"], at_end
    assert at_end["redriveShown"], "the action bar is covered at the end of the list"
    # Pick the last message and redrive it without going back up.
    last.find_element(console.by.CSS_SELECTOR, "input.pick").click()
    console.find("action-redrive").click()
    console.until(lambda: console.text("task-status").startswith(
        "redrive completed: 1 of 1 done; 1 moved"))


def test_body_toggles_are_legible_in_either_state(broker, console, channel):
    dead_letters(channel, [b'{"sku": "A-1"}'])
    console.login("guest", "guest")
    console.open("dead-letters/%2F/work.dlq")
    # The list arrives after the page; wait for it before picking a row.
    console.until(lambda: len(console.column("messages", "Seq") or ()) == 1)
    row_of(console, "m-0").click()
    for chosen in ("body-text", "body-json", "body-hex"):
        console.find(chosen).click()
        console.until(lambda chosen=chosen: "active" in console.find(chosen).get_attribute("class"))
        assert console.find(chosen).get_attribute("aria-pressed") == "true"
        for toggle in ("body-text", "body-json", "body-hex"):
            text, background = console.driver.execute_script(COLOURS, console.find(toggle))
            ratio = contrast(text, background)
            assert ratio >= 4.5, (chosen, toggle, text, background, ratio)


def test_nothing_but_the_login_form_before_logging_in(broker, console):
    from selenium.common.exceptions import ElementNotInteractableException

    console.driver.get(console.base + "/")
    console.driver.execute_script("sessionStorage.clear()")
    console.driver.get(console.base + "/?fresh#/queues")
    console.until(lambda: console.find("login").is_displayed())
    links = console.css("#nav a")
    assert len(links) >= 7
    assert not console.find("nav").is_displayed()
    assert not any(link.is_displayed() for link in links)
    for link in links:
        with pytest.raises(ElementNotInteractableException):
            link.click()
    assert not console.find("logout").is_displayed()
    console.driver.execute_script("location.hash = '#/admin'")
    assert console.find("login").is_displayed() and not console.find("view").is_displayed()
    assert console.find("view").get_attribute("innerHTML") == ""

    console.login("guest", "guest")
    assert console.find("nav").is_displayed() and not console.find("login").is_displayed()
    console.find("logout").click()
    console.until(lambda: console.find("login").is_displayed())
    assert not console.find("nav").is_displayed()
