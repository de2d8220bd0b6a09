"""``python -m jupyter_exec.docker``: ``image build``, ``kernels install``, ``reap``."""

from jupyter_exec.docker.cli import main

raise SystemExit(main())
