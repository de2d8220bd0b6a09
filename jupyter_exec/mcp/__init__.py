"""The MCP server: named, stateful sessions as tools for any MCP client.

:mod:`.server` runs the transports (stdio, streamable HTTP behind its token
gate), :mod:`.sessions` keeps the named sessions, :mod:`.tools` and
:mod:`.state` are what a model may call, :mod:`.ask` puts undecided network
hosts to the person through elicitation. ``python -m jupyter_exec.mcp`` is
``jupyter-exec mcp``. Imports the agents layer and the engine; never the CLI
(only its ``__main__`` does).
"""
