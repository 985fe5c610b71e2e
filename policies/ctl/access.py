"""amqpctl's verbs on users, vhosts and permissions, as rabbitmqctl names,
words and exits them."""

from __future__ import annotations

import argparse
from urllib.parse import quote

from dlx.semantics import MODES as SEMANTICS_MODES

from .api import AddVerb, Api, exists, vhost_path
from .output import EX_DATAERR, EX_UNAVAILABLE, CtlError, columns, say, table


def _user_path(name: str) -> str:
    return f"/users/{quote(name, safe='')}"


def _permission_path(vhost: str, user: str) -> str:
    return f"/permissions/{vhost_path(vhost)}/{quote(user, safe='')}"


def _existing_user(api: Api, name: str) -> None:
    if not exists(api, _user_path(name)):
        raise CtlError(f"user '{name}' not found", EX_DATAERR)


def add_user(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Adding user "{args.name}" ...')
    if exists(api, _user_path(args.name)):
        raise CtlError(f"user '{args.name}' already exists", EX_DATAERR)
    api.call("PUT", _user_path(args.name), {"password": args.user_password, "tags": ""})


def change_password(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Changing password for user "{args.name}" ...')
    _existing_user(api, args.name)
    api.call("PUT", _user_path(args.name), {"password": args.user_password})


def set_user_tags(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Setting tags for user "{args.name}" to [{", ".join(args.tags)}] ...')
    _existing_user(api, args.name)
    api.call("PUT", _user_path(args.name), {"tags": ",".join(args.tags)})


def delete_user(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Deleting user "{args.name}" ...')
    _existing_user(api, args.name)
    api.call("DELETE", _user_path(args.name))


def list_users(api: Api, args: argparse.Namespace) -> None:
    say(args, "Listing users ...")
    table(args, ["user", "tags"], [{"user": u["name"], "tags": u["tags"]}
                                   for u in api.call("GET", "/users")])


def add_vhost(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Adding vhost "{args.name}" ...')
    # Ours: the vhost follows RabbitMQ 3.13's or 4.3's semantics, chosen
    # now (docs/choosing-semantics.md); without it, the broker's.
    body = ({"rabbitmq_semantics": args.rabbitmq_semantics}
            if args.rabbitmq_semantics is not None else None)
    api.call("PUT", f"/vhosts/{vhost_path(args.name)}", body)


def delete_vhost(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Deleting vhost "{args.name}" ...')
    api.call("DELETE", f"/vhosts/{vhost_path(args.name)}",
             missing=CtlError(f"vhost '{args.name}' not found", EX_DATAERR))


VHOST_COLUMNS = ("name", "tracing", "messages", "messages_ready", "messages_unacknowledged",
                 "rabbitmq_semantics")


def list_vhosts(api: Api, args: argparse.Namespace) -> None:
    shown = columns(args, VHOST_COLUMNS, ["name"])
    say(args, "Listing vhosts ...")
    table(args, shown, api.call("GET", "/vhosts"))


def set_permissions(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Setting permissions for user "{args.user}" in vhost "{args.vhost}" ...')
    _existing_user(api, args.user)
    api.call("PUT", _permission_path(args.vhost, args.user),
             {"configure": args.configure, "write": args.write, "read": args.read},
             missing=CtlError(f"vhost '{args.vhost}' not found", EX_DATAERR))


def clear_permissions(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Clearing permissions for user "{args.user}" in vhost "{args.vhost}" ...')
    api.call("DELETE", _permission_path(args.vhost, args.user),
             missing=CtlError(f"no permissions for user '{args.user}' in vhost "
                              f"'{args.vhost}'", EX_DATAERR))


def list_permissions(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Listing permissions for vhost "{args.vhost}" ...')
    rows = api.call("GET", f"/vhosts/{vhost_path(args.vhost)}/permissions")
    table(args, ["user", "configure", "write", "read"], rows)


def list_user_permissions(api: Api, args: argparse.Namespace) -> None:
    say(args, f'Listing permissions for user "{args.user}" ...')
    rows = api.call("GET", f"{_user_path(args.user)}/permissions",  # rabbitmqctl's words and code
                    missing=CtlError(f"user '{args.user}' does not exist", EX_UNAVAILABLE))
    table(args, ["vhost", "configure", "write", "read"], rows)


def register(verb: AddVerb) -> None:
    for name, func, params in (
            ("add_user", add_user, ("name", "user_password")),
            ("delete_user", delete_user, ("name",)),
            ("change_password", change_password, ("name", "user_password")),
            ("list_users", list_users, ()),
            ("delete_vhost", delete_vhost, ("name",)),
            ("set_permissions", set_permissions, ("user", "configure", "write", "read")),
            ("clear_permissions", clear_permissions, ("user",)),
            ("list_permissions", list_permissions, ()),
            ("list_user_permissions", list_user_permissions, ("user",))):
        sub = verb(name, func, name.replace("_", " "))
        for param in params:
            # (the positional password must not shadow --password, the
            # credentials amqpctl itself logs in with)
            sub.add_argument(param, metavar=param.removeprefix("user_").upper())
    vhost = verb("add_vhost", add_vhost, "add vhost")
    vhost.add_argument("name", metavar="NAME")
    vhost.add_argument("--rabbitmq-semantics", choices=SEMANTICS_MODES,
                       help="whose semantics the vhost follows: RabbitMQ 3.13's or 4.3's "
                            "(default: the broker's)")
    verb("list_vhosts", list_vhosts, "list vhosts").add_argument("columns", nargs="*")
    tags = verb("set_user_tags", set_user_tags, "set a user's tags")
    tags.add_argument("name")
    tags.add_argument("tags", nargs="*")
