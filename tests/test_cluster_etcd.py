"""The etcd client's own rules, without an etcd: what it says when nothing
(or something else) answers, key ranges, and what the package imports."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from aiohttp import web

from amqp_server.cluster.etcd import EtcdClient, EtcdError, prefix_end


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_dead_etcd_is_one_line():
    url = f"http://127.0.0.1:{closed_port()}"
    async with EtcdClient(url) as etcd:
        with pytest.raises(EtcdError) as caught:
            await etcd.get("/k")
    assert str(caught.value) == f"etcd at {url} is not reachable: connection refused"
    assert caught.value.unreachable


async def test_every_endpoint_is_named_with_its_own_reason():
    refused = f"http://127.0.0.1:{closed_port()}"
    unknown = "http://no-such-host.invalid:2379"
    async with EtcdClient(f"{refused},{unknown}") as etcd:
        with pytest.raises(EtcdError) as caught:
            await etcd.put("/k", "v")
    assert str(caught.value) == (f"etcd at {refused}, {unknown} is not reachable: "
                                 f"{refused}: connection refused; "
                                 f"{unknown}: cannot resolve the host name")


async def test_endpoints_without_a_scheme_are_http():
    port = closed_port()
    etcd = EtcdClient(f" 127.0.0.1:{port}/ ,")
    assert etcd.endpoints == [f"http://127.0.0.1:{port}"]
    await etcd.close()
    with pytest.raises(ValueError, match="no etcd endpoint"):
        EtcdClient(" , ")


async def test_something_that_is_not_etcd_is_passed_over():
    async def not_found(request):
        return web.Response(status=404, text="<html>")

    app = web.Application()
    app.router.add_post("/v3/kv/range", not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with EtcdClient(f"127.0.0.1:{port}") as etcd:
            with pytest.raises(EtcdError) as caught:
                await etcd.get("/k")
    finally:
        await runner.cleanup()
    assert str(caught.value) == (f"etcd at http://127.0.0.1:{port} is not reachable: "
                                 f"answered HTTP 404 without etcd's JSON")


def test_a_prefix_range_ends_after_the_last_key_with_the_prefix():
    assert prefix_end("/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\0"


def test_the_cluster_package_imports_nothing_of_the_broker():
    code = ("import sys, amqp_server.cluster; "
            "print(sorted(m for m in sys.modules if m.startswith('amqp_server.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    for layer in ("broker", "protocol", "management", "storage", "wire"):
        assert f"amqp_server.{layer}" not in loaded
