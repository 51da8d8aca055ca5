"""mcp_server"""
