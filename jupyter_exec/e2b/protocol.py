"""The E2B code interpreter's wire format: our outputs as the JSON lines ``run_code`` reads.

``POST /execute`` answers with one JSON object per line, each with a
``type`` the SDK dispatches on::

    {"type": "stdout", "text": "...", "timestamp": <ns>}     (and "stderr")
    {"type": "result", "text": ..., "png": ..., "is_main_result": true}
    {"type": "error", "name": ..., "value": ..., "traceback": ...}
    {"type": "number_of_executions", "execution_count": 3}

This module turns the nbformat outputs a session streams (its ``on_output``
events) into those objects, and nothing else: no I/O, so the mapping is
tested without a server. As E2B's server does, a string result's text loses
its quotes (the notebook keeps the kernel's own ``'bar'``). Formats the SDK
has no field for go into ``extra`` (which ``Result.formats()`` lists).
``chart`` and ``data`` are filled from the formats a sandbox's kernels add for
matplotlib figures and DataFrames (:mod:`jupyter_exec.e2b.kernel_formats`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from jupyter_exec.e2b.kernel_formats import CHART_MIME, DATA_MIME
from jupyter_exec.engine.mime import joined
from jupyter_exec.engine.outputs import strip_ansi

__all__ = ["MIME_FIELDS", "count_line", "encode", "error_line", "event_lines", "result_line"]

MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
    DATA_MIME: "data",
    CHART_MIME: "chart",
}
"""MIME types the SDK's ``Result`` has a field for, and that field's name: ``chart`` and
``data`` come from our in-kernel formats (:mod:`jupyter_exec.e2b.kernel_formats`) or, as
``e2b/chart`` and ``e2b/data``, from E2B's own kernel."""


def _unquoted(text: str) -> str:
    """A string result's text without its quotes, as E2B's server sends it (``'a'`` -> ``a``;
    Deno quotes a string holding both quote marks with backticks)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    return text


def encode(line: dict[str, Any]) -> bytes:
    """One protocol line: compact JSON and a newline (never an empty line: the SDK parses each)."""
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def result_line(data: dict[str, Any], *, main: bool) -> dict[str, Any]:
    """A ``result`` line for one display or execute result's MIME bundle."""
    line: dict[str, Any] = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    for mime, value in data.items():
        field = MIME_FIELDS.get(mime)
        value = joined(value)
        if field is None:
            extra[mime] = value
        elif field in ("png", "jpeg", "pdf") and isinstance(value, str):
            line[field] = value.replace("\n", "")  # base64 as one string
        elif field == "text" and isinstance(value, str):
            line[field] = _unquoted(value)
        else:
            line[field] = value
    if extra:
        line["extra"] = extra
    return line


def _stream(name: str, text: str) -> dict[str, Any]:
    return {"type": "stderr" if name == "stderr" else "stdout", "text": text,
            "timestamp": time.time_ns()}  # fmt: skip


def event_lines(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The protocol lines for one ``on_output`` event (none for clear / update events)."""
    kind = event.get("output_type")
    if kind == "stream":
        return [_stream(str(event.get("name")), str(event.get("text", "")))]
    if kind in ("display_data", "execute_result"):
        return [result_line(dict(event.get("data") or {}), main=kind == "execute_result")]
    if kind == "error":
        traceback = event.get("traceback") or []
        text = "\n".join(traceback) if isinstance(traceback, list) else str(traceback)
        return [
            {
                "type": "error",
                "name": str(event.get("ename", "")),
                "value": str(event.get("evalue", "")),
                "traceback": strip_ansi(text),
            }
        ]
    return []


def count_line(execution_count: int | None) -> dict[str, Any] | None:
    """The ``number_of_executions`` line, when the kernel counted this execution."""
    if execution_count is None:
        return None
    return {"type": "number_of_executions", "execution_count": execution_count}


def error_line(name: str, value: str, traceback: str = "") -> dict[str, Any]:
    """An ``error`` line the kernel did not send (a timeout, a dead kernel)."""
    return {"type": "error", "name": name, "value": value, "traceback": traceback}
