"""How the server writes a tool call in text: `tool(name=<JSON value>, ...)`.

Values are JSON literals (strings quoted and escaped, true/false/null), so every call the server
writes parses back unchanged whatever a path or an id contains. `<...>` inside a string marks a
slot for the agent to fill (`script="<repro.py>"`).
"""

from __future__ import annotations

import json


def format_call(tool: str, /, **arguments: object) -> str:
    """`tool(a=..., b=...)`; arguments that are None are left out (the tool's default applies)."""
    name = getattr(tool, "value", tool)
    rendered = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}"
                         for key, value in arguments.items() if value is not None)
    return f"{name}({rendered})"
