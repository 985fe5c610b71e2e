"""The Prometheus exporter's own HTTP listener, on RabbitMQ's plugin port
(15692) and the management listener's host: /metrics, /metrics/per-object
and /metrics/detailed, unauthenticated like the plugin's, served from the
broker's event loop so that every scrape reads a consistent broker."""

from __future__ import annotations

from aiohttp import web

from . import prometheus
from .api import ManagementServer
from .requests import BROKER

# The plugin's content type (the text exposition format, version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _answer(text: str) -> web.Response:
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


async def aggregated(request: web.Request) -> web.Response:
    return _answer(prometheus.render(request.app[BROKER], "aggregated"))


async def per_object(request: web.Request) -> web.Response:
    return _answer(prometheus.render(request.app[BROKER], "per-object"))


async def detailed(request: web.Request) -> web.Response:
    return _answer(prometheus.render(request.app[BROKER], "detailed",
                                     request.query.getall("family", []),
                                     request.query.get("vhost")))


def make_app(broker) -> web.Application:
    app = web.Application()
    app[BROKER] = broker
    app.router.add_get("/metrics", aggregated)
    app.router.add_get("/metrics/per-object", per_object)
    app.router.add_get("/metrics/detailed", detailed)
    return app


class PrometheusServer(ManagementServer):
    """Listens like the management API (same start and stop), with the
    exporter's routes only."""

    def make_app(self) -> web.Application:
        return make_app(self.broker)
