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
  :class:`Spill` (a file, in the session) so host memory stays bounded;
* what the kernel sends is bounded on the way in: data or metadata nested more
  than :data:`MAX_OUTPUT_DEPTH` levels deep is replaced by a note naming the
  limit (so saving the notebook can never fail on it), and with a
  :class:`~jupyter_exec.network.redact.Redactor` every output and every event
  is redacted before anyone sees it (stream text that may be the start of a
  secret is held back until the next chunk: :meth:`CellOutputs.release`).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_exec.engine.widget_capture import OutputCaptures

if TYPE_CHECKING:
    from jupyter_exec.network.redact import Redactor

__all__ = [
    "DEFAULT_MAX_STREAM_CHARS",
    "MAX_OUTPUT_DEPTH",
    "CellOutputs",
    "Spill",
    "bounded",
    "output_from_msg",
    "overwrite_line",
    "placeholder_content",
    "stream_text",
    "strip_ansi",
    "too_deep",
]

DEFAULT_MAX_STREAM_CHARS = 500_000
"""Stream characters kept per cell (head + tail) before the rest is spilled."""

MAX_OUTPUT_DEPTH = 100
"""How deep the containers of one output's data or metadata may nest (the bundle itself is
level 1). Real outputs (a Vega or Plotly spec, a JSON tree) stay far below it; beyond it the
payload is replaced by a note, so the notebook's JSON writer and every reader stay far from
Python's recursion limit."""

TOO_DEEP = (
    f"[output removed: its data was nested more than {MAX_OUTPUT_DEPTH} levels deep, "
    "the limit for a kernel's output]"
)

NOT_A_BUNDLE = "[output removed: the kernel sent an output whose fields have the wrong types]"

_DISPLAY_KINDS = ("display_data", "execute_result", "update_display_data")

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
            "traceback": list(tb) if isinstance(tb := content.get("traceback", []), list) else tb,
        }
    data, metadata = content.get("data", {}), content.get("metadata", {})
    output: dict[str, Any] = {
        "output_type": kind,
        "data": dict(data) if isinstance(data, dict) else data,
        "metadata": dict(metadata) if isinstance(metadata, dict) else metadata,
    }
    if kind == "execute_result":
        output["execution_count"] = content.get("execution_count")
    return output


def too_deep(value: Any, limit: int = MAX_OUTPUT_DEPTH) -> bool:
    """Whether containers (dicts, lists) in ``value`` nest more than ``limit`` deep.

    Walked with a stack of its own, so any depth is measured without recursion.
    """
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
    return False


_CONTAINERS = (dict, list, tuple)


def placeholder_content(kind: str, note: str = TOO_DEEP) -> dict[str, Any]:
    """The content of a ``kind`` message whose own content could not be read at all (too
    deep, or past the receiver's bounds): ``note`` says why."""
    if kind == "stream":
        return {"name": "stderr", "text": note + "\n"}
    if kind == "error":
        return {"ename": "OutputTooDeep", "evalue": note, "traceback": [note]}
    if kind in _DISPLAY_KINDS:
        return {"data": {"text/plain": note}, "metadata": {}}
    return {}


def bounded(output: dict[str, Any]) -> dict[str, Any]:
    """``output`` (changed in place) with a payload nested too deep replaced by a note.

    Also what nbformat requires of the fields a kernel fills: a mime bundle and
    metadata that are objects, an error's texts that are strings.
    """
    if output.get("output_type") == "error":
        traceback = output.get("traceback")
        if not isinstance(traceback, list) or not all(isinstance(t, str) for t in traceback):
            output["traceback"] = [TOO_DEEP if too_deep(traceback) else str(traceback)]
        for key in ("ename", "evalue"):
            if not isinstance(output.get(key), str):
                output[key] = "?"
        return output
    data, metadata = output.get("data"), output.get("metadata")
    if not isinstance(data, dict) or not isinstance(metadata, dict):
        output["data"], output["metadata"] = {"text/plain": NOT_A_BUNDLE}, {}
    elif too_deep(data) or too_deep(metadata):
        output["data"], output["metadata"] = {"text/plain": TOO_DEEP}, {}
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

    ``feed(msg)`` returns the events to pass to an ``on_output`` callback (an
    nbformat output dict, a ``stream`` chunk, or a ``clear_output`` /
    ``update_display_data`` pseudo-output): none for messages that change no
    output. With a ``redactor``, the end of a stream chunk that may begin a
    secret comes with that stream's next chunk (a ``clear_output`` brings it
    first); ``release()`` returns what is still held back once the cell ends;
    ``finish()`` returns the final outputs.
    """

    def __init__(
        self,
        *,
        max_stream_chars: int = DEFAULT_MAX_STREAM_CHARS,
        spill: Spill | None = None,
        redactor: Redactor | None = None,
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
        self._redactor = redactor if redactor else None
        self.captures = OutputCaptures(
            lambda: CellOutputs(max_stream_chars=max_stream_chars, redactor=redactor)
        )
        """What ipywidgets ``Output`` widgets captured (``with out:``): not the cell's."""

    # -- feeding -----------------------------------------------------------------

    def feed(self, msg: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self.captures.feed(msg):  # printed inside an Output widget: the widget's
            return []
        kind = msg["header"]["msg_type"]
        content = msg["content"]
        if kind == "stream":
            return self._feed_stream(content)
        if kind == "execute_input":
            self.execution_count = content.get("execution_count", self.execution_count)
            return []
        if kind == "update_display_data":
            update = self._update_display(content)
            return [update] if update is not None else []
        if kind == "clear_output":
            events = self.release()  # what a stream held back was shown before the clear
            if content.get("wait"):
                self._clear_pending = True
            else:
                self._clear()
            return [*events, {"output_type": "clear_output", "wait": bool(content.get("wait"))}]
        if kind not in ("display_data", "execute_result", "error"):
            return []
        self._apply_pending_clear()
        output = bounded(output_from_msg(msg))
        if self._redactor is not None:
            output = self._redactor.value(output)
        if kind == "execute_result":
            self.execution_count = content.get("execution_count", self.execution_count)
        display_id = (content.get("transient") or {}).get("display_id")
        if display_id:
            self._displays.setdefault(display_id, []).append(output)
        self.outputs.append(output)
        return [output]

    def _feed_stream(self, content: Mapping[str, Any]) -> list[dict[str, Any]]:
        name, text = content.get("name"), content.get("text")
        if not isinstance(name, str) or not isinstance(text, str):
            name, text = "stderr", NOT_A_BUNDLE + "\n"
        if self._redactor is not None:
            text = self._redactor.stream(name, text)
            if not text:  # all of it may be the start of a secret: it waits for the next chunk
                return []
        return [self._stream(name, text)]

    def _stream(self, name: str, text: str) -> dict[str, Any]:
        self._apply_pending_clear()
        self._add_stream(name, text)
        return {"output_type": "stream", "name": name, "text": text}

    def release(self) -> list[dict[str, Any]]:
        """The stream text the redactor held back (it may have been a secret's start and
        was not), added to the outputs now: as events, none when nothing was held."""
        held = self._redactor.release() if self._redactor is not None else []
        return [self._stream(name, text) for name, text in held if text]

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
        redactor = self._redactor
        if redactor is not None:  # (the cell's held text was released when it ended)
            chunks = _redacted_chunks(redactor, name, chunks)
        for chunk in chunks:
            overflow.add(chunk)
            if spill is not None:
                spill.write(name, chunk)

    def _update_display(self, content: Mapping[str, Any]) -> dict[str, Any] | None:
        display_id = (content.get("transient") or {}).get("display_id")
        if not display_id:
            return None
        update = bounded({"data": content.get("data", {}), "metadata": content.get("metadata", {})})
        if self._redactor is not None:
            update = self._redactor.value(update)
        data, metadata = update["data"], update["metadata"]
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
        self.release()
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


def _redacted_chunks(redactor: Redactor, name: str, chunks: Iterable[str]) -> Iterable[str]:
    for chunk in chunks:
        shown = redactor.stream(name, chunk)
        if shown:
            yield shown
    for _, text in redactor.release():
        yield text


def stream_text(outputs: list[dict[str, Any]], name: str) -> str:
    """All text of stream ``name`` in ``outputs``, in order."""
    return "".join(
        o["text"] if isinstance(o["text"], str) else "".join(o["text"])
        for o in outputs
        if o.get("output_type") == "stream" and o.get("name") == name
    )
