"""``python -m jupyter_exec.docker``: ``image build``, ``kernels install``, ``reap``."""

from jupyter_exec.cli import docker_main

raise SystemExit(docker_main())
