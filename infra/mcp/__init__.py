"""The MCP server: Grimoire's tools for agents that speak the Model Context Protocol.

A client of the HTTP API (`api.py`), never of Redis or Kafka: the API checks the key,
so the MCP process holds no more authority than the key it was started with.
"""

from grimoire.infra.mcp.api import GrimoireApi, HttpApiError, RecallCall
from grimoire.infra.mcp.server import (
    DESTRUCTIVE_TOOLS,
    READ_WRITE_TOOLS,
    McpOptions,
    build_server,
    run_server,
)

__all__ = [
    "DESTRUCTIVE_TOOLS",
    "READ_WRITE_TOOLS",
    "GrimoireApi",
    "HttpApiError",
    "McpOptions",
    "RecallCall",
    "build_server",
    "run_server",
]
