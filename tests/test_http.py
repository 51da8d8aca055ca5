"""The streamable HTTP transport, with real HTTP requests against a real server process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp import Client

pytestmark = pytest.mark.anyio

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(workspace: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pt2_bug_basher", "serve", "--transport", "http", "--port", str(port),
         "--state-dir", str(workspace / "state"), "--repo", str(workspace / "repo"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc, port
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the HTTP server did not start")


@pytest.fixture
def http_server(workspace):
    proc, port = start(workspace)
    yield port
    proc.terminate()
    proc.wait(timeout=10)


async def test_http_serves_mcp_on_loopback(http_server):
    async with Client(f"http://127.0.0.1:{http_server}/mcp") as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert {"check_env", "run_with_logs"} <= names


def test_dns_rebinding_is_refused(http_server):
    url = f"http://127.0.0.1:{http_server}/mcp"
    good = httpx.post(url, json=INIT, headers=HEADERS, timeout=10)
    assert good.status_code == 200
    rebound = httpx.post(url, json=INIT, headers={**HEADERS, "Host": f"evil.example:{http_server}"}, timeout=10)
    assert rebound.status_code in (403, 421)
    cross = httpx.post(url, json=INIT, headers={**HEADERS, "Origin": "http://evil.example"}, timeout=10)
    assert cross.status_code == 403


def test_non_loopback_bind_without_token_is_refused(workspace):
    proc, _ = start(workspace, "--host", "0.0.0.0")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert b"not a loopback address" in err and b"--auth-token" in err


def test_bearer_token_is_required_when_set(workspace):
    token = "s3cret-token-for-tests-0123"
    proc, port = start(workspace, env={"PT2_BUG_BASHER_AUTH_TOKEN": token})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx.post(url, json=INIT, headers=HEADERS, timeout=10).status_code == 401
        wrong = httpx.post(url, json=INIT, headers={**HEADERS, "Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        right = httpx.post(url, json=INIT, headers={**HEADERS, "Authorization": f"Bearer {token}"}, timeout=10)
        assert right.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
