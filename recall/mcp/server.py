"""The MCP server's transports: stdio (one agent session) and streamable HTTP (many agents, bearer
keys through the SDK's token verification), and the ``memflow mcp`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import MCPServer

from recall.auth import KeyRing
from recall.client import MemflowClient
from recall.mcp.auth import KeyRingVerifier, auth_settings
from recall.mcp.backends import ApiMemory, LocalMemory
from recall.mcp.settings import McpSettings
from recall.mcp.tools import MemoryTools, build_server
from recall.ports import IngestTrigger, TenantEraser
from schemas.redaction.logs import install_log_redaction
from schemas.scope import ScopeError

DEFAULT_HTTP_PORT = 8765


def stdio_tools(settings: McpSettings, *, trigger: IngestTrigger | None = None) -> MemoryTools:
    """The API first (when a key is set), the local stores and landing zone as the fallback
    (`trigger` is asked after each local write). No local eraser: an erase over stdio goes to
    the API, which checks for an admin key, or is refused."""
    remote = ApiMemory(MemflowClient(settings.api)) if settings.api.key else None
    local = LocalMemory(stores=settings.stores, landing_dir=settings.landing_dir, trigger=trigger)
    return MemoryTools(settings, remote=remote, local=local)


def run_stdio(settings: McpSettings | None = None, *, trigger: IngestTrigger | None = None) -> None:
    """Serve one agent over stdin/stdout until it closes them."""
    settings = settings or McpSettings.from_env()
    tools = stdio_tools(settings, trigger=trigger)
    try:
        build_server(tools).run("stdio")
    finally:
        tools.close()


@dataclass
class McpHttp:
    """The streamable-HTTP app (`asgi`, serving ``/mcp``) and what to close after it."""

    asgi: Any
    server: MCPServer
    tools: MemoryTools

    @asynccontextmanager
    async def lifespan(self) -> Any:
        """Run this around the app when it is mounted into another app (e.g. ``memflow serve``:
        a mounted app's own lifespan is not run)."""
        async with self.server.session_manager.run():
            yield


def http_app(
    settings: McpSettings,
    *,
    keys: KeyRing,
    service: Any | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    path: str = "/mcp",
    trigger: IngestTrigger | None = None,
    eraser: TenantEraser | None = None,
) -> McpHttp:
    """MCP over streamable HTTP, one MCP session per client (``Mcp-Session-Id``; each is its
    own memflow session). Every request needs a key of `keys` (the SDK's bearer middleware over
    `KeyRingVerifier`). With `service` (an in-process `RecallService`, e.g. the one
    ``memflow serve`` built) the tools answer with it, writes land in `settings.landing_dir`;
    without, they call the API at `settings.api.url` with each caller's own key (the API's
    modes: hybrid with a model up) and fall back to names-only recall from `settings.stores`
    and the local landing zone when it is unreachable."""
    local = LocalMemory(
        service,
        stores=settings.stores,
        landing_dir=settings.landing_dir,
        trigger=trigger,
        eraser=eraser,
    )
    per_caller = None if service is not None else MemflowClient(settings.api)
    tools = MemoryTools(settings, per_caller=per_caller, local=local, http=True)
    server = build_server(
        tools,
        token_verifier=KeyRingVerifier(keys),
        auth=auth_settings(f"http://{host}:{port}"),
    )
    app = server.streamable_http_app(
        streamable_http_path=path, stateless_http=False, json_response=True, host=host
    )
    return McpHttp(app, server, tools)


def run_http(
    settings: McpSettings,
    *,
    keys: KeyRing,
    service: Any | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    trigger: IngestTrigger | None = None,
    eraser: TenantEraser | None = None,
) -> None:
    import uvicorn

    served = http_app(
        settings, keys=keys, service=service, host=host, port=port, trigger=trigger, eraser=eraser
    )
    try:
        uvicorn.run(served.asgi, host=host, port=port, log_level="warning", access_log=False)
    finally:
        served.tools.close()


def main(argv: Sequence[str] | None = None, *, ingest_trigger: IngestTrigger | None = None) -> int:
    """``memflow mcp [--tenant ORG/REPO] [--client NAME] [--http ...]``. The pipelines layer
    passes `ingest_trigger`, asked after each write the server lands itself (writes through the
    API are the API's to trigger). Erasing goes through the API only (its admin keys)."""
    parser = argparse.ArgumentParser(prog="memflow mcp", description="the memflow MCP server")
    parser.add_argument("--tenant", help="the working repository ORG/REPO (default: from the cwd)")
    parser.add_argument("--client", help="the agent's name recorded on writes (default: mcp)")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT)
    parser.add_argument("--keys-file", help="the API's keys file (default: MEMFLOW_API_KEYS_FILE)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    install_log_redaction()
    try:
        settings = McpSettings.from_env(tenant=args.tenant, client=args.client)
    except (ScopeError, ValueError) as exc:
        print(f"memflow mcp: {exc}", file=sys.stderr)
        return 2
    if not args.http:
        run_stdio(settings, trigger=ingest_trigger)
        return 0
    keys_path = args.keys_file or settings.keys_path()
    if not keys_path:
        print(
            "memflow mcp: --http needs a keys file (--keys-file or MEMFLOW_API_KEYS_FILE)",
            file=sys.stderr,
        )
        return 2
    keys = KeyRing(keys_path)
    if keys.error:
        print(f"memflow mcp: {keys.error}", file=sys.stderr)
        return 2
    run_http(settings, keys=keys, host=args.host, port=args.port, trigger=ingest_trigger)
    return 0
