"""Ports that are taken: on a machine where RabbitMQ runs, 5672, 15672 and
15692 all are.  The broker tries every listener, names each one it could
not open in one message, and says how to start anyway (port 0 picks a free
port, -1 turns an optional listener off), in the flags of the command or
the arguments of the embedding API; it exits 1 without a traceback."""

from __future__ import annotations

import contextlib
import errno
import socket
import subprocess
import sys

import pytest
import trustme

import amqp_server
from amqp_server import ListenError
from amqp_server.server import Refusal


@contextlib.contextmanager
def taken_ports(count: int):
    """`count` loopback ports, each held by a listening socket."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            holder = stack.enter_context(socket.socket())
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            ports.append(holder.getsockname()[1])
        yield ports


def start_fails(tmp_path, *flags: str) -> tuple[int, list[str]]:
    """Exit code and stderr lines of `amqp-server` that must not start."""
    done = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--data-dir", str(tmp_path / "data"), *flags],
        check=False, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr.splitlines()


def test_every_taken_port_is_named_at_once_with_the_flags_that_avoid_them(tmp_path):
    with taken_ports(3) as (amqp, management, prometheus):
        code, lines = start_fails(tmp_path, "--port", str(amqp), "--management-port",
                                  str(management), "--prometheus-port", str(prometheus))
    assert code == 1
    assert lines == [
        f"amqp-server: cannot listen on 127.0.0.1:{amqp} (AMQP): Address already in use",
        (f"amqp-server: cannot listen on 127.0.0.1:{management} (management): "
         "Address already in use"),
        (f"amqp-server: cannot listen on 127.0.0.1:{prometheus} (Prometheus): "
         "Address already in use"),
        ("amqp-server: --port 0 --management-port 0 --prometheus-port 0 pick free ports "
         "instead (printed at start); --management-port -1 or --prometheus-port -1 turns "
         "that listener off."),
    ]


def test_only_the_taken_ports_are_named(tmp_path):
    with taken_ports(1) as (management,):
        code, lines = start_fails(tmp_path, "--port", "0", "--management-port",
                                  str(management), "--prometheus-port", "0")
    assert code == 1
    assert lines == [
        (f"amqp-server: cannot listen on 127.0.0.1:{management} (management): "
         "Address already in use"),
        ("amqp-server: --management-port 0 picks a free port instead (printed at start); "
         "--management-port -1 turns that listener off."),
    ]


def test_a_taken_amqp_port_is_not_offered_to_be_turned_off(tmp_path):
    with taken_ports(1) as (amqp,):
        code, lines = start_fails(tmp_path, "--port", str(amqp), "--management-port", "-1",
                                  "--prometheus-port", "-1")
    assert code == 1
    assert lines[-1] == "amqp-server: --port 0 picks a free port instead (printed at start)."
    assert "-1" not in lines[-1]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    path = folder / "server.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return str(path)


def test_a_taken_amqps_port_is_named_with_its_flag(tmp_path, certificate):
    config = tmp_path / "broker.toml"
    config.write_text(f'tls_certfile = "{certificate}"\ntls_keyfile = "{certificate}"\n')
    with taken_ports(2) as (amqp, amqps):
        code, lines = start_fails(tmp_path, "--config", str(config), "--port", str(amqp),
                                  "--tls-port", str(amqps), "--management-port", "-1",
                                  "--prometheus-port", "-1")
    assert code == 1
    assert lines == [
        f"amqp-server: cannot listen on 127.0.0.1:{amqp} (AMQP): Address already in use",
        f"amqp-server: cannot listen on 127.0.0.1:{amqps} (AMQPS): Address already in use",
        ("amqp-server: --port 0 --tls-port 0 pick free ports instead (printed at start); "
         "--tls-port -1 turns that listener off."),
    ]


def test_tls_port_minus_one_turns_the_amqps_listener_off(tmp_path, certificate):
    config = tmp_path / "broker.toml"
    config.write_text(f'tls_certfile = "{certificate}"\ntls_keyfile = "{certificate}"\n')
    broker = subprocess.Popen(
        [sys.executable, "-m", "amqp_server", "--config", str(config), "--port", "0",
         "--tls-port", "-1", "--management-port", "-1", "--prometheus-port", "-1",
         "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert "amqp-server listening on" in broker.stdout.readline()
    finally:
        broker.terminate()
        out, _ = broker.communicate(timeout=30)
    assert "amqps" not in out


def test_an_address_that_is_not_this_machines_is_named_with_the_host_flag(tmp_path):
    # TEST-NET-1 (RFC 5737): no machine has it, so bind() fails at once.
    code, lines = start_fails(tmp_path, "--host", "192.0.2.1", "--port", "0",
                              "--management-port", "-1", "--prometheus-port", "-1")
    assert code == 1
    assert lines == [
        "amqp-server: cannot listen on 192.0.2.1:0 (AMQP): Cannot assign requested address",
        ("amqp-server: --host must name an address of this machine (127.0.0.1, the default, "
         "or 0.0.0.0 for every interface)."),
    ]


async def test_a_failed_start_closes_the_listeners_that_did_open():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with taken_ports(1) as (management,), pytest.raises(ListenError) as caught:
        # The AMQP listener opens before the management port is found taken.
        async with amqp_server.serve(port=free, management_port=management):
            pass
    assert [refusal.listener for refusal in caught.value.refusals] == ["management"]
    with socket.socket() as again:
        again.bind(("127.0.0.1", free))


async def test_the_embedding_api_names_every_taken_port_in_its_arguments():
    with taken_ports(2) as (amqp, management), pytest.raises(ListenError) as caught:
        async with amqp_server.serve(port=amqp, management_port=management):
            pass
    error = caught.value
    assert [(r.listener, r.port, r.port_in_the_way) for r in error.refusals] == [
        ("AMQP", amqp, True), ("management", management, True)]
    assert str(error).splitlines() == [
        f"cannot listen on 127.0.0.1:{amqp} (AMQP): Address already in use",
        f"cannot listen on 127.0.0.1:{management} (management): Address already in use",
        ("port=0, management_port=0 pick free ports instead (the broker's port attributes "
         "say which); management_port=-1 turns that listener off."),
    ]


async def test_the_embedding_api_starts_after_a_collision_on_free_ports():
    with taken_ports(1) as (amqp,):
        with pytest.raises(ListenError, match="port=0 picks a free port"):
            async with amqp_server.serve(port=amqp):
                pass
        async with amqp_server.serve(port=0) as broker:
            assert broker.port not in (0, amqp)


def test_a_refusal_tells_a_port_problem_from_an_address_problem():
    taken = Refusal("AMQP", "127.0.0.1", 5672, "Address already in use", errno.EADDRINUSE)
    privileged = Refusal("AMQP", "127.0.0.1", 80, "Permission denied", errno.EACCES)
    nowhere = Refusal("AMQP", "192.0.2.1", 5672, "Cannot assign requested address",
                      errno.EADDRNOTAVAIL)
    unknown = Refusal("AMQP", "nosuch.invalid", 5672, "Name or service not known",
                      socket.EAI_NONAME)
    assert [r.port_in_the_way for r in (taken, privileged, nowhere, unknown)] == [
        True, True, False, False]
    assert [r.host_in_the_way for r in (taken, privileged, nowhere, unknown)] == [
        False, False, True, True]
