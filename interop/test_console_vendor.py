"""The chart library ships with the console: uPlot's files are served from
the package under the page's own policy (nothing is fetched from anywhere
else), its licence beside them, and the package data names them."""

from __future__ import annotations

import glob
import hashlib
import re
import tomllib
from pathlib import Path

import amqp_server
from amqp_server.management import console

from .management_api import fetch

PACKAGE = Path(amqp_server.__file__).parent
VENDOR = PACKAGE / "management" / "console" / "vendor"


def test_the_chart_library_is_served_from_the_package(broker):
    status, headers, page = fetch(broker, "/")
    assert b'<script src="/console/vendor/uPlot.iife.min.js" defer></script>' in page
    assert b'href="/console/vendor/uPlot.min.css"' in page
    # Every script and style sheet the page loads is its own.
    assert not re.search(rb'(src|href)="(https?:)?//', page)
    assert "script-src 'self';" in headers["Content-Security-Policy"]
    for name, kind in (("uPlot.iife.min.js", "application/javascript"),
                       ("uPlot.min.css", "text/css")):
        status, headers, body = fetch(broker, "/console/vendor/" + name)
        assert status == 200 and headers["Content-Type"].startswith(kind)
        assert body == (VENDOR / name).read_bytes()
    for hidden in ("vendor/README", "vendor/uPlot.LICENSE", "vendor/../__init__.py",
                   "other/uPlot.min.css"):
        assert fetch(broker, "/console/" + hidden)[0] == 404


def test_the_vendored_files_are_the_npm_packages_with_their_licence():
    readme = (VENDOR / "README").read_text()
    for name in ("uPlot.iife.min.js", "uPlot.min.css"):
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in readme
    assert (VENDOR / "uPlot.iife.min.js").read_text().startswith(
        "/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    assert (VENDOR / "uPlot.LICENSE").read_text().startswith("The MIT License (MIT)")


def test_the_package_data_holds_every_file_the_console_serves():
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["amqp_server"]
    shipped = {Path(found).as_posix() for pattern in patterns
               for found in glob.glob(pattern, root_dir=PACKAGE)}
    served = {f"management/console/{name}" for name in console.FILES}
    served.add("management/console/vendor/uPlot.LICENSE")
    assert served <= shipped, sorted(served - shipped)
