"""One module per MCP tool: `tools/<tool name>.py` holds the tool's thin MCP layer.

Each module exposes `register(mcp, state)`: the tool's arguments, description and annotations, and one
call into its step function (`pt2_bug_basher.steps`), which the CLI calls too.
"""

from __future__ import annotations

import importlib

from pt2_bug_basher.domain.names import ToolName


def registered_modules() -> list[str]:
    """Names of tool modules present in this installation, in workflow order."""
    found = []
    for name in ToolName:
        try:
            importlib.import_module(f"pt2_bug_basher.mcp_server.tools.{name.value}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pt2_bug_basher.mcp_server.tools.{name.value}":
                continue
            raise
        found.append(name.value)
    return found
