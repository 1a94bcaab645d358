"""What an MCP server is for: its working repository, the API, the local fallbacks.

Every ``MEMFLOW_*`` name the MCP server reads is read here, by `McpSettings.from_env` through the
typed readers of `resources.settings`, when a server is started (never at import)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from recall.client import ClientSettings, LocalStores
from resources.settings import agent_env, local_env
from schemas.scope import Scope


@dataclass(frozen=True)
class McpSettings:
    """`scope`: the working repository (stdio; over HTTP the key's org decides). `api`: the
    running API, tried first. `stores`, `landing_dir`: where the local fallback reads and
    writes. `session_id`: the stdio server's session (over HTTP each MCP session has its own)."""

    scope: Scope | None = None
    api: ClientSettings = field(default_factory=ClientSettings)
    stores: LocalStores | None = None
    landing_dir: Path | None = None
    client: str = "mcp"
    session_id: str = field(default_factory=lambda: f"mcp-{uuid.uuid4().hex}")
    keys_file: Path | None = None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        tenant: str | None = None,
        cwd: str | None = None,
        client: str | None = None,
    ) -> McpSettings:
        """Settings from the environment, read now. The scope: `tenant`, ``MEMFLOW_TENANT``,
        else the tenant mapping of `cwd` (default: the current directory)."""
        env = os.environ if env is None else env
        agent, local = agent_env(env), local_env(env)
        spelled = tenant or agent.tenant
        if spelled:
            scope = Scope.parse(spelled)
        else:
            from memflow.importers.tenant import TenantMapper

            scope = TenantMapper.from_env(env).choose(cwd or os.getcwd()).scope
        landing, keys = local.landing_dir, local.api_keys_file
        return cls(
            scope=scope,
            api=ClientSettings.from_env(env),
            stores=LocalStores.from_env(env),
            landing_dir=Path(landing) if landing else None,
            client=client or agent.mcp_client,
            keys_file=Path(keys) if keys else None,
        )

    def keys_path(self) -> Path | None:
        """The API's keys file: ``MEMFLOW_API_KEYS_FILE``, else ``<data>/api-keys.json``."""
        if self.keys_file is not None:
            return self.keys_file
        if self.stores is not None:
            from resources.settings import KEYS_FILE

            return Path(self.stores.data_dir) / KEYS_FILE
        return None
