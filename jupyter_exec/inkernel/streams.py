"""Code that runs inside the kernel: a cell's stream output past its budget goes to a file there.

Why in the kernel: the host receives every byte a kernel prints as ZeroMQ
messages, and a single ``print`` of 1 GiB is a 1 GiB message the host must
hold, decode and copy (gigabytes of host memory) before it can decide to keep
only a head and a tail. Here the decision is made where the text is made:
past its budget the text never leaves the kernel; it is appended to a file in
the work dir (which host and kernel share, locally or through a Docker bind
mount), and the host joins that file to the cell's spill file afterwards.

The guard acts only on cells whose ``execute_request`` metadata carries
:data:`KEY` (a session's cells); a person's cells in a shared kernel, and any
other client's, pass through untouched. The host sends this module's source
with the other helpers (:func:`install_entry`); it needs only the standard library and IPython, and
it leaves no name in the user's namespace.

Not covered: text written by threads after their cell ended (it passes
through), and output that subprocesses write straight to the kernel's file
descriptors.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the host's; a kernel never imports it)
    from jupyter_exec.inkernel import Install

MODULE = "_jupyter_exec_guard"
"""The module's name in the kernel's ``sys.modules``."""
KEY = "jupyter_exec"
"""The ``execute_request`` metadata key. Its value::

    {"budget": stream characters sent per cell,
     "files": {stream name: relative path for the rest},
     "large": {"limit": characters, "prefix": relative path, "extensions": {mime: ext},
               "binary": [base64 mime types]}}

and, on an output whose data the guard saved, ``{"saved": {mime: relative path}}``.
"""

_STREAMS = ("stdout", "stderr")


class StreamGuard:
    """Per cell: passes ``budget`` characters of stream text through, then writes to files.

    The streams' ``write`` is wrapped for the length of a cell only, from
    ``pre_run_cell`` on: IPython 9 itself swaps ``write`` around each cell (to
    keep output in its history) and puts back what it found afterwards, so a
    wrapper installed once would be dropped after the first cell.
    """

    def __init__(self, shell: Any, root: str) -> None:
        self.shell = shell
        self.root = root  # the kernel's working directory when installed: the work dir
        self.left: int | None = None  # None: pass everything through
        self.files: dict[str, str] = {}
        self.handles: dict[str, Any] = {}
        self.wrapped: dict[str, tuple[Any, Any]] = {}  # stream -> (its write, ours)
        self.wrote: set[str] = set()  # streams written through ours in this cell
        self.large: dict[str, Any] = {}
        self.saved = 0
        self.unwrap: list[Any] = []  # how to undo the display hooks of this cell

    def hook(self) -> None:
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)

    def pre_run_cell(self, *_: Any) -> None:
        self.post_run_cell()
        spec = self._spec()
        if spec is None:
            return
        budget, files = spec.get("budget"), spec.get("files")
        if not (isinstance(budget, int) and budget >= 0 and isinstance(files, dict)):
            return
        self.left = budget
        self.files = {k: v for k, v in files.items() if k in _STREAMS and isinstance(v, str)}
        for name in self.files:
            stream = getattr(sys, name)
            original = stream.write

            def write(text: Any, _name: str = name, _original: Any = original) -> Any:
                return self.write(_name, _original, text)

            stream.write = write
            self.wrapped[name] = (original, write)
        large = spec.get("large")
        if isinstance(large, dict) and isinstance(large.get("limit"), int):
            self.large, self.saved = large, 0
            self._wrap_displays()

    def _wrap_displays(self) -> None:
        """Rich outputs past the limit are saved here; the message carries a note instead."""
        publisher, hook = self.shell.display_pub, self.shell.displayhook
        publish, write_format = publisher.publish, getattr(hook, "write_format_data", None)

        def publish_small(data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
            data, metadata = self.shrink(data, metadata)
            return publish(data, metadata, *args, **kwargs)

        publisher.publish = publish_small
        self.unwrap.append(lambda: setattr(publisher, "publish", publish))
        if write_format is not None:

            def write_small(format_dict: Any, md_dict: Any = None) -> Any:
                return write_format(*self.shrink(format_dict, md_dict))

            hook.write_format_data = write_small
            self.unwrap.append(lambda: setattr(hook, "write_format_data", write_format))

    def shrink(self, data: Any, metadata: Any) -> tuple[Any, Any]:
        limit = self.large.get("limit")
        if not isinstance(data, dict) or not isinstance(limit, int):
            return data, metadata
        big = [m for m, v in data.items() if isinstance(v, (str, bytes)) and len(v) > limit]
        if not big:
            return data, metadata
        data, saved, notes = dict(data), {}, []
        for mime in big:
            self.saved += 1
            ext = self.large.get("extensions", {}).get(mime, ".bin")
            relative = f"{self.large.get('prefix', 'large')}-{self.saved}{ext}"
            value = data[mime]
            if isinstance(value, str):
                value = (
                    base64.b64decode(value)
                    if mime in self.large.get("binary", ())
                    else value.encode("utf-8", "surrogatepass")
                )
            path = os.path.join(self.root, relative)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(value)
            except OSError:
                continue  # not saved here: the output goes to the host whole, as without us
            del data[mime]
            saved[mime] = relative
            notes.append(f"{mime} ({len(value):,} bytes) saved as {relative}")
        if not saved:
            return data, metadata
        data.setdefault("text/plain", "[" + "; ".join(notes) + "]")
        image = next((r for m, r in saved.items() if m.startswith("image/")), None)
        if image is not None and "text/html" not in data:
            data["text/html"] = f'<img src="{image}" alt="{json.dumps(notes)[1:-1]}">'
        metadata = dict(metadata or {})
        metadata[KEY] = {"saved": saved}
        return data, metadata

    def post_run_cell(self, *_: Any) -> None:
        for name, (original, ours) in self.wrapped.items():
            stream = getattr(sys, name)
            # What the kernel buffered goes out before the cell ends. Only a stream the
            # cell wrote to: ipykernel's flush is two hops to its IO thread (0.25 ms each,
            # half a millisecond on every silent cell), and the kernel flushes both again
            # before its reply.
            if name in self.wrote and hasattr(stream, "flush"):
                stream.flush()
            if stream.write is ours:
                stream.write = original
        self.wrapped = {}
        self.wrote = set()
        for undo in self.unwrap:
            undo()
        self.unwrap, self.large = [], {}
        self.close()

    def write(self, name: str, original: Any, text: Any) -> Any:
        self.wrote.add(name)
        left = self.left
        if left is None or not isinstance(text, str) or name not in self.files:
            return original(text)
        size = len(text)
        if left > 0:
            head = text[:left]
            self.left = left - len(head)
            original(head)
            text = text[len(head) :]
            if not text:
                return size
        handle = self.handles.get(name)
        if handle is None:
            path = os.path.join(self.root, self.files[name])
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                handle = open(path, "a", encoding="utf-8", errors="surrogatepass")  # noqa: SIM115
            except OSError:
                # Nowhere to keep it (a folder this uid may not write, a full disk): the text
                # goes to the host as it would without the guard, and nothing is lost.
                del self.files[name]
                original(text)
                return size
            self.handles[name] = handle
        handle.write(text)
        return size

    def close(self) -> None:
        self.left = None
        for handle in self.handles.values():
            with contextlib.suppress(OSError):
                handle.close()
        self.handles = {}
        self.files = {}

    def _spec(self) -> dict[str, Any] | None:
        kernel = getattr(self.shell, "kernel", None)
        if kernel is None:
            return None
        try:
            parent = kernel.get_parent("shell")
        except TypeError:  # older ipykernel: get_parent() takes no channel
            parent = kernel.get_parent()
        except AttributeError:
            parent = getattr(kernel, "_parent_header", None)
        spec = ((parent or {}).get("metadata") or {}).get(KEY)
        return spec if isinstance(spec, dict) else None


def install(probe: str) -> None:
    """Hook this kernel's streams once; ``probe`` is a file the host made in the work dir.

    Finding the probe proves that the kernel's working directory is the host's
    work dir (not so for a remote kernel, or one that changed directory), so
    files written here are files the host can read; without it, nothing is hooked.
    """
    if not os.path.isfile(probe):
        raise RuntimeError("jupyter-exec: the kernel does not share the session's work dir")
    shell = sys.modules["IPython"].get_ipython()
    guard = getattr(shell, "_jupyter_exec_guard", None)
    if guard is None:
        guard = StreamGuard(shell, os.getcwd())
        guard.hook()
        shell._jupyter_exec_guard = guard
    guard.root = os.getcwd()


def install_entry(probe: str) -> Install:
    """The guard as an entry of the host's batch of installs (:mod:`jupyter_exec.inkernel`):
    registered once per kernel process as :data:`MODULE`, then ``install(probe)``."""
    from jupyter_exec.inkernel import Install  # on the host only: see the loader

    return Install("guard", __file__, MODULE, f"install({probe!r})")
