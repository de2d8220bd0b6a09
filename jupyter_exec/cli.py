"""The ``jupyter-exec`` command (also ``jupyter exec`` and ``python -m jupyter_exec``).

Thin: parse arguments, run a session, print what it produced. Each
subcommand lives in its own ``add_*_parser`` function so the parser reads top
to bottom like the help it prints.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from jupyter_exec._version import __version__
from jupyter_exec.codeblocks import CodeBlock, cell_source, cells_from_file
from jupyter_exec.environments import add_environment_arguments, environment_from_args
from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.models import Execution
from jupyter_exec.naming import safe_name
from jupyter_exec.replay import add_replay_parser
from jupyter_exec.session import DEFAULT_TIMEOUT
from jupyter_exec.sync import Session

__all__ = ["main"]

EPILOG = """\
examples:
  jupyter-exec demo                         a short analysis: state, a plot, a notebook
  jupyter-exec run analysis.py              run a script (cells split on '# %%' lines)
  jupyter-exec run steps.md --work-dir out  run a markdown file's code blocks in one session
  jupyter-exec run old.ipynb --timeout 60   re-run a notebook's code cells, recorded anew
  jupyter-exec run job.py --python .venv    use another interpreter or virtual environment
  jupyter-exec run job.py --backend docker  run in a hardened, network-less container
  jupyter-exec replay nb.ipynb              re-run a notebook and check it reproduces
  jupyter-exec run job.py --env venv --package polars   in a venv made on demand
  jupyter-exec mcp                          an MCP server (stdio) for LLM clients
  jupyter-exec image build --pip scikit-learn   build the Docker kernel image
  jupyter-exec kernels install              add "Python 3 (Docker)" to JupyterLab

Every run records a notebook (<work dir>/<name>.ipynb) and saves rich outputs
(plots, HTML, JSON, ...) as files in the work dir. Local kernels run with your
rights: use them for code you trust.
"""


class _Printer:
    """Prints a cell's outputs as they stream, then the files it produced."""

    def __init__(self, out: TextIO, err: TextIO, quiet: bool) -> None:
        self.out, self.err, self.quiet = out, err, quiet

    def on_output(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        kind = event.get("output_type")
        if kind == "stream":
            target = self.err if event.get("name") == "stderr" else self.out
            target.write(event["text"])
            target.flush()
        elif kind in ("execute_result", "display_data"):
            data = event.get("data", {})
            text = data.get("text/plain")
            rich = [m for m in data if m != "text/plain"]
            if text is not None:
                self.out.write(("".join(text) if isinstance(text, list) else text) + "\n")
            if rich:
                self.out.write(f"[{', '.join(rich)}]\n")
            self.out.flush()

    def after(self, execution: Execution) -> None:
        if execution.error is not None:
            self.err.write((execution.error.traceback or str(execution.error)).rstrip() + "\n")
            if execution.status != "error":
                self.err.write(f"{execution.error}\n")
        for path in execution.files:
            self.out.write(f"  -> {_shown(path)}\n")
        self.out.flush()


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def _session_args(args: argparse.Namespace) -> dict[str, Any]:
    spec = args.env
    if spec is None and args.backend == "docker":
        spec = "docker"
    elif spec is None and args.python:
        spec = f"python:{args.python}"
    args.env = spec
    env_flags = (args.packages, args.requirements, args.python_version, args.dockerfile)
    # Nothing said: the stock kernelspec, with no interpreter probe on the way.
    environment = environment_from_args(args) if spec or any(env_flags) else None
    notebook: Any = None
    if args.no_notebook:
        notebook = False
    elif args.notebook:
        notebook = args.notebook
    return {
        "work_dir": args.work_dir,
        "environment": environment,
        "notebook": notebook,
        "name": args.name,
        "timeout": args.timeout or None,
        "overwrite": True,
    }


def _run_cells(
    blocks: Sequence[CodeBlock], session: Session, printer: _Printer, keep_going: bool
) -> int:
    failures = 0
    for number, block in enumerate(blocks, start=1):
        if not printer.quiet and len(blocks) > 1:
            printer.out.write(f"--- [{number}/{len(blocks)}] ---\n")
        execution = session.execute(cell_source(block), on_output=printer.on_output)
        printer.after(execution)
        if not execution.ok:
            failures += 1
            if not keep_going:
                break
    return failures


def cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"jupyter-exec: no such file: {path}", file=sys.stderr)
        return 2
    blocks = cells_from_file(path)
    if not blocks:
        print(f"jupyter-exec: {path} holds no code to run", file=sys.stderr)
        return 2
    kwargs = _session_args(args)
    if kwargs["name"] is None:
        kwargs["name"] = safe_name(path.stem)
    printer = _Printer(sys.stdout, sys.stderr, args.quiet)
    with Session(**kwargs) as session:
        failures = _run_cells(blocks, session, printer, args.keep_going)
        _summary(session, failures, len(blocks))
    return 1 if failures else 0


def _summary(session: Session, failures: int, total: int) -> None:
    state = f"{failures} of {total} failed" if failures else f"{total} ran"
    print(f"\n{state}; work dir: {session.work_dir}", file=sys.stderr)
    if session.notebook_path:
        print(f"notebook: {session.notebook_path}", file=sys.stderr)


DEMO_CELLS = [
    "import numpy as np\n"
    "rng = np.random.default_rng(7)\n"
    "x = rng.normal(size=200)\n"
    "y = 2.5 * x + rng.normal(scale=0.6, size=200)\n"
    "print(f'{len(x)} points generated')",
    "slope, intercept = np.polyfit(x, y, 1)   # x and y are still here: state is kept\n"
    "print(f'fit: y = {slope:.2f} x {intercept:+.2f}')",
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(5, 4))\n"
    "ax.scatter(x, y, s=8, alpha=0.6)\n"
    "xs = np.sort(x)\n"
    "ax.plot(xs, slope * xs + intercept, color='crimson')\n"
    "ax.set_title(f'least squares: slope {slope:.2f}')\n"
    "plt.show()",
    "fig.savefig('fit.png', dpi=120)   # a file the code writes itself\n'saved fit.png'",
    "import pandas as pd\npd.DataFrame({'x': x, 'y': y}).describe().round(3)",
]


def cmd_demo(args: argparse.Namespace) -> int:
    missing = [m for m in ("numpy", "matplotlib", "pandas") if importlib.util.find_spec(m) is None]
    if missing and args.python is None and args.env is None and args.backend == "local":
        print(
            f"jupyter-exec demo needs {', '.join(missing)} in the kernel's Python.\n"
            f"Fix: {sys.executable} -m pip install 'jupyter-exec[plot]'",
            file=sys.stderr,
        )
        return 2
    kwargs = _session_args(args)
    kwargs["work_dir"] = args.work_dir or "jupyter-exec-demo"
    kwargs["name"] = args.name or "demo"
    printer = _Printer(sys.stdout, sys.stderr, args.quiet)
    with Session(**kwargs) as session:
        print(f"kernel {session.kernel_id} started; work dir {session.work_dir}\n")
        failures = _run_cells([CodeBlock(c) for c in DEMO_CELLS], session, printer, False)
        _summary(session, failures, len(DEMO_CELLS))
    return 1 if failures else 0


def _add_session_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("session")
    group.add_argument(
        "--work-dir",
        metavar="DIR",
        help="kernel cwd and output folder (default: a new temporary dir)",
    )
    group.add_argument(
        "--notebook",
        metavar="PATH",
        help="record to this .ipynb (default: <work dir>/<name>.ipynb)",
    )
    group.add_argument("--no-notebook", action="store_true", help="do not record a notebook")
    group.add_argument(
        "--name", help="session name: names the notebook and the <name>_files folder"
    )
    group.add_argument(
        "--python",
        metavar="PY",
        help="interpreter or venv to run the kernel with (needs ipykernel); "
        "short for --env python:PY",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds per cell before it is interrupted (0: none; default {DEFAULT_TIMEOUT:g})",
    )
    group.add_argument(
        "--backend",
        choices=["local", "docker"],
        default="local",
        help="local: a kernel process with your rights (trusted code); docker: a hardened, "
        "network-less container (default: local); short for --env docker",
    )
    group.add_argument(
        "-q", "--quiet", action="store_true", help="print only errors and the summary"
    )
    add_environment_arguments(parser)


def add_run_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a .py, .md or .ipynb file in one session",
        description="Run a file's code in one stateful session, printing outputs as they stream "
        "and the files each cell produced. A .py file is split into cells on '# %%' lines; "
        "a .md file runs its fenced code blocks in order (shell blocks as %%bash cells); "
        "a .ipynb file runs its code cells. Exit status 1 if a cell failed.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", help="the .py, .md or .ipynb file to run")
    _add_session_options(parser)
    parser.add_argument(
        "-k", "--keep-going", action="store_true", help="run the remaining cells after a failure"
    )
    parser.set_defaults(func=cmd_run)


def add_demo_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a short demo analysis (state across cells, a plot, a notebook)",
        description="Fit a line to random data across several cells, plot it, save the plot, "
        "and record everything as a notebook in ./jupyter-exec-demo (or --work-dir).",
    )
    _add_session_options(parser)
    parser.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter-exec",
        description=(
            "Stateful code execution on Jupyter kernels; every session recorded as a notebook."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-vv for debug)"
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_run_parser(subparsers)
    add_demo_parser(subparsers)
    add_replay_parser(subparsers)
    for register in _plugin_parsers():
        register(subparsers)
    return parser


def _plugin_parsers() -> list[Any]:
    """Subcommands that live beside the part of the package they drive."""
    from jupyter_exec.docker.cli import add_image_parser, add_kernels_parser, add_reap_parser
    from jupyter_exec.mcp_server import add_mcp_parser

    return [add_image_parser, add_kernels_parser, add_reap_parser, add_mcp_parser]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(message)s")
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except JupyterExecError as exc:
        print(f"jupyter-exec: error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("\njupyter-exec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
