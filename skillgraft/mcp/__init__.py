"""The MCP door: the memory offered to MCP hosts over stdio (:mod:`.server`)."""
