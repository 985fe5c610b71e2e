"""amqpctl: a rabbitmqctl-like CLI that talks to the broker's management API.

    amqpctl set_policy [--priority N] [--apply-to T] NAME PATTERN DEFINITION [-p VHOST]
    amqpctl list_queues [-p VHOST] [name messages policy ...]

Global options (--host, --port, --username/--user, --password, -p/--vhost,
--formatter, -q/--quiet) go before or after the verb; connection options
default to AMQPCTL_HOST, AMQPCTL_PORT, AMQPCTL_USERNAME, AMQPCTL_PASSWORD.
Output is tab-separated with a header row, or JSON with --formatter json.
Failures print one line to stderr and exit with rabbitmqctl's codes (64
usage, 65 bad data, 69 broker unreachable, 77 access refused).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from urllib.parse import quote

from . import ctl_runtime

EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_NOPERM = 64, 65, 69, 77

# What each listing can show: the keys the management API fills in its rows.
VALID_COLUMNS = {
    "queues": ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type",
               "state", "messages", "messages_ready", "messages_unacknowledged",
               "messages_delayed", "message_bytes_ready", "messages_ram", "messages_paged_out",
               "message_bytes_paged_out", "consumers", "single_active_consumer_tag", "policy",
               "operator_policy", "effective_policy_definition", "dead_lettered",
               "dead_letter_dropped", "expired", "rejected_publishes", "dead_letter_held"),
    "exchanges": ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments",
                  "policy"),
    "bindings": ("source_name", "source_kind", "destination_name", "destination_kind",
                 "routing_key", "arguments", "properties_key", "vhost"),
}
DEFAULT_COLUMNS = {
    "queues": ["name", "messages"],
    "exchanges": ["name", "type"],
    "bindings": ["source_name", "source_kind", "destination_name", "destination_kind",
                 "routing_key", "arguments"],
    "policies": ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
}


class CtlError(Exception):
    def __init__(self, message: str, code: int, path: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.path = path  # the API path that answered 404, for a clearer message


class Api:
    def __init__(self, host: str, port: int, username: str, password: str) -> None:
        self.base = f"http://{host}:{port}/api"
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}"}

    def call(self, method: str, path: str, body=None, headers: dict | None = None,
             missing: CtlError | None = None):
        """`missing`: what a bare 404 (the API's "Not Found") means for this
        call, raised instead of the generic "not found"."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, **(headers or {})}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code == 404 and not _is_json(raw):
                # The management API's 404s are JSON; another server's are not.
                raise self._not_management("it has no such API (a 404 without JSON)") from None
            error = _http_error(exc, raw)
            if missing is not None and str(error) == "not found":
                raise missing from None
            error.path = path
            raise error from None
        except (http.client.HTTPException, ConnectionResetError) as exc:
            # Something listens there but does not speak HTTP: most often
            # --port names the AMQP port, which answers with its protocol header.
            why = ("it speaks AMQP, not HTTP: that is the AMQP port" if "AMQP" in str(exc)
                   else f"it does not answer HTTP ({exc!r})")
            raise self._not_management(why) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(f"unable to reach the management API at {self.base}: {reason}",
                           EX_UNAVAILABLE) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise self._not_management("it answers something other than JSON") from None

    def _not_management(self, why: str) -> CtlError:
        return CtlError(f"{self.base} is not a management API: {why}; --port must name "
                        "the management port (15672 by default)", EX_UNAVAILABLE)


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


def _http_error(exc: urllib.error.HTTPError, raw: bytes) -> CtlError:
    try:
        body = json.loads(raw)
        error, reason = body.get("error"), body.get("reason", exc.reason)
    except (ValueError, AttributeError):
        error, reason = None, exc.reason
    if exc.code == 401 and error == "not_authorised":
        # Logged in, but its tags or permissions do not allow this.
        return CtlError(f"access refused: {reason}", EX_NOPERM)
    if exc.code == 401:
        return CtlError("access refused: wrong username or password", EX_NOPERM)
    if exc.code == 404:
        # A reason of its own (which exchange is missing, say) is told as
        # given; the bare "Not Found" is named by the caller.
        if isinstance(reason, str) and reason.startswith("NOT_FOUND - "):
            return CtlError(reason, EX_DATAERR)
        return CtlError("not found", EX_DATAERR)
    if exc.code == 403:
        return CtlError(f"access refused: {reason}", EX_NOPERM)
    return CtlError(str(reason).strip().replace("Validation failed\n\n", ""), EX_DATAERR)


def _vhost_path(vhost: str) -> str:
    return quote(vhost, safe="")


def _queue_path(vhost: str, queue: str) -> str:
    return f"/queues/{_vhost_path(vhost)}/{quote(queue, safe='')}"


def _columns(args, valid: tuple[str, ...], default: list[str]) -> list[str]:
    """The columns asked for, refused as rabbitmqctl refuses an unknown info
    key: before anything is asked of the broker, with the valid ones."""
    unknown = [column for column in args.columns if column not in valid]
    if unknown:
        raise CtlError(f"{args.verb}: unknown column(s) {', '.join(unknown)}; "
                       f"valid columns: {', '.join(sorted(valid))}", EX_USAGE)
    return args.columns or default


# ---- verbs -----------------------------------------------------------------

def set_policy(api: Api, args, operator: bool = False) -> None:
    try:
        definition = json.loads(args.definition)
    except json.JSONDecodeError as exc:
        raise CtlError(f"could not parse JSON document: {exc}", EX_DATAERR) from None
    kind = "operator-policies" if operator else "policies"
    _say(args, f'Setting policy "{args.name}" for pattern "{args.pattern}" to '
               f'"{args.definition}" with priority "{args.priority}" for vhost "{args.vhost}" ...')
    api.call("PUT", f"/{kind}/{_vhost_path(args.vhost)}/{quote(args.name, safe='')}",
             {"pattern": args.pattern, "definition": definition, "priority": args.priority,
              "apply-to": args.apply_to})


def clear_policy(api: Api, args, operator: bool = False) -> None:
    kind = "operator-policies" if operator else "policies"
    _say(args, f'Clearing policy "{args.name}" on vhost "{args.vhost}" ...')
    api.call("DELETE", f"/{kind}/{_vhost_path(args.vhost)}/{quote(args.name, safe='')}",
             missing=CtlError(f"policy '{args.name}' not found in vhost '{args.vhost}'",
                              EX_DATAERR))


def list_policies(api: Api, args, operator: bool = False) -> None:
    kind = "operator-policies" if operator else "policies"
    _say(args, f'Listing policies for vhost "{args.vhost}" ...')
    rows = api.call("GET", f"/{kind}/{_vhost_path(args.vhost)}")
    _table(args, DEFAULT_COLUMNS["policies"], rows)


def list_queues(api: Api, args) -> None:
    columns = _columns(args, VALID_COLUMNS["queues"], DEFAULT_COLUMNS["queues"])
    _say(args, f"Listing queues for vhost {args.vhost} ...")
    rows = api.call("GET", f"/queues/{_vhost_path(args.vhost)}")
    _table(args, columns, rows)


def list_exchanges(api: Api, args) -> None:
    columns = _columns(args, VALID_COLUMNS["exchanges"], DEFAULT_COLUMNS["exchanges"])
    _say(args, f"Listing exchanges for vhost {args.vhost} ...")
    rows = api.call("GET", f"/exchanges/{_vhost_path(args.vhost)}")
    _table(args, columns, rows)


def list_bindings(api: Api, args) -> None:
    columns = _columns(args, VALID_COLUMNS["bindings"], DEFAULT_COLUMNS["bindings"])
    _say(args, f"Listing bindings for vhost {args.vhost}...")
    rows = [{"source_name": b["source"], "source_kind": "exchange",
             "destination_name": b["destination"], "destination_kind": b["destination_type"],
             **b} for b in api.call("GET", f"/bindings/{_vhost_path(args.vhost)}")]
    _table(args, columns, rows)


def purge_queue(api: Api, args) -> None:
    _say(args, f'Purging queue "{args.name}" in vhost "{args.vhost}" ...')
    _on_queue(api, args, "DELETE", "/contents")


def delete_queue(api: Api, args) -> None:
    _say(args, f"Deleting queue '{args.name}' on vhost '{args.vhost}' ...")
    _on_queue(api, args, "DELETE", "")


def _on_queue(api: Api, args, method: str, suffix: str) -> None:
    api.call(method, f"{_queue_path(args.vhost, args.name)}{suffix}",
             missing=CtlError(f"queue '{args.name}' not found in vhost '{args.vhost}'",
                              EX_DATAERR))


def export_definitions(api: Api, args) -> None:
    document = api.call("GET", "/definitions")
    text = json.dumps(document, indent=2)
    if args.file == "-":
        print(text)
    else:
        with open(args.file, "w") as handle:
            handle.write(text)
        _say(args, f"Exported definitions to {args.file}")


def import_definitions(api: Api, args) -> None:
    try:
        with (sys.stdin if args.file == "-" else open(args.file)) as handle:
            document = json.load(handle)
    except OSError as exc:
        raise CtlError(f"cannot read {args.file}: {exc.strerror}", EX_DATAERR) from None
    except json.JSONDecodeError as exc:
        raise CtlError(f"{args.file} is not valid JSON: {exc}", EX_DATAERR) from None
    api.call("POST", "/definitions", document)
    _say(args, f"Imported definitions from {args.file}")


# ---- users, vhosts, permissions -------------------------------------------------

def _user_path(name: str) -> str:
    return f"/users/{quote(name, safe='')}"


def add_user(api: Api, args) -> None:
    _say(args, f'Adding user "{args.name}" ...')
    if _exists(api, _user_path(args.name)):
        raise CtlError(f"user '{args.name}' already exists", EX_DATAERR)
    api.call("PUT", _user_path(args.name), {"password": args.user_password, "tags": ""})


def change_password(api: Api, args) -> None:
    _say(args, f'Changing password for user "{args.name}" ...')
    _existing_user(api, args.name)
    api.call("PUT", _user_path(args.name), {"password": args.user_password})


def set_user_tags(api: Api, args) -> None:
    _say(args, f'Setting tags for user "{args.name}" to [{", ".join(args.tags)}] ...')
    _existing_user(api, args.name)
    api.call("PUT", _user_path(args.name), {"tags": ",".join(args.tags)})


def delete_user(api: Api, args) -> None:
    _say(args, f'Deleting user "{args.name}" ...')
    _existing_user(api, args.name)
    api.call("DELETE", _user_path(args.name))


def list_users(api: Api, args) -> None:
    _say(args, "Listing users ...")
    _table(args, ["user", "tags"], [{"user": u["name"], "tags": u["tags"]}
                                    for u in api.call("GET", "/users")])


def add_vhost(api: Api, args) -> None:
    _say(args, f'Adding vhost "{args.name}" ...')
    api.call("PUT", f"/vhosts/{_vhost_path(args.name)}")


def delete_vhost(api: Api, args) -> None:
    _say(args, f'Deleting vhost "{args.name}" ...')
    api.call("DELETE", f"/vhosts/{_vhost_path(args.name)}",
             missing=CtlError(f"vhost '{args.name}' not found", EX_DATAERR))


def list_vhosts(api: Api, args) -> None:
    _say(args, "Listing vhosts ...")
    _table(args, ["name"], api.call("GET", "/vhosts"))


def _permission_path(vhost: str, user: str) -> str:
    return f"/permissions/{_vhost_path(vhost)}/{quote(user, safe='')}"


def set_permissions(api: Api, args) -> None:
    _say(args, f'Setting permissions for user "{args.user}" in vhost "{args.vhost}" ...')
    _existing_user(api, args.user)
    api.call("PUT", _permission_path(args.vhost, args.user),
             {"configure": args.configure, "write": args.write, "read": args.read},
             missing=CtlError(f"vhost '{args.vhost}' not found", EX_DATAERR))


def clear_permissions(api: Api, args) -> None:
    _say(args, f'Clearing permissions for user "{args.user}" in vhost "{args.vhost}" ...')
    api.call("DELETE", _permission_path(args.vhost, args.user),
             missing=CtlError(f"no permissions for user '{args.user}' in vhost "
                              f"'{args.vhost}'", EX_DATAERR))


def list_permissions(api: Api, args) -> None:
    _say(args, f'Listing permissions for vhost "{args.vhost}" ...')
    rows = api.call("GET", f"/vhosts/{_vhost_path(args.vhost)}/permissions")
    _table(args, ["user", "configure", "write", "read"], rows)


def list_user_permissions(api: Api, args) -> None:
    _say(args, f'Listing permissions for user "{args.user}" ...')
    rows = api.call("GET", f"{_user_path(args.user)}/permissions",  # rabbitmqctl's words and code
                    missing=CtlError(f"user '{args.user}' does not exist", EX_UNAVAILABLE))
    _table(args, ["vhost", "configure", "write", "read"], rows)


def _exists(api: Api, path: str) -> bool:
    try:
        api.call("GET", path)
        return True
    except CtlError as exc:
        if str(exc) == "not found":
            return False
        raise


def _existing_user(api: Api, name: str) -> None:
    if not _exists(api, _user_path(name)):
        raise CtlError(f"user '{name}' not found", EX_DATAERR)


# ---- output -----------------------------------------------------------------

def _say(args, text: str) -> None:
    if not args.quiet and args.formatter != "json":
        print(text)


def _cell(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _table(args, columns: list[str], rows: list[dict]) -> None:
    if args.formatter == "json":
        print(json.dumps([{c: row.get(c) for c in columns} for row in rows]))
        return
    print("\t".join(columns))
    for row in rows:
        print("\t".join(_cell(row.get(c)) for c in columns))


# ---- parsing ----------------------------------------------------------------

def _global_options() -> argparse.ArgumentParser:
    """Options every verb takes, before or after it (see _globals_after_verb)."""
    env = os.environ.get
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("--host", default=env("AMQPCTL_HOST", "127.0.0.1"))
    common.add_argument("--port", type=int, default=int(env("AMQPCTL_PORT", "15672")),
                        help="the management API port")
    common.add_argument("-u", "--username", "--user", dest="username",
                        default=env("AMQPCTL_USERNAME", "guest"))
    common.add_argument("--password", default=env("AMQPCTL_PASSWORD", "guest"))
    common.add_argument("-p", "--vhost", default="/")
    common.add_argument("--formatter", choices=["table", "json"], default="table")
    common.add_argument("-q", "--quiet", action="store_true")
    return common


def _globals_after_verb(argv: list[str], common: argparse.ArgumentParser) -> list[str]:
    """rabbitmqctl takes global options on either side of the verb, argparse
    only after a sub-command: move those given before the verb behind it."""
    takes_value = {flag: action.nargs != 0
                   for action in common._actions for flag in action.option_strings}
    moved, i = [], 0
    while i < len(argv):
        token = argv[i]
        flag = token.split("=", 1)[0] if token.startswith("--") else token
        if flag in takes_value:
            width = 2 if takes_value[flag] and flag == token else 1
        elif takes_value.get(token[:2]) and not token.startswith("--"):
            width = 1  # -pVHOST
        else:
            break
        moved += argv[i:i + width]
        i += width
    if i >= len(argv):
        return argv  # no verb: argparse says so
    return [argv[i], *moved, *argv[i + 1:]]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amqpctl", description="Manage an amqp-server through its HTTP API.",
        epilog="Global options (amqpctl VERB --help lists them) go before or after the verb.")
    common = _global_options()
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, func, help_text: str):
        sub = verbs.add_parser(name, parents=[common], help=help_text)
        sub.set_defaults(func=func)
        return sub

    for prefix, operator in (("", False), ("operator_", True)):
        kind = "operator policy" if operator else "policy"
        sub = verb(f"set_{prefix}policy",
                   lambda api, a, o=operator: set_policy(api, a, o), f"set a {kind}")
        sub.add_argument("--priority", type=int, default=0)
        sub.add_argument("--apply-to", default="all")
        sub.add_argument("name")
        sub.add_argument("pattern")
        sub.add_argument("definition")
        verb(f"clear_{prefix}policy", lambda api, a, o=operator: clear_policy(api, a, o),
             f"clear a {kind}").add_argument("name")
        verb(f"list_{prefix}policies", lambda api, a, o=operator: list_policies(api, a, o),
             f"list {kind} entries")
    for name, func in (("list_queues", list_queues), ("list_exchanges", list_exchanges),
                       ("list_bindings", list_bindings)):
        verb(name, func, name.replace("_", " ")).add_argument("columns", nargs="*")
    verb("purge_queue", purge_queue, "purge a queue").add_argument("name")
    verb("delete_queue", delete_queue, "delete a queue").add_argument("name")
    for name, func, params in (
            ("add_user", add_user, ("name", "user_password")),
            ("delete_user", delete_user, ("name",)),
            ("change_password", change_password, ("name", "user_password")),
            ("list_users", list_users, ()),
            ("add_vhost", add_vhost, ("name",)),
            ("delete_vhost", delete_vhost, ("name",)),
            ("list_vhosts", list_vhosts, ()),
            ("set_permissions", set_permissions, ("user", "configure", "write", "read")),
            ("clear_permissions", clear_permissions, ("user",)),
            ("list_permissions", list_permissions, ()),
            ("list_user_permissions", list_user_permissions, ("user",))):
        sub = verb(name, func, name.replace("_", " "))
        for param in params:
            # (the positional password must not shadow --password, the
            # credentials amqpctl itself logs in with)
            sub.add_argument(param, metavar=param.removeprefix("user_").upper())
    tags = verb("set_user_tags", set_user_tags, "set a user's tags")
    tags.add_argument("name")
    tags.add_argument("tags", nargs="*")
    verb("export_definitions", export_definitions,
         "write definitions to FILE ('-' for stdout)").add_argument("file")
    verb("import_definitions", import_definitions,
         "load definitions from FILE ('-' for stdin)").add_argument("file")
    ctl_runtime.add_verbs(verb)
    # The dead-letter verbs live in their own module.
    from . import ctl_dead_letters
    ctl_dead_letters.register(verb)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(_globals_after_verb(argv, _global_options()))
    except SystemExit as exc:
        return EX_USAGE if exc.code not in (0, None) else 0
    api = Api(args.host, args.port, args.username, args.password)
    try:
        args.func(api, args)
    except CtlError as exc:
        exc = _named(api, args, exc)
        print(f"Error: {exc}", file=sys.stderr)
        return exc.code
    return 0


def _named(api: Api, args, exc: CtlError) -> CtlError:
    """A bare 404 said as what was missing: the vhost when it does not
    exist, else the API path that answered."""
    if str(exc) != "not found":
        return exc
    return missing_vhost(api, args.vhost) or CtlError(f"not found: {exc.path}", exc.code)


def missing_vhost(api: Api, vhost: str) -> CtlError | None:
    """What every verb says of a vhost that does not exist, or None when
    it does (or is not ours to see: then say what we know)."""
    try:
        vhost_exists = _exists(api, f"/vhosts/{_vhost_path(vhost)}")
    except CtlError:
        vhost_exists = True
    if not vhost_exists:
        return CtlError(f"virtual host '{vhost}' does not exist", EX_DATAERR)
    return None


if __name__ == "__main__":
    # Run as the imported module, whose CtlError the verbs in ctl_runtime raise.
    from policies.ctl import main as imported_main
    sys.exit(imported_main())
