"""``python -m jupyter_exec.mcp``: ``jupyter-exec mcp`` on its own (what MCP client configs run).

The command line is the CLI's, so this module imports it; nothing in the package imports this
module, so the MCP server never imports the CLI back.
"""

import sys

from jupyter_exec.cli import main

sys.exit(main(["mcp", *sys.argv[1:]]))
