"""Kernel messages -> nbformat outputs, the way JupyterLab's output area builds them.

Pure code, no I/O: :class:`CellOutputs` is fed the IOPub messages of one
execution and keeps the outputs a front end would show and save:

* consecutive chunks of the same stream are merged into one output;
* ``\\r`` and ``\\b`` overwrite text as in a terminal, so a progress bar keeps
  only its last state (applied incrementally: cost is per chunk, not per cell);
* ``clear_output(wait=True)`` clears when the next output arrives;
* ``update_display_data`` rewrites every output carrying that ``display_id``,
  and is handed back to the caller for the outputs of earlier cells;
* stream text beyond a budget is not kept: the head and a bounded tail stay in
  the output with a marker, and everything past the head goes to a
  :class:`Spill` (a file, in the session) so host memory stays bounded.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

__all__ = [
    "DEFAULT_MAX_STREAM_CHARS",
    "CellOutputs",
    "Spill",
    "output_from_msg",
    "overwrite_line",
    "stream_text",
    "strip_ansi",
]

DEFAULT_MAX_STREAM_CHARS = 500_000
"""Stream characters kept per cell (head + tail) before the rest is spilled."""

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # two-character escapes
)
_CONTROL_RE = re.compile(r"[\r\n\b]")


def output_from_msg(msg: Mapping[str, Any]) -> dict[str, Any]:
    """The nbformat v4 output for a ``display_data``, ``execute_result`` or ``error`` message.

    Equivalent to ``nbformat.v4.output_from_msg`` for these types, without
    importing nbformat (whose schema validator takes seconds to import).
    """
    kind = msg["header"]["msg_type"]
    content = msg["content"]
    if kind == "error":
        return {
            "output_type": "error",
            "ename": content.get("ename", ""),
            "evalue": content.get("evalue", ""),
            "traceback": list(content.get("traceback", [])),
        }
    output: dict[str, Any] = {
        "output_type": kind,
        "data": dict(content.get("data", {})),
        "metadata": dict(content.get("metadata", {})),
    }
    if kind == "execute_result":
        output["execution_count"] = content.get("execution_count")
    return output


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor moves, hyperlinks)."""
    return _ANSI_RE.sub("", text)


def overwrite_line(line: str) -> str:
    """Apply ``\\r`` (back to column 0) and ``\\b`` (one column back) to a line with no ``\\n``."""
    if "\b" in line:
        buf: list[str] = []
        pos = 0
        for ch in line:
            if ch == "\r":
                pos = 0
            elif ch == "\b":
                pos = max(0, pos - 1)
            else:
                if pos < len(buf):
                    buf[pos] = ch
                else:
                    buf.append(ch)
                pos += 1
        return "".join(buf)
    segments = line.split("\r")
    shown = segments[0]
    for seg in segments[1:]:
        shown = seg + shown[len(seg) :]
    return shown


class _StreamText:
    """The text of one stream output, built chunk by chunk.

    Complete lines are final once their ``\\n`` arrives; only the open last
    line can still be overwritten. It is kept with its cursor column, so a
    ``\\r`` or ``\\b`` arriving in a later chunk acts where a terminal's
    cursor would be, and each chunk edits only the part of the line its
    cursor can reach.
    """

    __slots__ = ("_col", "_done", "_line", "size")

    OPEN_LIMIT = 65_536
    """An unfinished line longer than this is no progress bar: it is made final, so
    a flood without newlines costs linear, not quadratic, time."""

    def __init__(self) -> None:
        self._done: list[str] = []
        self._line = ""  # the open line as shown
        self._col = 0  # the cursor's column in it
        self.size = 0  # characters in completed lines

    def append(self, chunk: str) -> None:
        if self._col == len(self._line) and "\r" not in chunk and "\b" not in chunk:
            text = self._line + chunk
            cut = text.rfind("\n") + 1
            if cut:
                self._done.append(text[:cut])
                self.size += cut
            self._line = text[cut:]
            self._col = len(self._line)
        else:
            self._edit(chunk)
        if len(self._line) > self.OPEN_LIMIT:
            self._done.append(self._line)
            self.size += len(self._line)
            self._line = ""
            self._col = 0

    def _edit(self, chunk: str) -> None:
        # Columns left of ``lo`` cannot be reached by this chunk's cursor moves.
        lo = 0 if "\r" in chunk else max(0, self._col - chunk.count("\b"))
        prefix = self._line[:lo]
        buf = list(self._line[lo:])
        col = self._col - lo
        pos = 0
        for match in _CONTROL_RE.finditer(chunk):
            seg = chunk[pos : match.start()]
            buf[col : col + len(seg)] = seg
            col += len(seg)
            pos = match.end()
            control = match.group()
            if control == "\n":
                line = prefix + "".join(buf) + "\n"
                self._done.append(line)
                self.size += len(line)
                prefix, buf, col = "", [], 0
            elif control == "\r":
                col = 0
            else:
                col = max(0, col - 1)
        seg = chunk[pos:]
        buf[col : col + len(seg)] = seg
        col += len(seg)
        self._line = prefix + "".join(buf)
        self._col = len(prefix) + col

    def value(self) -> str:
        return "".join(self._done) + self._line


class Spill(Protocol):
    """Where stream text beyond the budget goes (the session writes it to a file)."""

    def write(self, name: str, text: str) -> None:
        """Append ``text`` to the full record of stream ``name``."""

    def location(self, name: str) -> str | None:
        """Where the full text of stream ``name`` can be read, for the marker."""


class _Overflow:
    """A stream past the budget: characters counted, a bounded tail kept."""

    __slots__ = ("_tail", "tail_chars", "tail_limit", "total")

    def __init__(self, kept: int, tail_limit: int) -> None:
        self.total = kept
        self.tail_limit = tail_limit
        self._tail: deque[str] = deque()
        self.tail_chars = 0

    def add(self, chunk: str) -> None:
        self.total += len(chunk)
        self._tail.append(chunk)
        self.tail_chars += len(chunk)
        while self.tail_chars - len(self._tail[0]) >= self.tail_limit:
            self.tail_chars -= len(self._tail.popleft())

    def tail(self) -> str:
        text = "".join(self._tail)[-self.tail_limit :]
        # Start the tail on a line boundary when there is one, for readability.
        newline = text.find("\n")
        if 0 <= newline < len(text) - 1:
            text = text[newline + 1 :]
        return text


class CellOutputs:
    """Builds the outputs of one cell from its IOPub messages.

    ``feed(msg)`` returns the event to pass to an ``on_output`` callback (an
    nbformat output dict, a ``stream`` chunk, or a ``clear_output`` /
    ``update_display_data`` pseudo-output), or ``None`` for messages that
    change no output. ``finish()`` returns the final outputs.
    """

    def __init__(
        self, *, max_stream_chars: int = DEFAULT_MAX_STREAM_CHARS, spill: Spill | None = None
    ) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.execution_count: int | None = None
        self.foreign_updates: list[dict[str, Any]] = []
        """Every ``update_display_data`` of this cell, in order, for outputs of earlier cells."""
        self._texts: dict[int, _StreamText] = {}  # id(output dict) -> its text
        self._displays: dict[str, list[dict[str, Any]]] = {}
        self._clear_pending = False
        self._head_limit = max(0, int(max_stream_chars * 0.8))
        self._tail_limit = max(1, max_stream_chars - self._head_limit)
        self._spill = spill
        self._overflow: dict[str, _Overflow] = {}
        self._kept = 0  # stream characters held in completed lines

    # -- feeding -----------------------------------------------------------------

    def feed(self, msg: Mapping[str, Any]) -> dict[str, Any] | None:
        kind = msg["header"]["msg_type"]
        content = msg["content"]
        if kind == "stream":
            self._apply_pending_clear()
            self._add_stream(content["name"], content["text"])
            return {"output_type": "stream", "name": content["name"], "text": content["text"]}
        if kind in ("display_data", "execute_result", "error"):
            self._apply_pending_clear()
            output = output_from_msg(msg)
            if kind == "execute_result":
                self.execution_count = content.get("execution_count", self.execution_count)
            display_id = (content.get("transient") or {}).get("display_id")
            if display_id:
                self._displays.setdefault(display_id, []).append(output)
            self.outputs.append(output)
            return output
        if kind == "update_display_data":
            return self._update_display(content)
        if kind == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
            else:
                self._clear()
            return {"output_type": "clear_output", "wait": bool(content.get("wait"))}
        if kind == "execute_input":
            self.execution_count = content.get("execution_count", self.execution_count)
        return None

    def _add_stream(self, name: str, text: str) -> None:
        overflow = self._overflow.get(name)
        if overflow is not None:
            overflow.add(text)
            if self._spill is not None:
                self._spill.write(name, text)
            return
        last = self.outputs[-1] if self.outputs else None
        if last is None or last["output_type"] != "stream" or last["name"] != name:
            last = {"output_type": "stream", "name": name, "text": ""}
            self.outputs.append(last)
            self._texts[id(last)] = _StreamText()
        stream = self._texts[id(last)]
        before = stream.size
        stream.append(text)
        self._kept += stream.size - before
        if self._kept > self._head_limit:
            self._start_overflow(name)

    def _start_overflow(self, name: str) -> None:
        """The budget is spent: spill what was kept of ``name`` and keep only a tail from now on."""
        kept = "".join(
            self._texts[id(o)].value()
            for o in self.outputs
            if o["output_type"] == "stream" and o["name"] == name
        )
        if self._spill is not None:
            self._spill.write(name, kept)
        # Trim the current output back to the head budget.
        last = self.outputs[-1]
        text = self._texts[id(last)].value()
        excess = self._kept - self._head_limit
        trimmed = _StreamText()
        trimmed.append(text[: max(0, len(text) - excess)])
        self._texts[id(last)] = trimmed
        overflow = _Overflow(0, self._tail_limit)
        overflow.add(text[max(0, len(text) - excess) :])  # the cut-off part starts the tail
        overflow.total = len(kept)  # ... but it was counted in ``kept`` already
        self._overflow[name] = overflow
        # Every other stream of this cell is over budget too from now on.
        for other in ("stdout", "stderr"):
            if other != name and other not in self._overflow:
                others = "".join(
                    self._texts[id(o)].value()
                    for o in self.outputs
                    if o["output_type"] == "stream" and o["name"] == other
                )
                if self._spill is not None and others:
                    self._spill.write(other, others)
                self._overflow[other] = _Overflow(len(others), self._tail_limit)

    @property
    def head_limit(self) -> int:
        """Stream characters of a cell kept whole before the rest is spilled."""
        return self._head_limit

    def add_spilled(self, name: str, chunks: Iterable[str], spill: Spill | None) -> None:
        """Text of stream ``name`` that was kept elsewhere (by the kernel), in order, at the end.

        It goes to the spill after what this cell kept of the stream, and only a
        bounded tail of it is held, so the chunks can add up to any size.
        """
        overflow = self._overflow.get(name)
        if overflow is None:
            kept = "".join(
                self._texts[id(o)].value()
                for o in self.outputs
                if o["output_type"] == "stream" and o["name"] == name
            )
            if spill is not None and kept:
                spill.write(name, kept)
            overflow = self._overflow[name] = _Overflow(len(kept), self._tail_limit)
        for chunk in chunks:
            overflow.add(chunk)
            if spill is not None:
                spill.write(name, chunk)

    def _update_display(self, content: Mapping[str, Any]) -> dict[str, Any] | None:
        display_id = (content.get("transient") or {}).get("display_id")
        if not display_id:
            return None
        data = content.get("data", {})
        metadata = content.get("metadata", {})
        for output in self._displays.get(display_id, ()):
            output["data"] = dict(data)
            output["metadata"] = dict(metadata)
        # Earlier cells may show the same id: Jupyter updates every output showing it.
        self.foreign_updates.append(
            {"display_id": display_id, "data": dict(data), "metadata": dict(metadata)}
        )
        return {
            "output_type": "update_display_data",
            "display_id": display_id,
            "data": data,
            "metadata": metadata,
        }

    def _apply_pending_clear(self) -> None:
        if self._clear_pending:
            self._clear_pending = False
            self._clear()

    def _clear(self) -> None:
        self.outputs = []
        self._texts = {}
        self._displays = {}
        self._overflow = {}
        self._kept = 0

    # -- results -----------------------------------------------------------------

    @property
    def displays(self) -> dict[str, list[dict[str, Any]]]:
        """Outputs of this cell by ``display_id`` (for later updates from other cells)."""
        shown = {id(o) for o in self.outputs}
        return {k: [o for o in v if id(o) in shown] for k, v in self._displays.items()}

    @property
    def truncated(self) -> bool:
        return any(o.total for o in self._overflow.values())

    def finish(self) -> list[dict[str, Any]]:
        """The final outputs: stream text materialised, truncation markers added."""
        for output in self.outputs:
            if output["output_type"] == "stream":
                output["text"] = self._texts[id(output)].value()
        for name, overflow in self._overflow.items():
            if not overflow.tail_chars:
                continue
            where = self._spill.location(name) if self._spill is not None else None
            marker = (
                f"\n[... {name} truncated: {overflow.total:,} characters in all"
                + (f"; full text in {where}" if where else "")
                + " ...]\n"
            )
            tail = _StreamText()
            tail.append(overflow.tail())
            target = next(
                (
                    o
                    for o in reversed(self.outputs)
                    if o["output_type"] == "stream" and o["name"] == name
                ),
                None,
            )
            if target is None:
                target = {"output_type": "stream", "name": name, "text": ""}
                self.outputs.append(target)
            target["text"] += marker + tail.value()
        return self.outputs


def stream_text(outputs: list[dict[str, Any]], name: str) -> str:
    """All text of stream ``name`` in ``outputs``, in order."""
    return "".join(
        o["text"] if isinstance(o["text"], str) else "".join(o["text"])
        for o in outputs
        if o.get("output_type") == "stream" and o.get("name") == name
    )
