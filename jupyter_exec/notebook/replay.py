"""Replay: re-run a notebook in a fresh session and say, cell by cell, whether it reproduced.

::

    notebook ─► read_notebook (v3 upgraded; clear NotebookErrors)
             ─► fresh AsyncSession, recording to <stem>.replayed.ipynb (never the original)
             ─► each code cell: execute ─► compare with the record [compare.py]
                                        ─► CellResult: same / different / error_now /
                                           error_before / skipped
             ─► at the end, every cell a later cell changed (a display update) compared
                again, on what it shows then
             ─► ReplayReport (.reproduced, .to_dict() for the server, .to_markdown())

The work dir defaults to the notebook's folder, so relative paths the cells use
resolve as they did when the notebook was recorded. Cells run in the order the
record says they ran (``jupyter_exec.run``, see :mod:`jupyter_exec.engine.runorder`: a
notebook a person and an agent shared), else top to bottom (not in the
execution-count order, which is reported when it differs), and a failing cell
does not stop the replay: every cell gets a verdict.

A notebook's record is what a person sees at the end: a display a later cell
updated (``update_display``, a ``DisplayHandle``) shows its last value in
every cell showing that id, and ``clear_output(wait=True)`` has been applied.
The replay is judged the same way: each cell is compared as soon as it ran
(for the progress line and ``on_cell``), and again after the last cell if a
later cell changed what it shows; the report holds the final verdict.

The verdicts and their report are :mod:`jupyter_exec.notebook.report`; how one cell is
judged is :mod:`jupyter_exec.notebook.judge`; this module is the driver that runs the cells.
"""

from __future__ import annotations

import inspect
import itertools
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO, cast

from jupyter_exec.boundary.naming import replayed_notebook_name, safe_name
from jupyter_exec.engine.language_records import record_of_tag
from jupyter_exec.engine.languages import (
    is_default_language,
    kernel_for,
    language_of_kernel,
    normalise_language,
)
from jupyter_exec.engine.loop_thread import LOOP_THREAD, wait_for_future
from jupyter_exec.engine.meta import is_undone
from jupyter_exec.engine.recorder import read_notebook
from jupyter_exec.engine.runorder import run_order, seq_of
from jupyter_exec.exceptions import NotebookError
from jupyter_exec.notebook import envdiff, inputs, reprs
from jupyter_exec.notebook.compare import (
    DEFAULT_RULES,
    ImageTolerance,
    Rule,
    parse_rule,
)
from jupyter_exec.notebook.passes import _Judging, _nondeterministic, _Plan, _ReplaySession
from jupyter_exec.notebook.report import CellResult, CellStatus, ReplayReport, _Progress
from jupyter_exec.notebook.where import choose
from jupyter_exec.options import DEFAULT_TIMEOUT
from jupyter_exec.session.session import AsyncSession, Backend

__all__ = [
    "CellResult",
    "CellStatus",
    "ReplayReport",
    "replay",
    "replay_async",
]

CellCallback = Callable[["CellResult"], Awaitable[None] | None]


# -- the replay ------------------------------------------------------------------------


def _language_of(nb: Any) -> str | None:
    """The language a notebook's metadata says it is in (``kernelspec.language``, else
    ``language_info.name``, else its kernelspec's name), normalised; None: not said."""
    spec = nb.metadata.get("kernelspec") or {}
    info = nb.metadata.get("language_info") or {}
    said = (spec.get("language") if isinstance(spec, Mapping) else None) or (
        info.get("name") if isinstance(info, Mapping) else None
    )
    if said:
        return normalise_language(str(said))
    name = spec.get("name") if isinstance(spec, Mapping) else None
    return language_of_kernel(str(name)) if name else None


def _kernel_name(nb: Any, session_kwargs: Mapping[str, Any], warnings: list[str]) -> str:
    """The notebook's own kernel if installed, else python3 for Python notebooks.

    A notebook in another language is never run in Python because ``python`` or an
    ``environment`` (a Python one) was given: that is a :class:`NotebookError`.
    """
    spec = nb.metadata.get("kernelspec") or {}
    wanted = spec.get("name")
    if session_kwargs.get("language"):
        return kernel_for(str(session_kwargs["language"]))
    python = session_kwargs.get("python") or session_kwargs.get("environment") is not None
    language = _language_of(nb)
    known = record_of_tag(language) if language is not None else None
    if python and language is not None and not (known is not None and known.interpreter):
        raise NotebookError(
            f"the notebook is in {known.title if known else language} (its metadata's "
            "kernelspec / language_info), and --python / --env / --in-recorded-env run "
            "Python: replay it on its own kernel (drop them, or name one with --kernel)"
        )
    if not wanted or python:
        return "python3"
    if session_kwargs.get("backend") == "docker":  # the image has python3, ir, bash and deno
        return str(wanted) if language_of_kernel(str(wanted)) else "python3"
    from jupyter_client.kernelspec import KernelSpecManager

    if wanted in KernelSpecManager().find_kernel_specs():
        return str(wanted)
    language = spec.get("language") or (nb.metadata.get("language_info") or {}).get("name")
    if language and not is_default_language(str(language)):
        raise NotebookError(
            f"the notebook's kernel {wanted!r} ({language}) is not installed here; "
            "install it or pass kernel_name (--kernel)"
        )
    warnings.append(f"kernel {wanted!r} is not installed here; replayed with 'python3'")
    return "python3"


def _order_warning(cells: Sequence[Mapping[str, Any]]) -> str | None:
    counts = [c.get("execution_count") for c in cells if c.get("cell_type") == "code"]
    seen = [n for n in counts if isinstance(n, int)]
    if any(b <= a for a, b in itertools.pairwise(seen)):
        shown = ", ".join(str(n) for n in seen[:12]) + (", ..." if len(seen) > 12 else "")
        return (
            f"the record's cells ran out of order (In [{shown}]); "
            "the replay runs them top to bottom"
        )
    return None


def _followed_note(cells: Sequence[Mapping[str, Any]], order: Sequence[int]) -> str:
    ran = [i + 1 for i in order if seq_of(cells[i]) is not None]
    shown = ", ".join(str(n) for n in ran[:12]) + (", ..." if len(ran) > 12 else "")
    return f"the cells run in the order the record says they ran (cells {shown})"


def _output_path(source: Path, work_dir: Path, output: str | os.PathLike[str] | None) -> Path:
    path = (
        work_dir / replayed_notebook_name(source.stem)
        if output is None
        else Path(output).expanduser().absolute()
    )
    if path == source or (path.exists() and source.exists() and os.path.samefile(path, source)):
        raise NotebookError(f"the replay would overwrite the original notebook {source}")
    return path


def _same_folder(a: Path, b: Path) -> bool:
    return a == b or (a.exists() and b.exists() and os.path.samefile(a, b))


def _run_folders(
    source: Path, given: Path | None, target: Path, second: Path, runs: int
) -> list[Path]:
    """The folder each run of the replay runs in (see ``work_dir``), never the recording's."""
    if given is not None and _same_folder(given, source.parent):
        raise NotebookError(
            f"a replay never runs in the recording's folder {source.parent}: it would meet the "
            "files the recording left and change them; leave out work_dir (--work-dir) for a "
            "fresh copy of its inputs beside the replayed notebook, or name another folder"
        )
    first = inputs.run_folder_for(target) if given is None else given
    return [first, inputs.run_folder_for(second)][:runs]


def _prepare(
    source: Path,
    folders: Sequence[Path],
    given: Path | None,
    copy: bool,
    records: set[Path],
    written: frozenset[str],
    owner: inputs.OutputClaim,
) -> list[str]:
    """Make each run folder and copy the recording's inputs into it; the copy's warnings."""
    warnings: list[str] = []
    for number, folder in enumerate(folders):
        if given is not None and number == 0:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise NotebookError(f"cannot make the work dir {folder}: {exc}") from None
        else:
            inputs.fresh_run_folder(folder, owner)
        if copy:
            ours = (*records, *(inputs.run_folder_for(r) for r in records), *folders)
            skip = frozenset(p.name for p in ours if p.parent == source.parent)
            try:
                copied = inputs.copy_inputs(
                    source.parent,
                    folder,
                    skip_names=skip,
                    skip_dirs=folders,
                    written=written,
                    own_dest=given is None or number > 0,
                )
            except NotebookError:
                if given is None or number > 0:  # a run folder of ours: not left half full
                    shutil.rmtree(folder, ignore_errors=True)
                raise
            warnings.extend(w for w in copied.warnings() if w not in warnings)
    return warnings


def _note_in_notebook(session: AsyncSession, source: Path, report: ReplayReport) -> None:
    ours = dict(session.notebook_metadata.get("jupyter_exec") or {})
    ours["replay"] = {
        "of": str(source),
        "reproduced": report.reproduced,
        "counts": report.counts,
        "until": report.until,
    }
    session.set_notebook_metadata("jupyter_exec", ours)


def _rules(default_rules: bool, rules: Iterable[Rule | str]) -> tuple[Rule, ...]:
    extra = tuple(r if isinstance(r, Rule) else parse_rule(r) for r in rules)
    return (DEFAULT_RULES if default_rules else ()) + extra


async def replay_async(
    notebook: str | os.PathLike[str],
    *,
    work_dir: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    until: int | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    backend: Backend | None = None,
    kernel_name: str | None = None,
    rules: Iterable[Rule | str] = (),
    default_rules: bool = True,
    image_tolerance: float | ImageTolerance = 0.0,
    pixel_threshold: int = 0,
    rtol: float = 0.0,
    runs: int = 1,
    in_recorded_env: bool = False,
    save_state: bool = False,
    copy_inputs: bool = True,
    progress: TextIO | None = None,
    on_cell: CellCallback | None = None,
    claim: inputs.OutputClaim | None = None,
    **session_kwargs: Any,
) -> ReplayReport:
    """Re-run ``notebook``'s code cells in a fresh session and compare each with its record.

    Parameters
    ----------
    work_dir:
        The kernel's working directory, never the notebook's own folder (default: a fresh
        ``<output stem>_work/`` beside the replayed notebook, made anew by every replay).
        The inputs of the notebook's folder are copied into it first (see
        :mod:`jupyter_exec.notebook.inputs`), so the cells' relative paths resolve as when
        it was recorded and their side effects meet the files the recording started from.
    output:
        Where the replay is recorded (default ``<work_dir>/<stem>.replayed.ipynb`` when
        ``work_dir`` is given, else ``<stem>.replayed.ipynb`` beside the notebook); the
        original notebook is never written.
    copy_inputs:
        False: run in ``work_dir`` as it is (a folder you filled); nothing is copied.
    until:
        Replay only the first ``until`` non-empty code cells; the rest are skipped.
    rules, default_rules:
        Extra normalisation rules (``Rule`` objects, or ``"REGEX"`` /
        ``"REGEX=>REPLACEMENT"`` strings) applied after the defaults
        (:data:`jupyter_exec.notebook.compare.DEFAULT_RULES`), which ``default_rules=False`` drops.
    image_tolerance, pixel_threshold:
        Images count as the same when at most this fraction of pixels differ by
        more than ``pixel_threshold`` in some channel (an :class:`ImageTolerance`
        may be given instead).
    rtol:
        Numbers in text outputs that agree within this relative tolerance make a
        cell ``equivalent`` rather than ``different`` (DataFrame tables always
        allow :data:`~jupyter_exec.notebook.compare.TABLE_RTOL`).
    runs:
        1, or 2 to replay twice: cells whose outputs differ between the two
        replays are ``nondeterministic`` (not blamed on the record). The second
        run is recorded beside the first (``<stem>.replayed-run2.ipynb``).
    backend:
        Where the cells run: ``local`` (this host) or ``docker``. None (not said):
        the host, unless the record bears a trace of Docker: then, with
        ``in_recorded_env`` and a recorded image, that image, else a
        :class:`~jupyter_exec.NotebookError` (the record cannot send a replay to
        the host; :mod:`jupyter_exec.notebook.where`).
    in_recorded_env:
        Replay in an environment made from the record's
        ``metadata.jupyter_exec.environment``: with ``backend="docker"`` the
        recorded image (else the kernel image) with the recorded pins, with
        ``backend="local"`` a cached venv with the recorded Python version and
        package versions, and without a backend whichever the record names.
    save_state:
        Save the kernel's namespace after every cell (``.<name>_state/`` in the replay's
        work dir, for :meth:`Session.resume` of the replayed notebook), as a session's
        ``save_state`` does. Off by default: a replay writes no per-cell state, and no
        automatic checkpoints unless ``checkpoint_every`` is given.
    progress:
        A stream for the environment differences (first) and a one-line-per-cell
        progress display (e.g. ``sys.stderr``).
    on_cell:
        Called (or awaited) with each :class:`CellResult` as soon as it is known,
        and once more for a cell whose verdict a later cell's display update changed.
    claim:
        The claim on ``output`` and its run folder (with ``runs=2``, the second record's too)
        that the caller took already with :func:`jupyter_exec.notebook.inputs.claim_outputs`
        (the REST server, which makes the run folder before the replay starts its kernel).
        None: the replay claims them itself, before it writes anything, and releases them
        when it ends, however it ends.
    session_kwargs:
        Passed to :class:`AsyncSession` (``python=``, ``docker=``, ``env=``,
        ``kernel_manager=`` ...), with ``backend`` and ``timeout``.

    Raises :class:`~jupyter_exec.SessionConflict` when another replay, in this process or
    another, is recording to the same output or running in the same folder (its message
    names that replay's pid): two replays would share one run folder, each wiping it under
    the other's kernel.
    Raises :class:`~jupyter_exec.NotebookError` for a notebook that cannot be
    read (not JSON, not a notebook, nbformat < 3, invalid), or one in another language
    than Python given ``python=`` / ``environment=``, before any kernel starts.
    """
    started_at = datetime.now(timezone.utc).isoformat()
    clock = time.monotonic()
    if until is not None and until < 0:
        raise ValueError(f"until must be >= 0, not {until}")
    if runs not in (1, 2):
        raise ValueError(f"runs must be 1 or 2, not {runs}")
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, not {rtol}")
    tolerance = (
        image_tolerance
        if isinstance(image_tolerance, ImageTolerance)
        else ImageTolerance(image_tolerance, pixel_threshold)
    )
    judging = _Judging(_rules(default_rules, rules), tolerance, rtol)
    session_kwargs["save_state"] = save_state
    session_kwargs.setdefault("checkpoint_every", None)  # a replay's state is kept only if asked
    source = Path(notebook).expanduser().absolute()
    nb = read_notebook(source)
    given = None if work_dir is None else Path(work_dir).expanduser().absolute()
    target = _output_path(source, source.parent if given is None else given, output)
    second_target = target.with_name(f"{target.stem}-run2.ipynb")
    runs_in = _run_folders(source, given, target, second_target, runs)
    record = envdiff.recorded(nb.metadata)
    if in_recorded_env and record is None:
        raise NotebookError(
            f"{source.name} records no environment (metadata.jupyter_exec.environment): "
            "--in-recorded-env needs a notebook recorded by jupyter-exec"
        )
    where = choose(
        source.name,
        nb.metadata,
        backend=backend,
        in_recorded_env=in_recorded_env,
        session_kwargs=session_kwargs,
    )
    if where.environment is not None:
        for key in ("python", "backend", "docker", "environment"):
            session_kwargs.pop(key, None)
        session_kwargs["environment"] = where.environment
    backend = cast(Backend, where.backend)
    if progress is not None:
        progress.write(f"{where.describe()}\n")
    warnings: list[str] = []
    order = run_order(nb.cells)  # placed order, unless the notebook says how its cells ran
    if order != sorted(order):
        warnings.append(_followed_note(nb.cells, order))
    elif (unordered := _order_warning(nb.cells)) is not None:
        warnings.append(unordered)
    if kernel_name is None:
        kernel_name = _kernel_name(nb, {**session_kwargs, "backend": backend}, warnings)

    runnable = [
        step
        for step, i in enumerate(order)
        if (c := nb.cells[i]).cell_type == "code" and str(c.source).strip() and not is_undone(c)
    ]
    to_run = {order[step] for step in (runnable if until is None else runnable[:until])}
    last_step = max((s for s in runnable if order[s] in to_run), default=-1)
    plan = _Plan(nb, order, to_run, last_step, until, judging)

    async def notify(result: CellResult) -> None:
        if on_cell is not None:
            outcome = on_cell(result)
            if inspect.isawaitable(outcome):
                await outcome

    targets = (target, second_target)[:runs]
    if claim is not None and not all(claim.holds(p) for p in (*targets, *runs_in)):
        raise ValueError(f"the claim given does not hold the replay's output {target}")
    # From here on the replay writes: its output notebooks and run folders are its own.
    owner = claim if claim is not None else inputs.claim_outputs(targets, source, given)
    try:
        written = inputs.written_by_record(nb.metadata)
        records = {target, second_target}
        warnings.extend(_prepare(source, runs_in, given, copy_inputs, records, written, owner))

        def session_for(path: Path, root: Path) -> _ReplaySession:
            return _ReplaySession(
                root,
                kernel_name,
                notebook=path,
                name=safe_name(path.stem),
                timeout=timeout,
                backend=backend,
                overwrite=True,
                **session_kwargs,
            )

        bar = None if progress is None else _Progress(progress, len(to_run))
        session = session_for(target, runs_in[0])
        async with session:
            found: list[str] = []
            bridges: tuple[reprs.ActiveBridge, ...] = ()
            if record is not None:
                now = await session.environment_here(record, backend, kernel_name)
                found = envdiff.differences(record, now, session.work_dir)
                bridges = reprs.active_bridges(record, now)
                if bridges:  # the known repr changes between the two versions are read through
                    plan = replace(plan, judging=replace(judging, bridges=bridges))
                if progress is not None:
                    _show_environment(progress, found)
            else:  # a notebook from elsewhere: its own words tell the versions' side
                now = {}
                spoken = record_of_tag(session.language or "")
                if spoken is not None and spoken.cell_state:  # the probe runs in the kernel
                    asked = {"packages": {b.package: "" for b in reprs.BRIDGES}}
                    now = await session.environment_here(asked, backend, kernel_name)
                bridges = reprs.unrecorded_bridges(now)
                if bridges:
                    plan = replace(plan, judging=replace(judging, bridges=bridges))
                if progress is not None:
                    progress.write(
                        "environment: not recorded (the notebook holds no jupyter_exec record)\n"
                    )
            results = await plan.run(session, bar, notify)
            extra = {**_facts(nb), "environment": {"recorded": record}, "where": where.to_dict()}
            extra["environment"]["here"] = now
            extra["environment"]["repr_rules"] = [b.reason for b in bridges]
            if runs == 2:
                second = session_for(second_target, runs_in[1])
                if progress is not None:
                    progress.write("replaying again to tell nondeterministic cells apart\n")
                async with second:
                    again = await plan.run(second, None, None)
                results = _nondeterministic(results, again, judging)
                extra["second_run"] = str(second.notebook_path)
            report = ReplayReport(
                notebook=source,
                cells=tuple(results),
                output=target,
                work_dir=session.work_dir,
                until=until,
                rules=tuple(r.name for r in judging.rules),
                warnings=tuple(warnings),
                started=started_at,
                duration=round(time.monotonic() - clock, 3),
                extra=extra,
                environment=tuple(found),
                runs=runs,
            )
            _note_in_notebook(session, source, report)
        return report
    finally:
        if claim is None:
            owner.release()


def _show_environment(stream: TextIO, found: Sequence[str]) -> None:
    if not found:
        stream.write("environment: as recorded\n")
    else:
        stream.write(f"environment: {len(found)} difference(s) from the record\n")
        stream.writelines(f"  {line}\n" for line in found)
    stream.flush()


def _facts(nb: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    papermill = nb.metadata.get("papermill")
    if isinstance(papermill, Mapping):
        facts["papermill"] = {
            k: papermill[k] for k in ("parameters", "version", "input_path") if k in papermill
        }
    kernelspec = nb.metadata.get("kernelspec")
    if isinstance(kernelspec, Mapping) and kernelspec.get("name"):
        facts["kernelspec"] = kernelspec["name"]
    return facts


def replay(notebook: str | os.PathLike[str], **kwargs: Any) -> ReplayReport:
    """Blocking :func:`replay_async` (same arguments); works inside a running event loop too.

    Ctrl-C cancels the replay and shuts its kernel down before re-raising.
    """
    finished = threading.Event()

    async def guarded() -> ReplayReport:
        try:
            return await replay_async(notebook, **kwargs)
        finally:
            finished.set()

    future = LOOP_THREAD.submit(guarded())
    try:
        return wait_for_future(future)
    except KeyboardInterrupt:
        future.cancel()
        finished.wait(15)
        raise
