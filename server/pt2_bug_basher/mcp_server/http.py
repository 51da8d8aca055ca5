"""Streamable HTTP for the MCP Inspector and remote clients: loopback by default, a bearer token
required on any other address, and Host/Origin checks against DNS rebinding."""

from __future__ import annotations

import hmac
import ipaddress
import json

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from pt2_bug_basher.domain.errors import InvalidInput

TOKEN_ENV = "PT2_BUG_BASHER_AUTH_TOKEN"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def security_settings(host: str, port: int) -> TransportSecuritySettings:
    names = {host, "127.0.0.1", "localhost"} if is_loopback(host) else {host}
    hosts = sorted({f"{name}:{port}" for name in names} | {f"[{name}]:{port}" for name in names if ":" in name})
    origins = sorted({f"http://{h}" for h in hosts} | {f"https://{h}" for h in hosts})
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class BearerTokenMiddleware:
    """Rejects HTTP requests without `Authorization: Bearer <token>` (constant-time compare)."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
        if not hmac.compare_digest(supplied, self.expected):
            body = json.dumps({"error": "missing or wrong bearer token"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def build_http_app(server: MCPServer, host: str, port: int, token: str | None):
    if not is_loopback(host) and not token:
        raise InvalidInput(
            f"refusing to serve on {host}, which is not a loopback address, without a bearer token: "
            f"pass --auth-token or set {TOKEN_ENV}."
        )
    if token is not None and len(token) < 16:
        raise InvalidInput("the bearer token must be at least 16 characters long.")
    app = server.streamable_http_app(transport_security=security_settings(host, port), host=host)
    return BearerTokenMiddleware(app, token) if token else app


def serve_http(server: MCPServer, host: str, port: int, token: str | None) -> None:
    import uvicorn

    app = build_http_app(server, host, port, token)
    uvicorn.run(app, host=host, port=port, log_level="warning")
