"""amqpctl's errors in plain words: policy definitions checked before they
are sent, unknown verbs, options and columns with a "did you mean", and a
management API that belongs to another product (a RabbitMQ on the default
port) refused before anything is done there."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from policies import ctl

from .management_api import call

USAGE, DATAERR, UNAVAILABLE = ctl.EX_USAGE, ctl.EX_DATAERR, ctl.EX_UNAVAILABLE


def run(broker, capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of amqpctl against `broker`."""
    code = ctl.main(["--port", str(broker.management_port), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def policy_names(broker) -> list[str]:
    return [p["name"] for p in call(broker.management_url, "GET", "/api/policies")[1]]


# ---- set_policy: the definition checked here, in plain words ---------------------------

@pytest.mark.parametrize("definition, error", [
    ('{"dead-leter-exchange": "dlx"}',
     'unknown policy key "dead-leter-exchange"; did you mean "dead-letter-exchange"?'),
    ('{"message-ttl": "soon"}',
     'message-ttl must be a whole number of milliseconds, 0 or more, got "soon"'),
    ('{"overflow": "reject-publsh"}',
     ('overflow must be one of "drop-head", "reject-publish", "reject-publish-dlx", '
      'got "reject-publsh"; did you mean "reject-publish"?')),
    ('{"queue-mode": "lazzy"}',
     'queue-mode must be one of "default", "lazy", got "lazzy"; did you mean "lazy"?'),
    ('{"colour": "red"}',
     'unknown policy key "colour" (amqpctl set_policy --help lists them)'),
    ('{not json}',
     ('the definition is not valid JSON (Expecting property name enclosed in double quotes '
      'at character 2): write it as {"max-length": 1000}, in single quotes for the shell')),
    ('[]', 'the definition must be a JSON object such as {"max-length": 1000}, got []'),
])
def test_a_bad_definition_is_refused_in_plain_words_and_nothing_is_set(
        broker, capsys, definition, error):
    code, out, err = run(broker, capsys, "set_policy", "p", ".*", definition)
    assert (code, out, err) == (DATAERR, "", f"Error: {error}\n")
    assert policy_names(broker) == []


def test_the_api_keeps_rabbitmqs_words_for_the_same_definition(broker):
    status, body = call(broker.management_url, "PUT", "/api/policies/%2F/p",
                        {"pattern": ".*", "definition": {"dead-leter-exchange": "dlx"}})
    assert (status, body["reason"]) == (
        400, ('Validation failed\n\n[{<<"dead-leter-exchange">>,<<"dlx">>}] are not '
              "recognised policy settings\n"))


def test_operator_policies_name_the_keys_they_take(broker, capsys):
    code, _, err = run(broker, capsys, "set_operator_policy", "cap", ".*",
                       '{"dead-letter-exchange": "dlx"}')
    assert code == DATAERR
    assert err.startswith('Error: an operator policy cannot set "dead-letter-exchange"; '
                          'it takes only "expires", "message-ttl", ')


def test_apply_to_and_the_keys_are_told(broker, capsys):
    code, _, err = run(broker, capsys, "set_policy", "--apply-to", "queue", "p", ".*",
                       '{"max-length": 1}')
    assert code == DATAERR
    assert err.endswith('got "queue"; did you mean "queues"?\n')
    code, out, _ = run(broker, capsys, "set_policy", "--help")
    assert code == 0 and "queue-mode" in out and "dead-letter-exchange" in out


def test_a_good_definition_still_goes_through(broker, capsys):
    code, _, err = run(broker, capsys, "-q", "set_policy", "p", ".*",
                       '{"queue-mode": "lazy", "max-length": 5}')
    assert (code, err) == (0, "")
    assert policy_names(broker) == ["p"]


# ---- verbs, options and columns -----------------------------------------------------

@pytest.mark.parametrize("argv, error", [
    (["list_queue"],
     'unknown verb "list_queue"; did you mean "list_queues"? (amqpctl --help lists the verbs)'),
    (["frobnicate"], 'unknown verb "frobnicate" (amqpctl --help lists the verbs)'),
    (["list_queues", "--prot", "5"], ('list_queues: unknown option "--prot"; did you mean '
                                      '"--port"?')),
    (["--prot", "5", "list_queues"], 'unknown option "--prot"; did you mean "--port"?'),
    (["set_policy", "--priorty", "1", "p", ".*", "{}"],
     'set_policy: unknown option "--priorty"; did you mean "--priority"?'),
    (["set_policy", "p"], ("set_policy: the following arguments are required: pattern, "
                           "definition (amqpctl set_policy --help shows the usage)")),
    (["set_policy", "--priority", "high", "p", ".*", "{}"],
     ("set_policy: argument --priority: invalid int value: 'high' (amqpctl set_policy --help "
      "shows the usage)")),
    (["purge_queue", "a", "b"],
     "purge_queue: unexpected argument b (amqpctl purge_queue --help shows the usage)"),
])
def test_command_line_mistakes_are_named_with_a_near_miss(argv, error, capsys):
    assert ctl.main(argv) == USAGE
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"Error: {error}\n")


def test_a_bad_port_in_the_environment_is_named(monkeypatch, capsys):
    monkeypatch.setenv("AMQPCTL_PORT", "15672x")
    assert ctl.main(["list_queues"]) == USAGE
    assert capsys.readouterr().err == 'Error: AMQPCTL_PORT must be a port number, got "15672x"\n'


def test_an_unknown_column_suggests_the_near_one(broker, capsys):
    code, _, err = run(broker, capsys, "list_queues", "name", "mesages")
    assert code == USAGE
    assert err.startswith('Error: list_queues: unknown column "mesages" '
                          '(did you mean "messages"?); valid columns: ')


def test_the_help_names_each_verb_in_good_english(capsys):
    assert ctl.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "set an operator policy" in out and "clear an operator policy" in out
    assert " a operator" not in out


# ---- the management API of another product -------------------------------------------

def test_rabbitmq_on_the_port_is_named_and_left_alone(rabbitmq_management_url, capsys):
    port = rabbitmq_management_url.rsplit(":", 1)[1]
    product = call(rabbitmq_management_url, "GET", "/api/overview")[1]
    for argv in (["list_queues"], ["set_policy", "amqpctl-not-here", "^never$",
                                   '{"max-length": 1}']):
        assert ctl.main(["--port", port, *argv]) == UNAVAILABLE
        out, err = capsys.readouterr()
        assert out == "" and err == (
            f"Error: the management API at http://127.0.0.1:{port}/api is RabbitMQ "
            f"{product['product_version']}'s, not amqp-server's: amqpctl manages "
            "amqp-server only; point amqpctl at amqp-server's management port with "
            "--port PORT or AMQPCTL_PORT (and --host or AMQPCTL_HOST for another machine)\n")
    assert call(rabbitmq_management_url, "GET", "/api/policies")[1] == []


class _Anonymous(BaseHTTPRequestHandler):
    """A management-like API that does not say what it is."""

    def do_GET(self) -> None:
        body = json.dumps({"management_version": "1.0"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_an_api_that_names_no_product_is_refused(capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Anonymous)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert ctl.main(["--port", str(port), "list_queues"]) == UNAVAILABLE
        err = capsys.readouterr().err
        assert err.startswith(f"Error: the management API at http://127.0.0.1:{port}/api "
                              "names no product (no product_name in /api/overview), so it "
                              "is not amqp-server's: amqpctl manages amqp-server only; ")
        assert "--port PORT or AMQPCTL_PORT" in err
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
