"""Where the MCP server used to live: ``python -m recall.mcp_server`` keeps working for agent
configurations written before the server became the package `recall.mcp`."""

from recall.mcp import McpSettings, http_app, main

__all__ = ["McpSettings", "http_app", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
