import sys

from jupyter_exec.cli import main

sys.exit(main())
