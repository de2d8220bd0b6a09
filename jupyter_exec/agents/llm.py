"""What a language model is shown of an :class:`~jupyter_exec.Execution`.

Agent frameworks forward one string to the model, so everything the model
needs to carry on has to be in it, and nothing that wastes its context:

* outputs in the order the kernel produced them (stdout and stderr
  interleaved as they happened), ANSI colour codes removed;
* images and other rich outputs (HTML, a DataFrame's HTML table, JSON)
  named by the file they were saved to, relative to the work dir, so the
  model can refer to its plot or open its table; a plain-text form is shown
  too unless it is only an ``<... object>`` repr;
* files the code wrote, listed the same way;
* a text budget: beyond ``max_chars`` the middle is cut, and the text says
  how much was cut and which file holds all of it;
* errors condensed to a short traceback: the model's own frames in full,
  library frames as one line each, a long chain of frames elided in the
  middle, and a failed shell block reported by its exit status alone;
* connections the session's network policy refused while the code ran,
  once per host, with the policy's rules (:func:`denied_connections`): the
  code may have caught the error, or a library may have reported it vaguely
  ("ProxyError", "403"), and the model should learn which host is off limits
  and which are allowed, rather than retry.

:func:`render` is shared by every agent front end (AG2 executors, the MCP
server), so they all show a model the same thing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jupyter_exec.boundary.naming import output_file_name
from jupyter_exec.boundary.paths import write_bytes
from jupyter_exec.engine.mime import MODEL_IMAGES
from jupyter_exec.engine.outputs import strip_ansi
from jupyter_exec.engine.store import confined_path
from jupyter_exec.models import TIMEOUT_EXIT_CODE, Execution, Result
from jupyter_exec.network import Connection, NetworkPolicy

__all__ = [
    "DEFAULT_LLM_CHARS",
    "EXIT_TIMEOUT",
    "LLMText",
    "condense_traceback",
    "denied_connections",
    "exit_code",
    "render",
    "shell_exit_status",
]

DEFAULT_LLM_CHARS = 10_000
"""Characters of output a model is shown per execution by default (about 2,500 tokens)."""

MAX_ERROR_CHARS = 3_000
"""Characters an error may take on top of the budget: the error is never cut for output."""

MAX_LISTED_FILES = 30

MAX_DENIED_HOSTS = 10
"""Denied hosts named per execution; more are counted (the notebook lists them all)."""

EXIT_TIMEOUT = TIMEOUT_EXIT_CODE
"""Exit code reported for code stopped at its timeout (as coreutils ``timeout`` reports it)."""

_FRAMES_KEPT_HEAD = 2
_FRAMES_KEPT_TAIL = 3
_EXIT_STATUS_RE = re.compile(r"non-zero exit status (-?\d+)")
_LIBRARY_MARKERS = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python")
_PREFIX_RES = (  # installed packages first: they live inside lib/pythonX.Y too
    re.compile(r"^File .*[/\\](?:site|dist)-packages[/\\]"),
    re.compile(r"^File .*[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]"),
)
_DEFAULT_REPR_RE = re.compile(r"^<[\w.]+ object(?: at 0x[0-9a-f]+)?>$")
_ARGS_RE = re.compile(r"(, in [\w.<>]+)\(.*\)$")


@dataclass(frozen=True)
class LLMText:
    """A rendering: the text, and whether (and where) output was cut short."""

    text: str
    truncated: bool = False
    full_output: Path | None = None
    """The file holding everything, when the text was cut (``None`` if nothing was cut)."""

    def __str__(self) -> str:
        return self.text


def _relative(path: Path, work_dir: Path | None) -> str:
    """``path`` relative to the work dir when it is inside it, else as given."""
    if work_dir is not None:
        try:
            return Path(os.path.relpath(path, work_dir)).as_posix()
        except ValueError:  # another drive on Windows
            pass
    return str(path)


def shell_exit_status(execution: Execution) -> int | None:
    """The exit status of a failed ``%%bash`` / ``%%sh`` cell, or ``None`` for other failures."""
    error = execution.error
    if error is None or error.ename != "CalledProcessError":
        return None
    if not execution.code.lstrip().startswith(("%%bash", "%%sh", "%%script")):
        return None
    match = _EXIT_STATUS_RE.search(error.evalue)
    return int(match.group(1)) if match else 1


def exit_code(execution: Execution) -> int:
    """A process-style exit code for agent frameworks that expect one.

    0 when the code ran cleanly, :data:`EXIT_TIMEOUT` when it was stopped at
    its timeout, a failed shell cell's own status, and 1 for anything else.
    """
    if execution.ok:
        return 0
    if execution.status == "timeout":
        return EXIT_TIMEOUT
    return shell_exit_status(execution) or 1


def _is_library_frame(frame: str) -> bool:
    header = frame.lstrip().split("\n", 1)[0]
    return header.startswith("File ") and any(m in header for m in _LIBRARY_MARKERS)


def _short_location(header: str) -> str:
    """``File <path>:<line>, in <function>`` without the argument list and the install prefix."""
    header = _ARGS_RE.sub(r"\1", header.strip())
    for prefix in _PREFIX_RES:
        shorter = prefix.sub("File ", header, count=1)
        if shorter != header:
            return shorter
    return header


def _short_library_frame(frame: str) -> str:
    """A library frame as one line: its location (the model cannot fix library code)."""
    return _short_location(frame.strip("\n").split("\n", 1)[0])


def _running_at(traceback: str) -> str:
    """Where interrupted code was: the innermost frame's location and line, from plain text."""
    location = arrow = ""
    for line in traceback.split("\n"):
        if line.startswith(("Cell In[", "File ")):
            location, arrow = _short_location(line), ""
        elif line.lstrip().startswith("---->") and location:
            arrow = line
    return f"{location}\n{arrow}".strip()


def condense_traceback(frames: Sequence[str], ename: str, evalue: str) -> str:
    """A short, plain-text traceback from IPython's traceback list.

    IPython's list is ``[rule, "<ename>  Traceback ...", frame, ..., "<ename>:
    <evalue>"]`` (a ``SyntaxError`` is one element). Frames of the model's own
    cells stay whole; library frames shrink to location and running line; with
    more than five frames the middle ones are elided.
    """
    clean = [strip_ansi(f) for f in frames]
    if len(clean) >= 3 and clean[0].strip().startswith("---") and "Traceback" in clean[1]:
        body = clean[2:-1]
    else:  # SyntaxError and other single-block tracebacks: already short
        text = "\n".join(c.rstrip("\n") for c in clean).strip("\n")
        return _cap(text or f"{ename}: {evalue}", MAX_ERROR_CHARS)
    shown = [_short_library_frame(f) if _is_library_frame(f) else f.strip("\n") for f in body]
    if len(shown) > _FRAMES_KEPT_HEAD + _FRAMES_KEPT_TAIL:
        skipped = len(shown) - _FRAMES_KEPT_HEAD - _FRAMES_KEPT_TAIL
        shown = [
            *shown[:_FRAMES_KEPT_HEAD],
            f"... {skipped} more frame{'s' if skipped > 1 else ''} ...",
            *shown[-_FRAMES_KEPT_TAIL:],
        ]
    last = f"{ename}: {evalue}" if evalue else ename
    text = "\n".join(["Traceback (most recent call last):", *shown, last])
    return _cap(text, MAX_ERROR_CHARS)


def _cap(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, keeping its start and its (most telling) end."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit:,} characters cut ...]\n{text[-tail:]}"


def _error_text(execution: Execution) -> str:
    error = execution.error
    if error is None:
        return ""
    status = shell_exit_status(execution)
    if status is not None:
        return f"[the shell command exited with status {status}]"
    if execution.status in ("timeout", "died"):
        text = f"{error.ename}: {error.evalue}"
        where = _running_at(error.traceback)  # CellError tracebacks are plain text already
        if where:
            text += "\nIt was stopped at:\n" + _cap(where, 800)
        return text
    for output in reversed(execution.outputs):
        if output.get("output_type") == "error":
            traceback = output.get("traceback") or []
            return condense_traceback(list(traceback), error.ename, error.evalue)
    plain = error.traceback.strip()
    return _cap(plain + f"\n{error}" if plain else str(error), MAX_ERROR_CHARS)


def denied_connections(
    connections: Sequence[Connection], policy: NetworkPolicy | None = None
) -> list[str]:
    """One line per host the network policy refused, first refusal of each host, in order.

    ``connection to evil.example:443 denied by the session's network policy
    (allowed: pypi.org, files.pythonhosted.org): not in the allow list``: the
    words of the proxy's own refusal, so the model reads the same thing whether
    or not the code let the error through.
    """
    first: dict[str, Connection] = {}
    for connection in connections:
        if connection.decision == "denied":
            first.setdefault(connection.host, connection)
    rules = f" ({policy.describe()})" if policy is not None else ""
    lines = [
        f"connection to {c.host}:{c.port} denied by the session's network policy{rules}: {c.reason}"
        for c in list(first.values())[:MAX_DENIED_HOSTS]
    ]
    more = len(first) - len(lines)
    if more > 0:
        lines.append(f"... and {more} more host{'s' if more > 1 else ''} denied")
    return lines


def _data_text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def _walk(execution: Execution) -> Iterator[tuple[Mapping[str, Any], Result | None]]:
    """Each stream and rich output in the order the kernel sent them, a rich one with its
    :class:`Result` (its saved files), a stream with None."""
    rich = iter(execution.results)
    for output in execution.outputs:
        kind = output.get("output_type")
        if kind == "stream":
            yield output, None
        elif kind in ("execute_result", "display_data"):
            yield output, next(rich, None)


def _is_stream(output: Mapping[str, Any]) -> bool:
    return output.get("output_type") == "stream"


def _body_parts(execution: Execution, work_dir: Path | None) -> list[str]:
    """Streams and rich outputs, in the order the kernel sent them."""
    parts: list[str] = []
    for output, result in _walk(execution):
        if _is_stream(output):
            parts.append(strip_ansi(_data_text(output.get("text", ""))))
        else:
            data: Mapping[str, Any] = output.get("data", {})
            images = [m for m in MODEL_IMAGES if m in data]
            if images:
                saved = result.files.get(images[0]) if result is not None else None
                where = f" saved to {_relative(saved, work_dir)}" if saved else ""
                parts.append(f"[{images[0]}{where}]\n")
            elif "text/plain" in data:
                plain = strip_ansi(_data_text(data["text/plain"])).rstrip("\n")
                saved_files = result.files if result is not None else {}
                notes = [
                    f"[{mime} saved to {_relative(path, work_dir)}]"
                    for mime, path in saved_files.items()
                ]
                if not (notes and _DEFAULT_REPR_RE.match(plain)):  # "<...HTML object>" says nothing
                    notes.insert(0, plain)
                parts.append("\n".join(notes) + "\n")
            elif data:
                mime = next(iter(data))
                saved = result.files.get(mime) if result is not None else None
                where = f" saved to {_relative(saved, work_dir)}" if saved else ""
                parts.append(f"[{mime}{where}]\n")
    return parts


def _ag2_parts(execution: Execution) -> list[str]:
    """Outputs as AG2's IPython executor words them: text as is, each image and HTML output
    as ``Image data saved to <path>`` / ``HTML data saved to <path>``, other data as JSON."""
    parts: list[str] = []
    for output, result in _walk(execution):
        if _is_stream(output):
            parts.append(strip_ansi(_data_text(output.get("text", ""))))
            continue
        files = result.files if result is not None else {}
        for mime, value in dict(output.get("data", {})).items():
            saved = files.get(mime)
            if mime == "text/plain":
                parts.append(strip_ansi(_data_text(value)))
            elif saved is not None and mime.startswith("image/"):
                parts.append(f"Image data saved to {Path(saved).absolute()}")
            elif saved is not None and mime == "text/html":
                parts.append(f"HTML data saved to {Path(saved).absolute()}")
            else:
                parts.append(json.dumps(value))
    return [part if part.endswith("\n") else part + "\n" for part in parts]


def _written_files(execution: Execution) -> list[Path]:
    """Files the code itself wrote (not the session's copies of rich outputs)."""
    saved = {p for r in execution.results for p in r.files.values()}
    spilled = set(execution.spilled)
    return [p for p in execution.files if p not in saved and p not in spilled]


def _save_full(execution: Execution, text: str, save_dir: Path, work_dir: Path | None) -> Path:
    number = (execution.cell_index + 1) if execution.cell_index is not None else None
    number = number or execution.execution_count or 0
    root = work_dir if work_dir is not None else save_dir
    relative = os.path.relpath(save_dir / output_file_name(number - 1, "output", ".txt"), root)
    path = confined_path(root, relative)
    base = root.absolute()
    write_bytes(base, path.relative_to(base), text.encode("utf-8"))  # never through a link
    return path


def render(
    execution: Execution,
    *,
    work_dir: str | os.PathLike[str] | None = None,
    max_chars: int = DEFAULT_LLM_CHARS,
    save_dir: str | os.PathLike[str] | None = None,
    network: NetworkPolicy | None = None,
    style: Literal["model", "ag2"] = "model",
) -> LLMText:
    """The text a model should see for ``execution``.

    ``style="ag2"`` words the outputs as AG2's own IPython executor does
    (``Image data saved to <absolute path>``, an empty string when there is
    no output), for the AG2 executors' drop-in default; errors, refusals and
    the budget are the same in both styles.

    ``work_dir`` makes file paths relative to it. Output beyond ``max_chars``
    is cut in the middle; the text then names the file holding all of it:
    the session's own overflow file when the stream was already spilled, else
    ``<save_dir>/cell-NNN-output.txt``, written here (inside ``work_dir``). The
    error, the refused connections (``network``: the session's policy, whose
    rules they quote) and the file list are never cut for output.
    """
    if max_chars < 200:
        raise ValueError(f"max_chars must be at least 200, not {max_chars}")
    root = Path(work_dir).absolute() if work_dir is not None else None
    body = "".join(_ag2_parts(execution) if style == "ag2" else _body_parts(execution, root))
    error = _error_text(execution)
    notes = [f"[{line}]" for line in denied_connections(execution.connections, network)]
    if execution.state_lost:
        notes.append("[the kernel was restarted: variables and imports from earlier code are gone]")
    written = _written_files(execution)
    if written:
        listed = [_relative(p, root) for p in written[:MAX_LISTED_FILES]]
        more = len(written) - len(listed)
        notes.append(
            "Files written (relative to the work dir): "
            + ", ".join(listed)
            + (f" and {more} more" if more > 0 else "")
        )

    truncated = execution.truncated
    full: Path | None = None
    if execution.spilled:
        full = execution.spilled[0]
    if len(body) > max_chars:
        truncated = True
        if full is None and save_dir is not None:
            full = _save_full(execution, body, Path(save_dir).absolute(), root)
        head = max_chars * 3 // 5
        tail = max_chars - head
        cut = len(body) - head - tail
        where = f"; all of it is in {_relative(full, root)}" if full else ""
        body = f"{body[:head]}\n[... {cut:,} characters of output cut{where} ...]\n{body[-tail:]}"
    elif execution.truncated and full is not None:
        notes.append(f"[output was truncated; all of it is in {_relative(full, root)}]")

    sections = [s.rstrip("\n") for s in (body, error, *notes) if s.strip()]
    if not sections and not (style == "ag2" and execution.ok):
        sections = ["(no output)" if execution.ok else f"({execution.status}, no output)"]
    return LLMText("\n".join(sections), truncated=truncated, full_output=full)
