"""`dsh mcp serve`: the gated tools served to MCP clients over stdio or HTTP, through the official
SDK, with the wire read and checked by dsh first.

A face: it sits on top of every layer and is imported by nothing but the command line.
"""
