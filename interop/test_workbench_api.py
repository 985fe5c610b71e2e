"""The dead-letter workbench over HTTP: find dead-letter queues, peek with
filters, redrive, move and delete as tasks with progress, against a real
broker with pika publishing, rejecting and observing."""

from __future__ import annotations

import time

import pika

from amqp_server.testing import BrokerThread

from .dead_letters import another_broker, count, dead_letters, wait_task
from .management_api import http
from .waiting import wait_for, wait_get, wait_get_noack


def test_dead_letter_queues_are_found_and_peeked_without_being_consumed(broker, channel):
    dead_letters(channel, [b'{"sku": "A-1"}', b"plain text", b"\x00\xff binary"])
    channel.queue_declare("DLQ.orders")
    channel.queue_declare("plain")
    status, found = http(broker, "GET", "/api/dead-letter-queues")
    assert status == 200
    why = {q["name"]: q["why"] for q in found}
    assert why == {"work.dlq": "dead-letter exchange", "DLQ.orders": "name"}

    status, page = http(broker, "GET", "/api/queues/%2F/work.dlq/messages?limit=2")
    assert status == 200
    assert (page["messages_ready"], page["matched"], len(page["messages"])) == (3, 3, 2)
    first = page["messages"][0]
    assert first["properties"]["message_id"] == "m-0"
    assert first["headers"]["trace"] == "t-0"
    assert first["deaths"][0]["queue"] == "work" and first["deaths"][0]["reason"] == "rejected"
    assert first["deaths"][0]["exchange"] == "shop"
    assert first["deaths"][0]["routing_keys"] == ["order"]
    assert first["origin"] == {"exchange": "shop", "routing_keys": ["order"], "from": "x-death"}
    assert first["payload_text"] == '{"sku": "A-1"}' and not first["redelivered"]
    status, rest = http(broker, "GET", "/api/queues/%2F/work.dlq/messages?offset=2&limit=2")
    binary = rest["messages"][0]
    assert binary["payload_text"] is None and binary["payload_base64"] == "AP8gYmluYXJ5"
    # Peeking consumed nothing and marked nothing redelivered.
    method, _props, body = wait_get(channel, "work.dlq")
    assert body == b'{"sku": "A-1"}' and not method.redelivered
    assert count(channel, "work.dlq") == 2


def test_filters_pick_messages_by_body_reason_queue_and_message_id(broker, channel):
    dead_letters(channel, [b"alpha one", b"beta two", b"alpha three"])
    base = "/api/queues/%2F/work.dlq/messages"
    def bodies(q):
        return [m["payload_text"] for m in http(broker, "GET", base + q)[1]["messages"]]
    assert bodies("?body=alpha") == ["alpha one", "alpha three"]
    assert bodies("?reason=rejected&original_queue=work&original_exchange=shop") == [
        "alpha one", "beta two", "alpha three"]
    assert bodies("?reason=expired") == []
    assert bodies("?message_id=m-1") == ["beta two"]
    assert bodies(f"?since={int(time.time()) + 3600}") == []
    assert bodies("?until=2999-01-01T00:00:00Z&body=three") == ["alpha three"]
    status, error = http(broker, "GET", base + "?reason=tired")
    assert status == 400 and error["error"] == "bad_request"
    assert "reason must be one of" in error["reason"]
    assert http(broker, "GET", base + "?limit=0")[0] == 400
    assert http(broker, "GET", "/api/queues/%2F/missing/messages") == (
        404, {"error": "Object Not Found", "reason": "Not Found"})


def test_redrive_sends_each_message_back_to_its_exchange_and_keys_and_x_death_counts_on(
        broker, channel):
    dead_letters(channel, [b"first", b"second", b"third"])
    status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive",
                           {"filter": {"body": "second"}})
    assert status == 202 and started["total"] == 1
    task = wait_task(broker, started["task"])
    assert (task["state"], task["moved"], task["failed"], task["duplicates"]) == (
        "completed", 1, 0, 0)
    assert count(channel, "work.dlq") == 2
    method, props, body = wait_get_noack(channel, "work")
    assert body == b"second" and props.message_id == "m-1"
    assert props.headers["trace"] == "t-1"
    assert props.headers["x-death"][0]["count"] == 1
    # It dies again: the same x-death entry counts on.
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(lambda: count(channel, "work.dlq") == 3)
    page = http(broker, "GET", "/api/queues/%2F/work.dlq/messages?message_id=m-1")[1]
    assert page["messages"][0]["deaths"][0]["count"] == 2
    assert page["messages"][0]["death_count"] == 2


def test_a_work_queue_that_was_redriven_to_is_not_a_dead_letter_queue(broker, channel):
    """The redriven message keeps its x-death: found at the work queue's
    head, it listed `work` among the dead-letter queues."""
    dead_letters(channel, [b"back to work"])
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"filter": {}})[1]
    assert wait_task(broker, started["task"])["moved"] == 1
    assert count(channel, "work") == 1
    found = {q["name"]: q["why"] for q in http(broker, "GET", "/api/dead-letter-queues")[1]}
    assert found == {"work.dlq": "dead-letter exchange"}


def test_redrive_all_and_of_chosen_seqs(broker, channel):
    dead_letters(channel, [b"a", b"b", b"c", b"d"])
    page = http(broker, "GET", "/api/queues/%2F/work.dlq/messages")[1]
    chosen = [m["seq"] for m in page["messages"] if m["payload_text"] in ("b", "d")]
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"seqs": chosen})[1]
    assert wait_task(broker, started["task"])["moved"] == 2
    assert [wait_get(channel, "work")[2] for _ in range(2)] == [b"b", b"d"]
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive",
                   {"filter": {}, "rate": 50})[1]
    task = wait_task(broker, started["task"])
    assert (task["total"], task["moved"], task["rate_limit"]) == (2, 2, 50)
    assert count(channel, "work.dlq") == 0 and count(channel, "work") == 2


def test_a_message_whose_origin_routes_nowhere_stays_in_the_dead_letter_queue(
        broker, channel):
    dead_letters(channel, [b"orphan"])
    channel.queue_unbind("work", "shop", "order")
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"filter": {}})[1]
    task = wait_task(broker, started["task"])
    assert (task["moved"], task["failures"]) == (0, {"unroutable": 1})
    assert count(channel, "work.dlq") == 1
    method, _props, _body = wait_get(channel, "work.dlq")
    assert not method.redelivered


def test_move_to_a_chosen_exchange_and_key_then_delete(broker, channel):
    dead_letters(channel, [b"keep", b"move me", b"drop me"])
    channel.queue_declare("parking")
    status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                           {"filter": {"body": "move"}, "exchange": "amq.default",
                            "routing_key": "parking"})
    assert status == 202
    assert wait_task(broker, started["task"])["moved"] == 1
    _method, props, body = wait_get(channel, "parking")
    assert body == b"move me" and props.headers["x-death"][0]["queue"] == "work"
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/delete-messages",
                   {"filter": {"body": "drop"}})[1]
    assert wait_task(broker, started["task"])["moved"] == 1
    assert [m["payload_text"] for m in http(
        broker, "GET", "/api/queues/%2F/work.dlq/messages")[1]["messages"]] == ["keep"]
    # Bad requests are refused before anything moves.
    for body, reason in (({"exchange": ""}, "exactly one of"),
                         ({"filter": {}}, "exchange is mandatory"),
                         ({"filter": {}, "exchange": "", "rate": -1}, "rate must be"),
                         ({"seqs": ["a"], "exchange": ""}, "list of integers")):
        status, error = http(broker, "POST", "/api/queues/%2F/work.dlq/move", body)
        assert status == 400 and reason in error["reason"], (body, error)
    assert http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                {"filter": {}, "exchange": "nowhere"})[0] == 404
    assert count(channel, "work.dlq") == 1


def test_a_move_into_a_delayed_exchange_is_moved_once_and_delivered_when_due(
        broker, channel):
    # The delayed exchange holds the copy (no queue has it yet): once
    # counted as unroutable, the original stayed and each try added a copy.
    channel.exchange_declare("retry", "x-delayed-message", durable=True,
                             arguments={"x-delayed-type": "direct"})
    channel.queue_declare("target", durable=True)
    channel.queue_bind("target", "retry", "target")
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("work.dlq", durable=True)
    channel.queue_bind("work.dlq", "dlx")
    channel.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "work", b"later", pika.BasicProperties(
        delivery_mode=2, headers={"x-delay": 300}))
    method, _props, _body = wait_get_noack(channel, "work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(lambda: count(channel, "work.dlq") == 1)
    status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                           {"filter": {}, "exchange": "retry", "routing_key": "target"})
    assert status == 202
    task = wait_task(broker, started["task"])
    assert (task["moved"], task["failed"], task["duplicates"]) == (1, 0, 0), task
    assert count(channel, "work.dlq") == 0
    _method, props, body = wait_get(channel, "target")
    assert body == b"later" and props.headers["x-delay"] == -300
    time.sleep(0.5)
    assert count(channel, "target") == 0  # once


def test_replay_candidates_are_matched_by_message_id_and_body_digest(broker, channel):
    import hashlib
    dead_letters(channel, [b"one", b"two", b"two"], message_ids=["a", "b", "b"])
    def digest(body):
        return hashlib.sha256(body).hexdigest()
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"messages": [
        {"message_id": "b", "body_sha256": digest(b"two")},
        {"message_id": "a", "body_sha256": digest(b"not one")}]})[1]
    assert started["total"] == 1
    assert started["missing"] == [{"message_id": "a", "body_sha256": digest(b"not one")}]
    assert wait_task(broker, started["task"])["moved"] == 1
    assert count(channel, "work.dlq") == 2 and count(channel, "work") == 1


def test_users_see_only_what_their_permissions_allow(broker, channel):
    dead_letters(channel, [b"secret"])
    http(broker, "PUT", "/api/users/viewer", {"password": "pw", "tags": "management"})
    http(broker, "PUT", "/api/vhosts/other")
    http(broker, "PUT", "/api/permissions/other/viewer",
         {"configure": ".*", "write": ".*", "read": ".*"})
    viewer = ("viewer", "pw")
    assert http(broker, "GET", "/api/dead-letter-queues", auth=viewer) == (200, [])
    status, error = http(broker, "GET", "/api/queues/%2F/work.dlq/messages", auth=viewer)
    assert status == 401 and error["error"] == "not_authorised"
    assert http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"filter": {}},
                auth=viewer)[0] == 401
    # Read but no write on the target: the redrive keeps the message.
    http(broker, "PUT", "/api/permissions/%2F/viewer",
         {"configure": "", "write": "^$", "read": ".*"})
    assert http(broker, "GET", "/api/queues/%2F/work.dlq/messages", auth=viewer)[0] == 200
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"filter": {}},
                   auth=viewer)[1]
    task = wait_task(broker, started["task"], auth=viewer)
    assert task["moved"] == 0 and "access to exchange 'shop'" in next(iter(task["failures"]))
    assert count(channel, "work.dlq") == 1
    # Other users' tasks are not disclosed; guest (administrator) sees them all.
    http(broker, "PUT", "/api/users/other", {"password": "pw", "tags": "management"})
    assert http(broker, "GET", f"/api/tasks/{started['task']}", auth=("other", "pw"))[0] == 404
    assert http(broker, "GET", "/api/tasks", auth=("other", "pw")) == (200, [])
    assert http(broker, "GET", f"/api/tasks/{started['task']}")[0] == 200
    # Moving to another broker takes policymaker.
    status, error = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                         {"filter": {}, "exchange": "", "uri": "amqp://127.0.0.1:1/"},
                         auth=viewer)
    assert status == 401


def test_queues_are_marked_as_holding_dead_letters(broker, channel):
    channel.queue_declare("poison-archive")
    assert http(broker, "GET", "/api/dead-letter-queues/%2F")[1] == []
    assert http(broker, "PUT", "/api/queues/%2F/poison-archive/dead-letter-mark")[0] == 204
    assert [(q["name"], q["why"]) for q in http(
        broker, "GET", "/api/dead-letter-queues/%2F")[1]] == [("poison-archive", "marked")]
    assert http(broker, "DELETE", "/api/queues/%2F/poison-archive/dead-letter-mark")[0] == 204
    assert http(broker, "GET", "/api/dead-letter-queues/%2F")[1] == []


def test_move_to_another_broker_by_amqp_uri_keeps_every_header(broker, channel):
    dead_letters(channel, [b"travels", b"stays"])
    with another_broker("landing") as (other, remote_channel, uri):
        status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                               {"filter": {"body": "travels"}, "exchange": "",
                                "routing_key": "landing", "uri": uri})
        assert status == 202
        task = wait_task(broker, started["task"])
        assert (task["state"], task["moved"]) == ("completed", 1)
        assert task["target"]["uri"] == f"amqp://guest@127.0.0.1:{other.port}/%2F"
        _method, props, body = wait_get(remote_channel, "landing")
        assert body == b"travels" and props.message_id == "m-0"
        assert props.headers["x-death"][0]["queue"] == "work"
        assert props.headers["x-first-death-exchange"] == "shop"
        # Routed nowhere over there: it stays here.
        started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                       {"filter": {}, "exchange": "", "routing_key": "absent",
                        "uri": uri})[1]
        task = wait_task(broker, started["task"])
        assert (task["moved"], task["failed"]) == (0, 1)
        # Returned by the other broker: unroutable, as a local move says.
        assert task["failures"] == {"unroutable": 1}
    assert count(channel, "work.dlq") == 1
    # A broker that is not there: the task fails and nothing moves.
    started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                   {"filter": {}, "exchange": "", "uri": "amqp://127.0.0.1:1/"})[1]
    task = wait_task(broker, started["task"])
    assert task["state"] == "failed" and "cannot reach amqp://guest@127.0.0.1:1/" in task["error"]
    assert count(channel, "work.dlq") == 1
    status, error = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                         {"filter": {}, "exchange": "", "uri": "http://x/"})
    assert status == 400 and "not an AMQP URI" in error["reason"]


def test_the_rate_limit_holds_from_the_first_message_and_a_slow_task_can_be_stopped(
        broker, channel):
    total, rate = 12, 4
    dead_letters(channel, [f"m{i}".encode() for i in range(total)])
    began = time.monotonic()
    status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive",
                           {"filter": {}, "rate": rate})
    assert status == 202
    assert wait_for(lambda: http(broker, "GET", f"/api/tasks/{started['task']}")[1]["done"] >= 1)
    time.sleep(0.3)
    done = http(broker, "GET", f"/api/tasks/{started['task']}")[1]["done"]
    # Never ahead of the rate (the test's clock started first, so this bound
    # is generous): not a first batch of everything at once.
    assert 1 <= done <= rate * (time.monotonic() - began) + 1
    assert http(broker, "DELETE", f"/api/tasks/{started['task']}")[0] == 204
    task = wait_task(broker, started["task"])
    assert task["state"] == "cancelled" and task["moved"] < total
    # Stopped: the rest stayed in the dead-letter queue, nothing lost.
    assert count(channel, "work.dlq") == total - task["moved"]
    assert count(channel, "work") == task["moved"]


def test_moving_to_a_missing_exchange_names_the_exchange(broker, channel):
    dead_letters(channel, [b"stays"])
    status, error = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                         {"filter": {}, "exchange": "nosuchx"})
    assert (status, error) == (404, {"error": "Object Not Found",
                                     "reason": "NOT_FOUND - no exchange 'nosuchx' in vhost '/'"})
    status, _error = http(broker, "POST", "/api/queues/%2F/missing/move",
                          {"filter": {}, "exchange": "nosuchx"})
    assert status == 404
    assert count(channel, "work.dlq") == 1


def test_a_login_the_other_broker_refuses_is_said_as_refused(broker, channel):
    dead_letters(channel, [b"stays"])
    with another_broker("landing") as (other, _remote, _uri):
        uri = f"amqp://guest:wrong@127.0.0.1:{other.port}/%2F"
        started = http(broker, "POST", "/api/queues/%2F/work.dlq/move",
                       {"filter": {}, "exchange": "", "routing_key": "landing", "uri": uri})[1]
        task = wait_task(broker, started["task"])
    assert task["state"] == "failed"
    assert f"amqp://guest@127.0.0.1:{other.port}/%2F: login refused (403 ACCESS_REFUSED" \
        in task["error"], task["error"]
    assert "wrong" not in task["error"]
    assert count(channel, "work.dlq") == 1


def test_a_message_redriven_from_the_parquet_archive_has_every_property_it_had(tmp_path):
    """Retention archives a dead letter as a Parquet record; redriven from
    there it reaches its origin with every property and header it was
    published with (its content header, kept as bytes, rebuilds it), the
    death history too."""
    config = {"port": 0, "management-port": 0, "prometheus-port": -1,
              "data-dir": str(tmp_path / "data")}
    sent = pika.BasicProperties(
        content_type="application/json", content_encoding="gzip", delivery_mode=2,
        priority=3, correlation_id="c-1", reply_to="replies", message_id="rich",
        timestamp=1_700_000_000, type="order.created", user_id="guest", app_id="shop",
        headers={"trace": "t-1", "nested": {"a": 1, "b": [1, "two"]}, "raw": b"\x00\xff",
                 "number": 12})
    with BrokerThread(config) as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            channel = connection.channel()
            dead_letters(channel, [])
            channel.basic_publish("shop", "order", b'{"id": 1}', sent)
            method, _props, _body = wait_get_noack(channel, "work")
            channel.basic_reject(method.delivery_tag, requeue=False)
            assert http(broker, "PUT", "/api/policies/%2F/keep-a-moment", {
                "pattern": "^work\\.dlq$",
                "definition": {"dead-letter-retention": 1}})[0] in (201, 204)
            assert wait_for(lambda: http(broker, "GET", "/api/queues/%2F/work.dlq/archive")[1]
                            ["matched"] == 1, 15)
            assert wait_for(lambda: channel.queue_declare("work.dlq", passive=True)
                            .method.message_count == 0, 15)
            status, result = http(broker, "POST", "/api/queues/%2F/work.dlq/archive/redrive",
                                  {"filter": {}})
            assert status == 200 and result["redriven"] == 1, result
            _method, got, body = wait_get(channel, "work")
        finally:
            connection.close()
    assert body == b'{"id": 1}'
    for name in ("content_type", "content_encoding", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "message_id", "timestamp", "type", "user_id",
                 "app_id"):
        assert getattr(got, name) == getattr(sent, name), name
    for name, value in sent.headers.items():
        assert got.headers[name] == value, name
    (death,) = got.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"], death["exchange"],
            death["routing-keys"]) == ("work", "rejected", 1, "shop", ["order"])
