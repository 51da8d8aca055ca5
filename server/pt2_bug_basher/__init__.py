"""pt2-bug-basher: an MCP server that walks an agent through debugging PyTorch 2 compiler failures."""

__version__ = "0.1.0"
