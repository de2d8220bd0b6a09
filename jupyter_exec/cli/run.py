"""``jupyter-exec run`` and ``jupyter-exec demo``: a file's code (or the demo's) in one session.

Outputs are printed as they stream, then the files each cell produced; the
session records its notebook as it goes, so a run stopped by Ctrl-C, SIGTERM
or SIGHUP leaves a valid notebook holding every cell that ran.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from jupyter_exec.agents.codeblocks import CodeBlock, cell_source, cells_from_file
from jupyter_exec.boundary.naming import safe_name
from jupyter_exec.boundary.trust import TRUST_CLI_FLAG
from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_STATUS_HELP, EXIT_TIMEOUT, EXIT_USAGE
from jupyter_exec.cli.options import (
    add_environment,
    add_network_policy,
    add_quiet,
    add_session_options,
    backend_of,
    command_line_options,
    network_policy_from_args,
    said_environment,
    session_kwargs,
    with_environment,
)
from jupyter_exec.cli.restore import add_restore, find_checkpoint, restore_into
from jupyter_exec.cli.resume import add_resume, check_resumable, resume_session, resumed_line
from jupyter_exec.exceptions import InvalidArgument

if TYPE_CHECKING:  # the session and its kernel machinery load when a run starts
    from jupyter_exec.models import Execution
    from jupyter_exec.sync import Session

__all__ = ["DEMO_CELLS", "DEMO_COMMAND", "RUN_COMMAND"]

RUN_EPILOG = f"""\
examples:
  jupyter-exec run analysis.py              run a script (cells split on '# %%' lines)
  jupyter-exec run steps.md --work-dir out  a markdown file's code blocks in one session
  jupyter-exec run old.ipynb --timeout 60   re-run a notebook's code cells, recorded anew
  jupyter-exec run job.py --python .venv    another interpreter or virtual environment
  jupyter-exec run job.py --backend docker  a hardened, network-less container
  jupyter-exec run job.py --env venv --package polars   a venv made on demand
  jupyter-exec run job.py --backend docker --allow pypi.org --allow files.pythonhosted.org
                                            a container that reaches the package index only
  jupyter-exec run job.py --backend docker --network-policy policy.json
                                            the hosts (and API keys) a JSON file allows
  jupyter-exec run job.py -k                run every cell, even after one failed
  jupyter-exec run next.py --work-dir out --restore loaded
                                            start from the checkpoint 'loaded' in out/
  jupyter-exec run next.py --restore copied/.job_checkpoints/loaded --force-restore
                                            a checkpoint folder from another environment
  jupyter-exec run next.py --resume out/job.ipynb
                                            carry on the session that recorded job.ipynb:
                                            its state rebuilt, next.py's cells appended
  jupyter-exec run --resume out/job.ipynb   only rebuild that state (does it still?)

A .py file honours its coding declaration (PEP 263); other files are UTF-8.

{EXIT_STATUS_HELP}"""

DEMO_EPILOG = """\
examples:
  jupyter-exec demo                         in ./jupyter-exec-demo
  jupyter-exec demo --backend docker        the same in a container
  jupyter-exec demo --backend docker --allow pypi.org --allow files.pythonhosted.org
                                            a container that may pip install, nothing else
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


SESSION_OPTIONS = command_line_options(without=("overwrite",))
"""The session options ``run`` and ``demo`` take as flags: every one a command line can say
(see ``SessionOptions``); ``overwrite`` is always on (a run records its notebook anew)."""


def _session_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The session's options: flags as given, or ``--env`` and its package flags resolved."""
    kwargs = session_kwargs(args, SESSION_OPTIONS)
    with_environment(args, kwargs)
    policy = network_policy_from_args(args, backend_of(kwargs))
    if policy is not None:
        kwargs["network"] = policy
    kwargs["overwrite"] = True
    return kwargs


INTERRUPT_WAIT = 15.0
"""Seconds a stopped command waits for the interrupted cell to end and be recorded."""


def _started(kwargs: dict[str, Any], session: Session | None = None) -> Session:
    """A started session; stopped while its kernel starts, the start is undone (no kernel left).

    ``session``: an unstarted one to start (a resumed session), else one made from ``kwargs``.
    """
    from jupyter_exec.engine.loop_thread import LOOP_THREAD, wait_for_future
    from jupyter_exec.sync import Session

    if session is None:
        session = Session(**kwargs, start=False)
    settled = threading.Event()

    async def start() -> None:
        try:
            await session.async_session.start()
        finally:
            settled.set()

    future = LOOP_THREAD.submit(start())
    try:
        wait_for_future(future)
    except KeyboardInterrupt:
        future.cancel()  # the start undoes itself: kernel shut down, folders it made removed
        settled.wait(INTERRUPT_WAIT)
        raise
    return session


def _execute(session: Session, source: str, printer: _Printer) -> Execution:
    """Run one cell; when the command is stopped, the cell is interrupted *and recorded*.

    Ctrl-C, SIGTERM and SIGHUP arrive as ``KeyboardInterrupt``: the kernel is
    interrupted, and the cell, which then ends with its own KeyboardInterrupt,
    is given :data:`INTERRUPT_WAIT` seconds to reach the notebook before the
    session is closed, so the notebook holds every cell that ran.
    """
    from jupyter_exec.engine.loop_thread import LOOP_THREAD, wait_for_future

    live = session.async_session
    future = LOOP_THREAD.submit(live.execute(source, on_output=printer.on_output))
    try:
        return wait_for_future(future)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            LOOP_THREAD.submit(live.interrupt()).result(INTERRUPT_WAIT)
            future.result(INTERRUPT_WAIT)
        raise


def _run_cells(
    blocks: Sequence[CodeBlock], session: Session, printer: _Printer, keep_going: bool
) -> int:
    """Run ``blocks``; the exit status: 0, 1 after an error, 124 when the last failure timed out."""
    status = EXIT_OK
    for number, block in enumerate(blocks, start=1):
        if not printer.quiet and len(blocks) > 1:
            printer.out.write(f"--- [{number}/{len(blocks)}] ---\n")
        execution = _execute(session, cell_source(block), printer)
        printer.after(execution)
        if not execution.ok:
            status = EXIT_TIMEOUT if execution.status == "timeout" else EXIT_FAILED
            if not keep_going:
                break
    return status


def _summary(session: Session, status: int, total: int) -> None:
    state = f"{total} cell(s) ran" if status == EXIT_OK else f"stopped with status {status}"
    print(f"\n{state}; work dir: {session.work_dir}", file=sys.stderr)
    if session.notebook_path:
        print(f"notebook: {session.notebook_path}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    if args.file is None and args.resume is None:
        raise InvalidArgument("give a FILE to run, or --resume NOTEBOOK (or both)")
    resuming = None if args.resume is None else check_resumable(args.resume)  # before a kernel
    path = Path(args.file) if args.file is not None else None
    blocks = cells_from_file(path) if path is not None else []  # our errors for a bad file
    if path is not None and not blocks:
        print(f"jupyter-exec: {path} holds no code to run", file=sys.stderr)
        return EXIT_USAGE
    kwargs = _session_kwargs(args)
    if kwargs.get("name") is None and resuming is None and path is not None:
        kwargs["name"] = safe_name(path.stem)
    if args.force_restore and args.restore is None:
        raise InvalidArgument("--force-restore goes with --restore CHECKPOINT")
    if args.trust_checkpoint_origin and args.restore is None:
        raise InvalidArgument(f"{TRUST_CLI_FLAG} goes with --restore CHECKPOINT")
    if resuming is not None and args.restore is not None:
        raise InvalidArgument(
            "--resume and --restore each say where the state comes from: give one of them"
        )
    start_from = None
    if args.restore is not None:  # found before a kernel starts; checked whole after
        work_dir = Path(kwargs["work_dir"]).expanduser() if kwargs.get("work_dir") else None
        start_from = find_checkpoint(args.restore, work_dir, kwargs["name"])
    printer = _Printer(sys.stdout, sys.stderr, args.quiet)
    unstarted = None if resuming is None else resume_session(resuming, kwargs)
    with _started(kwargs, unstarted) as session:
        if resuming is not None:
            resumed_line(session, args.quiet)
        if start_from is not None:  # a refused checkpoint ends the run before any cell
            restore_into(
                session,
                start_from,
                force=args.force_restore,
                quiet=args.quiet,
                trust_origin=args.trust_checkpoint_origin,
            )
        status = _run_cells(blocks, session, printer, args.keep_going)
        if not blocks and any(not e.ok for e in session.resumed):
            status = EXIT_FAILED  # only resuming: the state did not all come back
        _summary(session, status, len(blocks))
    return status


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
    if missing and not said_environment(args):
        print(
            f"jupyter-exec demo needs {', '.join(missing)} in the kernel's Python.\n"
            f"Fix: {sys.executable} -m pip install 'jupyter-exec[plot]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    kwargs = _session_kwargs(args)
    kwargs["work_dir"] = args.work_dir or "jupyter-exec-demo"
    kwargs["name"] = args.name or "demo"
    printer = _Printer(sys.stdout, sys.stderr, args.quiet)
    with _started(kwargs) as session:
        print(f"kernel {session.kernel_id} started; work dir {session.work_dir}\n")
        blocks = [CodeBlock(c) for c in DEMO_CELLS]
        status = _run_cells(blocks, session, printer, False)
        _summary(session, status, len(DEMO_CELLS))
    return status


def _session_groups(parser: argparse.ArgumentParser, work_dir_help: str) -> None:
    add_session_options(parser, SESSION_OPTIONS, helps={"work_dir": work_dir_help})
    add_quiet(parser)
    add_environment(parser)
    add_network_policy(parser)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec run``."""
    parser.add_argument(
        "file",
        nargs="?",
        help="the .py, .md, .sh or .ipynb file to run (optional with --resume)",
    )
    parser.add_argument(
        "-k", "--keep-going", action="store_true", help="run the remaining cells after a failure"
    )
    _session_groups(parser, "kernel cwd and output folder (default: a new temporary dir)")
    add_restore(parser)
    add_resume(parser)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec demo``."""
    _session_groups(parser, "kernel cwd and output folder (default: ./jupyter-exec-demo)")


RUN_COMMAND = Command(
    "run",
    help="run a .py, .md or .ipynb file in one session",
    description="Run a file's code in one stateful session, printing outputs as they stream "
    "and the files each cell produced. A .py file is split into cells on '# %%' lines; "
    "a .md file runs its fenced code blocks in order (shell blocks as %%bash cells); "
    "a .ipynb file runs its code cells. Everything is recorded in a notebook. With "
    "--resume, a recorded session carries on: its state rebuilt, its notebook extended.",
    epilog=RUN_EPILOG,
    arguments=_run_arguments,
    run=cmd_run,
)


DEMO_COMMAND = Command(
    "demo",
    help="run a short demo analysis (state across cells, a plot, a notebook)",
    description="Fit a line to random data across several cells, plot it, save the plot, "
    "and record everything as a notebook in ./jupyter-exec-demo (or --work-dir).",
    epilog=DEMO_EPILOG,
    arguments=_demo_arguments,
    run=cmd_demo,
)
