"""Questions for the user through MCP elicitation, asked before a tool runs and handed to its step as a callback.

A resolver (`Resolve(...)` on a tool parameter) decides whether to ask; the SDK asks in whichever way the
negotiated protocol wants, and `answered` turns the outcome into the plain async callback a step takes.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Elicit

from pt2_bug_basher.steps.environment import AskEnvironment, EnvironmentChoice, needs_asking

WHICH_ENVIRONMENT = (
    "No conda env or virtualenv is active and none was named. Which environment reproduces the "
    "failure? Give an env name or an interpreter path (leave both empty to use the server's own)."
)


def ask_for_environment(
    ctx: Context, conda_env: str | None = None, python: str | None = None
) -> EnvironmentChoice | Elicit[EnvironmentChoice]:
    """Ask which environment when no env is active, none was named, and the client can be asked."""
    if not needs_asking(conda_env, python) or getattr(ctx.client_capabilities, "elicitation", None) is None:
        return EnvironmentChoice()
    return Elicit(WHICH_ENVIRONMENT, EnvironmentChoice)


def answered(outcome: object) -> AskEnvironment:
    """The step's question, answered by the resolver's outcome: the choice when the user accepted, else None."""
    choice = getattr(outcome, "data", None) if getattr(outcome, "action", None) == "accept" else None

    async def ask() -> EnvironmentChoice | None:
        return choice if isinstance(choice, EnvironmentChoice) else None

    return ask
