"""``python -m recall.mcp``: the MCP server (see `recall.mcp`)."""

from recall.mcp.server import main

raise SystemExit(main())
