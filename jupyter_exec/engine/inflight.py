"""A cell in flight: what it carries while it runs, and the outputs it settles into.

Between :meth:`~jupyter_exec.session.recording.Recording.begin` and
:meth:`~jupyter_exec.session.recording.Recording.record`, its :class:`Cell` carries
the output builder, the spill file for long streams, the kernel guard's
request and the network proxy's mark; :class:`SafeSpill` keeps a full disk
from stopping the cell. When it ends, :func:`final_outputs` turns the
builder and the run into the outputs and error that are recorded,
:func:`redacted` takes the network policy's secrets out of them once more
(the cell's :class:`~jupyter_exec.network.redact.Redactor` took them out of
every message as it came), and
:func:`copy_output` gives the caller outputs a later display update cannot
reach.

Kept apart from :mod:`jupyter_exec.session.recording` so that module reads as the
order of writes for one cell and the bookkeeping across cells, and this one
as the per-cell data and pure steps those writes use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.engine.guard import CellGuard
from jupyter_exec.engine.outputs import CellOutputs, stream_text, strip_ansi
from jupyter_exec.engine.runner import CellRun, is_interrupt
from jupyter_exec.engine.store import FileSpill
from jupyter_exec.exceptions import StorageError, WorkDirError
from jupyter_exec.models import CellError
from jupyter_exec.network.redact import Redactor

__all__ = [
    "Cell",
    "SafeSpill",
    "copy_output",
    "final_outputs",
    "joined",
    "redacted",
    "storage_error",
]


def storage_error(exc: OSError | WorkDirError, what: str) -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, WorkDirError):  # e.g. a link where the file was to go
        return StorageError(f"could not write {what}: {exc}")
    reason = exc.strerror or str(exc)
    return StorageError(f"could not write {what}: {reason}", exc.errno)


class SafeSpill:
    """A :class:`FileSpill` that never stops a running cell: a failed write is kept for later.

    Streams keep flowing into the notebook (head and tail) while the disk is
    full; the first error is reported once the cell is recorded.
    """

    def __init__(self, spill: FileSpill) -> None:
        self._spill = spill
        self.error: StorageError | None = None

    def write(self, name: str, text: str) -> None:
        if self.error is not None:
            return
        try:
            self._spill.write(name, text)
        except (OSError, WorkDirError) as exc:
            self.error = storage_error(exc, f"the full text of {name}")

    def location(self, name: str) -> str | None:
        return None if self.error is not None else self._spill.location(name)

    def close(self) -> list[Path]:
        """Close the files; the paths written (none if a write failed)."""
        try:
            self._spill.close()
        except (OSError, WorkDirError) as exc:
            self.error = self.error or storage_error(exc, "the full text of a stream")
        return [] if self.error is not None else list(self._spill.paths.values())


@dataclass
class Cell:
    """A cell being run: where it will be recorded and what collects its outputs."""

    index: int
    builder: CellOutputs
    spill: SafeSpill | None
    guard: CellGuard | None = None
    """What the kernel's output guard is asked for this cell (None: no guard, or no writes)."""
    network: Any = None
    """The kernel's network proxy (a policy is set), and its record's position at the start."""
    network_mark: int = 0
    network_revived: bool = False
    """The proxy had stopped (requests failed closed) and was started again before this cell."""
    redactor: Redactor | None = None
    """What takes the network policy's secrets out of the cell's outputs (None: no policy)."""
    expressions: dict[str, str] = field(default_factory=dict)
    """``user_expressions`` the recording asks of the cell (the environment capture's)."""
    host: str | None = None
    """Where a remote kernel ran the cell (None: this machine, or not known)."""
    left_remote: list[dict[str, Any]] = field(default_factory=list)
    """Files a remote kernel wrote that stayed on its host, each with why."""

    @property
    def metadata(self) -> dict[str, Any] | None:
        """For the execute_request: the guard's budget and files."""
        return self.guard.metadata if self.guard is not None else None

    def abandon(self) -> None:
        """The run failed before it could be recorded: close the spill file."""
        if self.spill is not None:
            self.spill.close()


def final_outputs(
    builder: CellOutputs, run: CellRun
) -> tuple[list[dict[str, Any]], CellError | None]:
    """The cell's outputs and error, with our error output for a timeout or a dead kernel."""
    outputs = builder.finish()
    error = run.error
    if error is not None:
        outputs = [o for o in outputs if not is_interrupt(o)]
        outputs.append(
            {
                "output_type": "error",
                "ename": error.ename,
                "evalue": error.evalue,
                "traceback": [
                    f"{error.ename}: {error.evalue}",
                    *([error.traceback] if error.traceback else []),
                ],
            }
        )
    elif run.status == "error":
        # Every error status carries an error: the kernel's error output, else its reply's
        # (an unknown %magic is reported on stderr and in the reply only).
        error = _error_from(outputs) or run.reply_error or _NO_DETAILS
    return outputs, error


def redacted(
    outputs: list[dict[str, Any]], error: CellError | None, redactor: Redactor
) -> tuple[list[dict[str, Any]], CellError | None]:
    """The outputs and error without the network policy's secrets: the final pass, over the
    text as shown (``\\r`` and ``\\b`` applied) and the errors the reply or the session made."""
    if not redactor:
        return outputs, error
    if error is not None:
        error = CellError(
            redactor.text(error.ename), redactor.text(error.evalue), redactor.text(error.traceback)
        )
    return [redactor.value(o) for o in outputs], error


def joined(outputs: list[dict[str, Any]], name: str, redactor: Redactor | None) -> str:
    """All text of stream ``name``, redacted again as one text (a secret split by another
    output between its parts is whole in it)."""
    text = stream_text(outputs, name)
    return redactor.text(text) if redactor is not None else text


_NO_DETAILS = CellError("Error", "the kernel reported an error but sent no details")


def _error_from(outputs: list[dict[str, Any]]) -> CellError | None:
    for output in reversed(outputs):
        if output.get("output_type") == "error":
            return CellError(
                ename=str(output.get("ename", "")),
                evalue=str(output.get("evalue", "")),
                traceback=strip_ansi("\n".join(output.get("traceback", []))),
            )
    return None


def copy_output(output: dict[str, Any]) -> dict[str, Any]:
    """A copy of an output whose containers a later display update cannot reach."""
    copied = dict(output)
    for key in ("data", "metadata"):
        if key in copied:
            copied[key] = dict(copied[key])
    if isinstance(copied.get("traceback"), list):
        copied["traceback"] = list(copied["traceback"])
    return copied
