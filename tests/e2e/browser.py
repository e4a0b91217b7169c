"""The ops console in a real browser: `python -m ops console --local` started as an operator starts
it, against one of the session's pipelines, and headless Chromium (Debian's `chromium`) driven by
Playwright. Used by the console's browser tests and by the bot conversation's page test."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from moto.server import ThreadedMotoServer
from playwright.sync_api import sync_playwright

from bench.common import environment
from local.runtime import LAYER_DIR, PROJECT_ROOT
from pipeline import aws
from tests.e2e.support import Pipeline

CHROMIUM = shutil.which("chromium")
# .ci/run installs chromium and sets this: there a missing browser fails, on a developer's machine
# without Debian's chromium the browser tests are skipped with how to get it.
BROWSER_REQUIRED = os.environ.get("OPS_CONSOLE_BROWSER") == "required"
ARTIFACTS = PROJECT_ROOT / ".local" / "artifacts" / "console"
URL_LINE = re.compile(r"(http://127\.0\.0\.1:(\d+)/\?token=\S+)")
# Chromium resolves no name but 127.0.0.1's: a page sent to another site fails at once
# (ERR_NAME_NOT_RESOLVED), without a DNS query leaving the machine.
LOOPBACK_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"
# The credentials a console started against a moto server gets (moto accepts any).
AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "eu-central-1",
}


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free port, this process's AWS clients pointed at it (so a test seeds its
    stack there), its endpoint yielded for the console's process; the environment restored after."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with environment({**AWS_ENVIRONMENT, "AWS_ENDPOINT_URL": endpoint}):
            aws.reset_clients()
            try:
                yield endpoint
            finally:
                aws.reset_clients()
    finally:
        server.stop()


@contextmanager
def console_of(pipeline: Pipeline) -> Iterator[str]:
    """`python -m ops console --local --port 0` on the pipeline's state file; its printed URL."""
    pipeline.runtime.write_state()
    with serve_console(
        ["--local", "--local-file", str(pipeline.state_file)], pipeline.ops_outputs.append
    ) as url:
        yield url


@contextmanager
def serve_console(
    options: list[str], keep_output: Any, environment: dict[str, str] | None = None
) -> Iterator[str]:
    """`python -m ops console --port 0 <options>` as an operator starts it; its printed URL.
    What it printed (its audit trail) goes to `keep_output` when it stops."""
    base = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(str(p) for p in (PROJECT_ROOT / "functions", LAYER_DIR, PROJECT_ROOT)),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "ops", "console", "--port", "0", *options],
        env={**base, **(environment or {})},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    printed: list[str] = []
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([process.stdout], [], [], 1)
            if ready:
                printed.append(process.stdout.readline())
                found = URL_LINE.search(printed[-1])
                url = found.group(1) if found else None
        assert url is not None, f"the console printed no URL: {''.join(printed)}"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        rest = process.stdout.read()
        keep_output("".join(printed) + rest)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright; skipped (failed where CI requires it) without it."""
    if CHROMIUM is None:
        message = "no chromium on PATH: apt-get install chromium (Debian's package; .ci/run installs it)"
        if BROWSER_REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", LOOPBACK_ONLY])
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def opened_page(browser: Any, console: str, signed_in: dict[str, Any] | None = None) -> Iterator[Any]:
    """A fresh browser context on the console: its URL's token makes the session (the link works
    once), or `signed_in` (`signed_in_state`) brings the session of a context that used it."""
    context = browser.new_context(viewport={"width": 1280, "height": 560}, storage_state=signed_in)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{origin(console)}/events" if signed_in else console)
    try:
        yield page
    finally:
        context.close()


def signed_in_state(browser: Any, console: str) -> dict[str, Any]:
    """The storage state (the session cookie) of a context that opened the console's link, for
    the tests that each open a page of the same console."""
    with opened_page(browser, console) as page:
        return dict(page.context.storage_state())


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def origin(url: str) -> str:
    found = re.match(r"http://[^/]+", url)
    assert found is not None, url
    return found.group(0)


def cells(page: Any, first: str) -> list[str]:
    """The cells of the page's table row whose first cell is `first`."""
    row = page.locator(f"tr:has(td:first-child:text-is('{first}'))")
    return [str(text) for text in row.locator("td").all_inner_texts()]
