"""amqpctl's dead-letter verbs against a running broker: list, redrive
(also from the audit's replay candidates), move (also to another broker),
delete, with rabbitmqctl's exit codes."""

from __future__ import annotations

import hashlib
import json

from .dead_letters import another_broker, count, dead_letters
from .management_api import amqpctl
from .waiting import wait_get


def test_list_dead_letters_names_queues_then_their_messages(broker, channel, capsys):
    dead_letters(channel, [b"alpha", b"beta"])
    assert amqpctl(broker, "list_dead_letters", "-q") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["name", "why", "messages_ready", "messages_paged_out",
                                    "consumers"]
    assert lines[1].split("\t")[:3] == ["work.dlq", "dead-letter exchange", "2"]
    assert amqpctl(broker, "list_dead_letters", "work.dlq", "--body", "beta",
                   "--formatter", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["message_id"], r["reason"], r["original_queue"], r["origin"]) for r in rows] == [
        ("m-1", "rejected", "work", "shop order")]
    # x-death's time is that of the first death of its kind: said as such.
    assert "first_died_at" in rows[0] and "died_at" not in rows[0]
    assert amqpctl(broker, "list_dead_letters", "missing") == 65
    assert "queue 'missing' in vhost '/' not found" in capsys.readouterr().err
    assert amqpctl(broker, "list_dead_letters", "work.dlq", "--reason", "tired") == 65
    assert "reason must be one of" in capsys.readouterr().err
    assert count(channel, "work.dlq") == 2


def test_redrive_reports_progress_and_exits_by_outcome(broker, channel, capsys):
    dead_letters(channel, [b"alpha", b"beta", b"gamma"])
    assert amqpctl(broker, "redrive", "work.dlq", "--body", "beta") == 0
    out = capsys.readouterr().out
    assert "Redriving dead letters of queue work.dlq" in out
    assert "completed: 1 of 1 redriven" in out
    _method, props, body = wait_get(channel, "work")
    assert body == b"beta" and props.headers["x-death"][0]["count"] == 1
    channel.queue_unbind("work", "shop", "order")
    assert amqpctl(broker, "redrive", "work.dlq", "--rate", "0") == 65
    assert "0 of 2 redriven, 2 kept: unroutable" in capsys.readouterr().out
    assert count(channel, "work.dlq") == 2
    assert amqpctl(broker, "redrive") == 65
    assert "redrive needs a QUEUE, or --from-file" in capsys.readouterr().err


def test_redrive_from_the_audits_replay_candidates(broker, channel, capsys, tmp_path):
    dead_letters(channel, [b"one", b"two", b"three"], message_ids=["a", "b", "c"])
    def digest(body):
        return hashlib.sha256(body).hexdigest()
    lines = [{"node": "amqp-server@localhost", "vhost": "/", "queue": "work.dlq",
              "message_id": mid, "body_sha256": digest(body), "died_in": "work",
              "reason": "rejected", "exchange": "shop", "routing_keys": ["order"],
              "time": "2024-01-01T00:00:00Z"}
             for mid, body in (("a", b"one"), ("c", b"three"), ("z", b"gone"))]
    path = tmp_path / "replay-candidates.ndjson"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert amqpctl(broker, "redrive", "--from-file", str(path)) == 65
    out = capsys.readouterr().out
    assert f"not found in work.dlq: message_id z body_sha256 {digest(b'gone')}" in out
    assert "2 of 3 redriven, 1 not found" in out
    assert sorted(wait_get(channel, "work")[2] for _ in range(2)) == [b"one", b"three"]
    assert count(channel, "work.dlq") == 1
    path.write_text("not json\n")
    assert amqpctl(broker, "redrive", "--from-file", str(path)) == 65
    assert "line 1: not JSON" in capsys.readouterr().err
    assert amqpctl(broker, "redrive", "--from-file", str(tmp_path / "absent")) == 65


def test_move_messages_here_and_to_another_broker_then_delete(broker, channel, capsys):
    dead_letters(channel, [b"local", b"remote", b"doomed"])
    channel.queue_declare("parking")
    assert amqpctl(broker, "move_messages", "work.dlq", "", "parking", "--body", "local") == 0
    assert wait_get(channel, "parking")[2] == b"local"
    with another_broker("landing") as (_other, remote, uri):
        assert amqpctl(broker, "move_messages", "work.dlq", "", "landing", "--to-uri", uri,
                       "--body", "remote") == 0
        _method, props, body = wait_get(remote, "landing")
        assert body == b"remote" and props.headers["x-first-death-queue"] == "work"
    capsys.readouterr()
    assert amqpctl(broker, "move_messages", "work.dlq", "", "x", "--to-uri",
                   "amqp://127.0.0.1:1/") == 69
    assert "failed: cannot reach amqp://guest@127.0.0.1:1/" in capsys.readouterr().err
    assert amqpctl(broker, "move_messages", "work.dlq", "no-such-exchange", "k") == 65
    assert amqpctl(broker, "delete_dead_letters", "work.dlq", "--message-id", "m-2") == 0
    assert "1 of 1 deleted" in capsys.readouterr().out
    assert count(channel, "work.dlq") == 0


def test_errors_are_one_line_name_what_is_missing_and_hide_passwords(broker, channel, capsys):
    dead_letters(channel, [b"alpha", b"beta"])
    capsys.readouterr()
    assert amqpctl(broker, "move_messages", "work.dlq", "nosuchx", "k") == 65
    err = capsys.readouterr().err
    assert err == "Error: NOT_FOUND - no exchange 'nosuchx' in vhost '/'\n"
    for argv in (["list_dead_letters"], ["list_dead_letters", "work.dlq"],
                 ["redrive", "work.dlq"], ["move_messages", "work.dlq", "x"],
                 ["delete_dead_letters", "work.dlq"], ["list_queues"]):
        assert amqpctl(broker, *argv, "-p", "nowhere") == 65
        assert capsys.readouterr().err == "Error: virtual host 'nowhere' does not exist\n"
    assert amqpctl(broker, "move_messages", "work.dlq", "", "x", "--to-uri",
                   "amqp://guest:s3cret@127.0.0.1:1/") == 69
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err
    assert "Moving messages of queue work.dlq in vhost / to exchange '' on " \
           "amqp://guest@127.0.0.1:1/ ..." in out
    assert err.count("Error:") == 1 and "cannot reach amqp://guest@127.0.0.1:1/" in err
    assert "0 of 2 moved" in err
    assert count(channel, "work.dlq") == 2


def test_redrive_of_a_queue_from_file_takes_only_that_queues_lines(
        broker, channel, capsys, tmp_path):
    dead_letters(channel, [b"one", b"two"], message_ids=["a", "b"])
    # dlx fans out: "other" dies into both work.dlq and else.dlq.
    dead_letters(channel, [b"other"], queue="else", exchange="shop2", key="other",
                 message_ids=["o"])
    def digest(body):
        return hashlib.sha256(body).hexdigest()
    lines = [{"vhost": "/", "queue": queue, "message_id": mid, "body_sha256": digest(body),
              "died_in": queue[:-4], "reason": "rejected", "exchange": "shop",
              "routing_keys": ["order"], "time": "2024-01-01T00:00:00Z"}
             for queue, mid, body in (("work.dlq", "a", b"one"), ("else.dlq", "o", b"other"))]
    path = tmp_path / "replay-candidates.ndjson"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert amqpctl(broker, "redrive", "work.dlq", "--from-file", str(path)) == 0
    out = capsys.readouterr().out
    assert "Skipping 1 replay candidates of queues other than work.dlq in vhost /" in out
    assert "1 of 1 redriven" in out
    assert (count(channel, "work.dlq"), count(channel, "else.dlq")) == (2, 1)
    assert wait_get(channel, "work")[2] == b"one"
