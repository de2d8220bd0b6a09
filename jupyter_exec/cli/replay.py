"""``jupyter-exec replay``: re-run a notebook and report, cell by cell, whether it reproduced.

The work itself is :func:`jupyter_exec.notebook.replay.replay`; this module turns the
command line into its arguments and its report into text and an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_STATUS_HELP
from jupyter_exec.cli.options import (
    add_environment,
    add_quiet,
    add_session_options,
    non_negative_int,
    session_kwargs,
    with_environment,
)
from jupyter_exec.exceptions import InvalidArgument

if TYPE_CHECKING:  # the replay itself (and its kernel) is loaded when the command runs
    from jupyter_exec.notebook.replay import ReplayReport

__all__ = ["REPLAY_COMMAND"]

SESSION_OPTIONS = (
    "work_dir",
    "timeout",
    "python",
    "backend",
    "kernel_name",
    "startup_timeout",
    "interrupt_grace",
    "save_state",
)
"""The session options ``replay`` takes as flags (see ``SessionOptions``)."""


EPILOG = f"""\
examples:
  jupyter-exec replay analysis.ipynb                  re-run, report per cell, exit 0 if same
  jupyter-exec replay analysis.ipynb --report r.md    also write a Markdown report (.json, .html)
  jupyter-exec replay analysis.ipynb --html           also write <stem>.replay.html beside it
  jupyter-exec replay sim.ipynb --runs 2              replay twice: find nondeterministic cells
  jupyter-exec replay fit.ipynb --rtol 1e-9           numbers in text equal within 1e-9 (relative)
  jupyter-exec replay nb.ipynb --in-recorded-env      in a venv / image made from the record
  jupyter-exec replay nb.ipynb --in-recorded-env --backend docker   the recorded pins in Docker
  jupyter-exec replay run.ipynb --until 5             replay the first 5 code cells only
  jupyter-exec replay plots.ipynb --image-tolerance 0.01 --pixel-threshold 8
  jupyter-exec replay sim.ipynb --normalize 'seed=\\d+' --normalize 'id: \\w+=>id: <id>'
  jupyter-exec replay out.ipynb --work-dir /tmp/scratch --output /tmp/scratch/again.ipynb
  jupyter-exec replay nb.ipynb --env venv --package pandas==2.2   in another environment
  jupyter-exec replay nb.ipynb --save-state           also keep per-cell state (off by default)

The replay is recorded to <stem>.replayed.ipynb beside the notebook (or in
--work-dir, or --output; the original is never written). Its cells run in a
fresh copy of the notebook folder's files (links, special files and hidden
folders are not copied): <stem>.replayed_work/ beside the replayed notebook,
made anew by each replay, or --work-dir (never the notebook's own folder), so
the recording's folder is never written by the cells. Before comparing,
volatile text is normalised: memory addresses, uuids, temp names, dates and
times, durations, tqdm rates, timeit loop counts, ipykernel file names
(--list-rules shows them; --no-default-rules turns them off).

A notebook in another language (its kernelspec or language_info) is refused
with --python or --env (exit 2): it runs on its own kernel, or the one --kernel names.

Where the cells run is yours to say: --backend (default local). A notebook
whose record names Docker (its backend, image, kernelspec or interpreter) is
refused on the host unless --backend local is given: the record is the
notebook's own claim. The first line says where it runs and why.

{EXIT_STATUS_HELP}"""


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec replay``."""
    parser.add_argument("notebook", nargs="?", help="the .ipynb to replay")
    parser.add_argument("--output", metavar="PATH", help="record the replay to this .ipynb")
    parser.add_argument(
        "--until", type=non_negative_int, metavar="N", help="replay the first N code cells only"
    )
    parser.add_argument(
        "--report", metavar="FILE", help="write the report to FILE (.json, .md or .html)"
    )
    parser.add_argument(
        "--html",
        action="store_true",
        help="also write the HTML report to <stem>.replay.html beside the replayed notebook",
    )
    parser.add_argument(
        "--runs",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: replay twice and mark cells whose replays differ as nondeterministic",
    )
    parser.add_argument(
        "--in-recorded-env",
        action="store_true",
        help="replay in an environment made from the record: with --backend docker the "
        "recorded image (else the kernel image) with the recorded package versions, with "
        "--backend local a cached venv of the recorded Python and versions; without "
        "--backend whichever the record names (a Docker record never runs on the host "
        "unless --backend local is given)",
    )
    compare = parser.add_argument_group("comparison")
    compare.add_argument(
        "--image-tolerance",
        type=float,
        default=0.0,
        metavar="F",
        help="images are the same if at most this fraction (0-1) of pixels differ",
    )
    compare.add_argument(
        "--pixel-threshold",
        type=int,
        default=0,
        metavar="N",
        help="a pixel differs only if a channel differs by more than N (0-255)",
    )
    compare.add_argument(
        "--rtol",
        type=float,
        default=0.0,
        metavar="R",
        help="numbers in text outputs equal within this relative tolerance are equivalent",
    )
    compare.add_argument(
        "--normalize",
        action="append",
        default=[],
        metavar="RULE",
        help="extra rule: REGEX (matches become <normalized>) or REGEX=>REPLACEMENT; repeatable",
    )
    compare.add_argument(
        "--no-default-rules", action="store_true", help="do not apply the built-in rules"
    )
    compare.add_argument("--list-rules", action="store_true", help="print the built-in rules")
    add_session_options(
        parser,
        SESSION_OPTIONS,
        defaults={"kernel_name": None},
        helps={
            "work_dir": "the kernel's working directory, never the notebook's folder; the "
            "notebook folder's files are copied into it first (default: a fresh "
            "<stem>.replayed_work/ beside the replayed notebook)",
            "kernel_name": "the kernelspec to run (default: the notebook's own)",
            "save_state": "save the kernel's namespace after every cell into the replay's work "
            "dir (.<name>_state/), for a resume of the replayed notebook (default: off for a "
            "replay)",
        },
        aliases={"kernel_name": ["--kernel"]},
    )
    add_quiet(parser)
    add_environment(parser)


def _print_rules(out: TextIO) -> None:
    from jupyter_exec.notebook.compare import DEFAULT_RULES

    for rule in DEFAULT_RULES:
        out.write(f"{rule.name:15} {rule.pattern.pattern}\n{'':15} e.g. {rule.example}\n")


def _write_report(report: ReplayReport, path: Path) -> None:
    from jupyter_exec.boundary import paths as safefs
    from jupyter_exec.notebook.htmlreport import render_html

    if path.suffix == ".json":
        text = json.dumps(report.to_dict(), indent=1) + "\n"
    elif path.suffix == ".html":
        text = render_html(report)
    else:
        text = report.to_markdown()
    safefs.write_bytes(path.parent, path.name, text.encode("utf-8"))


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``jupyter-exec replay``: 0 reproduced, 1 differs; bad input raises (exit 2)."""
    from jupyter_exec.notebook.compare import ImageTolerance, parse_rule
    from jupyter_exec.notebook.replay import replay
    from jupyter_exec.notebook.where import Where

    if args.list_rules:
        _print_rules(sys.stdout)
        return EXIT_OK
    if not args.notebook:
        raise InvalidArgument("a notebook is required: jupyter-exec replay NOTEBOOK.ipynb")
    report_path = Path(args.report) if args.report else None
    if report_path is not None and report_path.suffix not in (".json", ".md", ".html"):
        raise InvalidArgument(f"--report must end in .json, .md or .html, not {report_path.name!r}")
    if args.rtol < 0:
        raise InvalidArgument(f"--rtol must be >= 0, not {args.rtol}")
    try:
        rules = [parse_rule(r) for r in args.normalize]
        tolerance = ImageTolerance(args.image_tolerance, args.pixel_threshold)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    kwargs: dict[str, Any] = session_kwargs(args, SESSION_OPTIONS)
    with_environment(args, kwargs)
    chosen = [k for k in ("environment", "python") if kwargs.get(k) is not None]
    if args.in_recorded_env and chosen:
        raise InvalidArgument(
            "--in-recorded-env makes the environment from the notebook's record; "
            "drop --env/--python (or --in-recorded-env); --backend says where it is made"
        )
    report = replay(
        args.notebook,
        output=args.output,
        until=args.until,
        rules=rules,
        default_rules=not args.no_default_rules,
        image_tolerance=tolerance,
        rtol=args.rtol,
        runs=args.runs,
        in_recorded_env=args.in_recorded_env,
        progress=None if args.quiet else sys.stderr,
        **kwargs,
    )
    if args.quiet:  # otherwise shown first, before the cells ran
        where = report.extra.get("where")
        if where is not None:
            print(Where(**where).describe(), file=sys.stderr)
        for difference in report.environment:
            print(f"environment: {difference}", file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for cell in report.problems:
        print(f"\n--- cell {cell.number}: {cell.status.replace('_', ' ')} ---")
        for line in (
            *(f"equivalent: {r}" for r in cell.reasons),
            cell.error_before and f"error in the record: {cell.error_before}",
            cell.error_now and f"error now: {cell.error_now}",
            *cell.notes,
            *(f"mask {m.describe()}" for m in cell.masked),
        ):
            if line:
                print(line)
        if cell.diff:
            print(cell.diff)
    if report_path is not None:
        _write_report(report, report_path)
    if args.html:
        beside = report.output.parent if report.output is not None else Path.cwd()
        html_path = beside / f"{report.notebook.stem}.replay.html"
        _write_report(report, html_path)
        print(f"HTML report: {html_path}", file=sys.stderr)
    print(f"\n{report.summary()}\nreplayed notebook: {report.output}", file=sys.stderr)
    return EXIT_OK if report.reproduced else EXIT_FAILED


REPLAY_COMMAND = Command(
    "replay",
    help="re-run a notebook and report, cell by cell, whether it reproduced",
    description="Re-execute a notebook's code cells in a fresh session and compare every "
    "cell's outputs with the recorded ones: same / different (with a diff) / error now / "
    "error before / skipped. Works on notebooks from jupyter-exec, JupyterLab, nbclient "
    "and papermill (nbformat 4; v3 is upgraded).",
    epilog=EPILOG,
    arguments=_arguments,
    run=cmd_replay,
)
