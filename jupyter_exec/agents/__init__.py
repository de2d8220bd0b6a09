"""What agents share: code blocks in, the text a model is shown out.

:mod:`.codeblocks` takes code from messages and Markdown, :mod:`.agent` runs
blocks in a session with the rules of what may reach the kernel, :mod:`.llm`
renders an ``Execution`` as the text a model reads, and :mod:`.scripts` is
stateless script mode. The framework adapters in
:mod:`jupyter_exec.integrations` and the MCP server are thin layers over this.
Imports the engine; never a server or the CLI.
"""
