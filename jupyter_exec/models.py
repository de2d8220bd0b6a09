"""The result objects callers get back: typed, frozen views over nbformat outputs.

An :class:`Execution` is built from the same nbformat output dicts that are
recorded in the session notebook, so what a caller sees and what the notebook
holds cannot disagree. Errors in the executed code are data
(``execution.error``); ``raise_for_error()`` is the opt-in to exceptions, in
the manner of ``httpx.Response.raise_for_status()``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from jupyter_exec.engine.mime import BINARY, joined
from jupyter_exec.exceptions import (
    ExecutionError,
    ExecutionTimeout,
    KernelDiedError,
    SessionClosedError,
)
from jupyter_exec.network.policy import Connection

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "CellError",
    "Execution",
    "Result",
    "ScriptResult",
    "StateRecovery",
    "Status",
]

Status = Literal["ok", "error", "timeout", "died", "cancelled"]
"""How an execution ended: normally, with an exception, past its timeout, with a dead
kernel, or cut short because its session was closed."""


class _Format:
    """One format of a :class:`Result` as an attribute (``result.png``): its mime type's
    payload with notebook line lists joined, None when the result does not carry it.

    One descriptor for every format, so a new one is one line in :class:`Result` and each
    reads its payload the same way. Read-only, as a property is (it has a ``__set__`` that
    refuses), so documentation tools show it as one.
    """

    def __init__(self, mime: str, doc: str = "") -> None:
        self.mime = mime
        self.__doc__ = doc or f"The ``{mime}`` representation."

    @overload
    def __get__(self, result: None, owner: type[Any]) -> _Format: ...
    @overload
    def __get__(self, result: Result, owner: type[Any]) -> str | None: ...
    def __get__(self, result: Result | None, owner: type[Any]) -> _Format | str | None:
        if result is None:
            return self
        return joined(result.data.get(self.mime))  # type: ignore[no-any-return]

    def __set__(self, result: Result, value: object) -> None:
        raise AttributeError(f"{self.mime} of a Result is read-only")


@dataclass(frozen=True)
class Result:
    """One rich output (an ``execute_result`` or a ``display_data``), with every format it carried.

    Text formats are strings; binary images and PDF are base64 strings exactly as
    in the notebook (use :meth:`data_bytes` for raw bytes); JSON formats are
    decoded objects. ``files`` maps each mime type that was saved to the work
    dir to its path.
    """

    data: Mapping[str, Any]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    files: Mapping[str, Path] = field(default_factory=dict)

    text = _Format("text/plain", "The ``text/plain`` representation, as a console would print it.")
    html = _Format("text/html")
    markdown = _Format("text/markdown")
    latex = _Format("text/latex")
    svg = _Format("image/svg+xml")
    png = _Format("image/png", "Base64-encoded PNG.")
    jpeg = _Format("image/jpeg", "Base64-encoded JPEG.")
    gif = _Format("image/gif", "Base64-encoded GIF.")
    pdf = _Format("application/pdf", "Base64-encoded PDF.")

    @property
    def json(self) -> Any:
        """The ``application/json`` payload, decoded."""
        return self.data.get("application/json")

    def formats(self) -> list[str]:
        """The mime types this result carries, in the order the kernel sent them."""
        return list(self.data)

    def data_bytes(self, mime: str) -> bytes:
        """The payload of ``mime`` as bytes (base64-decoded for binary formats)."""
        value = joined(self.data[mime])
        if mime in BINARY:
            return base64.b64decode(value)
        if isinstance(value, str):
            return value.encode()
        return json.dumps(value).encode()

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Display this result in Jupyter exactly as the kernel displayed it."""
        return {k: joined(v) for k, v in self.data.items()}, dict(self.metadata)

    def __repr__(self) -> str:
        kind = "main result" if self.is_main_result else "display"
        return f"Result({kind}: {', '.join(self.formats())})"


_RAISED_FOR: dict[str, type[ExecutionTimeout | KernelDiedError | SessionClosedError]] = {
    "timeout": ExecutionTimeout,
    "died": KernelDiedError,
    "cancelled": SessionClosedError,
}
"""What :meth:`Execution.raise_for_error` raises for an end other than the code's own
exception (which is an :class:`~jupyter_exec.ExecutionError`)."""


@dataclass(frozen=True)
class CellError:
    """What went wrong: the code's exception, a timeout, or a dead kernel.

    ``traceback`` is plain text (ANSI colour codes removed), ready to print or
    to show a model.
    """

    ename: str
    evalue: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.ename}: {self.evalue}"


@dataclass(frozen=True)
class StateRecovery:
    """What came back when the kernel died: the state from a snapshot or a checkpoint.

    On the :class:`Execution` that saw the death and on the next one.
    """

    source: str
    """Where it came from: ``"snapshot"`` (in memory) or ``"checkpoint 'auto-3'"`` (on disk)."""
    from_cell_index: int
    """The state is the one from before this cell (0-based)."""
    names: tuple[str, ...]
    """Names that came back as they were when the kernel died."""
    lost: Mapping[str, str] = field(default_factory=dict)
    """Names that did not, each with why: changed after the snapshot or checkpoint, or
    not storable on disk (a generator, a lock...)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "from_cell_index": self.from_cell_index,
            "names": list(self.names),
            "lost": dict(self.lost),
        }


@dataclass(frozen=True)
class Execution:
    """The outcome of running one block of code in a session."""

    code: str
    status: Status
    results: tuple[Result, ...] = ()
    stdout: str = ""
    stderr: str = ""
    error: CellError | None = None
    execution_count: int | None = None
    files: tuple[Path, ...] = ()
    duration: float = 0.0
    cell_index: int | None = None
    """Position (0-based) of the recorded cell in the session notebook, if recorded."""
    state_lost: bool = False
    """True when the kernel had to be restarted during this execution."""
    truncated: bool = False
    """True when stream output was cut short; the full text is in ``spilled``."""
    spilled: tuple[Path, ...] = ()
    """The files holding the full text of truncated streams (also listed in ``files``)."""
    outputs: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    """The nbformat outputs, exactly as recorded in the notebook."""
    connections: tuple[Connection, ...] = ()
    """The connections the kernel tried through its network policy's proxy while this ran
    (host, port, decision, reason); empty without a policy."""
    recovered: StateRecovery | None = None
    """When the kernel died during this execution or just before it: which names came back
    and which were lost (on this execution and on the next one)."""
    host: str | None = None
    """Where the kernel ran this: the host as the gateway named it, for a remote kernel
    (``$JUPYTER_EXEC_HOST`` from jupyter-exec's gateway launcher, else the machine's host
    name); ``None`` for a kernel on this machine (local or Docker)."""
    state_notes: tuple[str, ...] = ()
    """What the per-cell state (``save_state``) said while this ran, when its save did not
    go the usual way: a large change the kernel wrote itself instead of a forked child
    (memory short, no ``os.fork``), so a cell that changes those objects waits for the
    writer first. Empty as a rule."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def main_result(self) -> Result | None:
        """The ``execute_result`` (the value of the last expression), if any."""
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> str | None:
        """``text/plain`` of the main result: ``'6'`` for ``df.x.sum()``."""
        main = self.main_result
        return main.text if main else None

    def raise_for_error(self) -> Execution:
        """Raise if the execution did not end normally; otherwise return ``self``.

        Raises :class:`~jupyter_exec.ExecutionError` for an exception in the
        code, :class:`~jupyter_exec.ExecutionTimeout` for a timeout and
        :class:`~jupyter_exec.KernelDiedError` for a dead kernel and
        :class:`~jupyter_exec.SessionClosedError` for a cell cut short by
        ``close()``; each carries
        this execution as ``.execution``.
        """
        if self.status == "ok" or self.error is None:
            return self
        message = str(self.error)
        if self.error.traceback:
            message = f"{message}\n{self.error.traceback}"
        raise _RAISED_FOR.get(self.status, ExecutionError)(message, self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (paths as strings; binary payloads stay base64)."""
        return {
            "code": self.code,
            "status": self.status,
            "execution_count": self.execution_count,
            "cell_index": self.cell_index,
            "duration": self.duration,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "text": self.text,
            "error": None
            if self.error is None
            else {
                "ename": self.error.ename,
                "evalue": self.error.evalue,
                "traceback": self.error.traceback,
            },
            "results": [
                {
                    "is_main_result": r.is_main_result,
                    "data": {k: joined(v) for k, v in r.data.items()},
                    "metadata": dict(r.metadata),
                    "files": {k: str(v) for k, v in r.files.items()},
                }
                for r in self.results
            ],
            "files": [str(p) for p in self.files],
            "state_lost": self.state_lost,
            "truncated": self.truncated,
            "spilled": [str(p) for p in self.spilled],
            "connections": [c.to_dict() for c in self.connections],
            "recovered": None if self.recovered is None else self.recovered.to_dict(),
            "state_notes": list(self.state_notes),
        }

    def __str__(self) -> str:
        parts = [p for p in (self.stdout, self.stderr) if p]
        if self.text is not None:
            parts.append(self.text)
        if self.error is not None:
            parts.append(self.error.traceback or str(self.error))
        return "\n".join(parts)


TIMEOUT_EXIT_CODE = 124
"""Exit code of a script killed at its timeout (as with coreutils ``timeout``)."""


@dataclass(frozen=True)
class ScriptResult:
    """The outcome of ``Session.run_script()``: a fresh process, not the kernel."""

    exit_code: int
    output: str
    """stdout and stderr, combined in the order they were written."""
    path: Path
    """The script file, in the work dir."""
    duration: float = 0.0
    timed_out: bool = False
    files: tuple[Path, ...] = ()
    """Files the script created or changed in the work dir (the script itself excluded)."""
    connections: tuple[Connection, ...] = ()
    """The connections tried through the session's network policy while it ran (a Docker
    session with a policy: its processes share the kernel's proxy); empty without one."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "output": self.output,
            "path": str(self.path),
            "duration": self.duration,
            "timed_out": self.timed_out,
            "files": [str(p) for p in self.files],
            "connections": [c.to_dict() for c in self.connections],
        }
