"""``python -m jupyter_exec``: the ``jupyter-exec`` command."""

import sys

from jupyter_exec.cli import main

sys.exit(main())
