"""Code that runs inside an IPython kernel: durable checkpoints of its namespace, and which
names each cell changed.

The host sends this module's source once per kernel process in a silent
request (the batch of :mod:`jupyter_exec.engine.installs`), with a probe file it made
in the work dir (a remote kernel makes its own: :func:`install_in_own_folder`):
finding it proves the kernel's working directory is the host's work dir, so every
path below is relative to that folder (``root``). A fork or a snapshot's kernel
inherits the installed module and its hooks.

* **Changed names.** A ``pre_run_cell`` hook notes the identity of every user
  name; ``post_run_cell`` compares: names bound to another object, new or
  deleted, plus names the cell's code visibly changes in place (``x[k] = v``,
  ``x.a = v``, ``x += v``, ``del x[k]``, ``x.append(...)`` and other well-known
  in-place methods, ``inplace=True``). The host reads them with each cell's
  reply (``user_expressions``: :data:`CHANGED_EXPRESSION`), so it knows them
  after the kernel died. A function that mutates its argument is not seen.
* **Checkpoints** (:func:`save`): every user name to its own file with pickle
  protocol 5, array and DataFrame buffers written out of band, straight from
  their memory (cloudpickle when the kernel has it, so functions and classes
  defined in the session are stored too). Modules are recorded by name.
  Whatever cannot be pickled is skipped and named with the reason. Written
  into a hidden temporary folder, the manifest (sizes, sha256 of every file,
  the environment, the skipped names; a sha256 of its own body) last, then
  renamed into place: a checkpoint folder is complete or absent.
* **Loading** (:func:`load`): the manifest must be the one the host checked
  (its body's sha256), every file is read and checked against it, then every
  value unpickled from what was read, and only then the namespace replaced:
  all or nothing.

It needs only the standard library and IPython.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import importlib
import io
import itertools
import json
import os
import pickle
import platform
import secrets
import shutil
import stat
import sys
import time
import types
from typing import Any

MODULE = "_jupyter_exec_state"
FORMAT = "jupyter-exec-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
PARTIAL = ".partial"
"""Suffix of a checkpoint folder being written (hidden: a leading dot)."""

MUTATORS = frozenset(
    [
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "update",
        "setdefault",
        "popitem",
        "add",
        "discard",
        "sort",
        "reverse",
        "fill",
        "resize",
        "put",
        "itemset",
        "set_index",
        "reset_index",
        "rename",
        "drop",
        "fillna",
    ]
)
"""Method names taken to change their object in place (``rows.append(1)``)."""

CHANGED_EXPRESSION = f"__import__('json').dumps(__import__('sys').modules[{MODULE!r}].changed)"
"""The ``user_expressions`` entry that reads the names the last cell changed."""

root = ""
"""The work dir as this kernel sees it (its working directory when installed)."""
changed: list[str] = []
"""The names the last cell changed (rebound, new, deleted or changed in place)."""
_before: dict[str, tuple[int, type]] = {}
_flush = True
_versions: dict[str, str | None] = {}


class TooLarge(Exception):
    """An automatic checkpoint stopped: the namespace is larger than its budget."""


def install(probe: str) -> None:
    """Remember the work dir and hook the cells (once per process); ``probe`` proves the dir."""
    global root
    if not os.path.isfile(probe):
        raise RuntimeError("jupyter-exec: the kernel does not share the session's work dir")
    root = os.getcwd()
    # The serialiser's own import, made now: the environment capture counts the modules a
    # cell imports, and the pickler jupyter-exec brings is not one of them.
    with contextlib.suppress(ImportError):
        import cloudpickle  # type: ignore[import-untyped, unused-ignore]  # noqa: F401
    shell = _shell()
    if not getattr(shell, "_jupyter_exec_state_hooks", False):
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", _post_run_cell)
        shell._jupyter_exec_state_hooks = True


def install_in_own_folder(probe: str) -> None:
    """:func:`install` for a remote kernel, whose work dir is its own folder on its host: it
    makes the probe there itself (nothing on the session's host can prove that folder) and
    removes it after."""
    with open(probe, "x"):
        pass
    try:
        install(probe)
    finally:
        os.unlink(probe)


def _shell() -> Any:
    return sys.modules["IPython"].get_ipython()


def user_names(shell: Any = None) -> list[str]:
    """The user's names: those ``%who`` shows (IPython's own and ``_``-names left out).

    Asked three times a cell (before it, after it, by its commit) over a namespace that
    grows by a name or two a cell (IPython's ``_i<n>`` and ``_<n>``): the test is the
    cheapest one (0.11 ms for 1,300 names where ``startswith`` took 0.39 ms, at load 9)."""
    shell = shell or _shell()
    hidden = shell.user_ns_hidden
    return sorted(n for n in shell.user_ns if n[:1] != "_" and n not in hidden)


# -- changed names ------------------------------------------------------------------------


def _pre_run_cell(info: Any = None) -> None:
    global _before
    ns = _shell().user_ns
    _before = {n: (id(ns[n]), type(ns[n])) for n in user_names()}


def _post_run_cell(result: Any = None) -> None:
    global changed
    ns = _shell().user_ns
    now = {n: (id(ns[n]), type(ns[n])) for n in user_names()}
    found = {n for n, key in now.items() if _before.get(n) != key}
    found |= set(_before) - set(now)
    code = getattr(getattr(result, "info", None), "raw_cell", "") or ""
    try:
        found |= changed_in_place(code) & set(now)
    except SyntaxError:  # IPython syntax (magics, !commands): its Python form
        with contextlib.suppress(Exception):
            found |= changed_in_place(_shell().transform_cell(code)) & set(now)
    changed = sorted(found)


def changed_in_place(code: str) -> set[str]:
    """Module-level names that ``code`` visibly changes without rebinding them."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = list(getattr(node, "targets", None) or [getattr(node, "target", None)])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            inplace = any(
                k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords
            )
            if node.func.attr in MUTATORS or inplace:
                targets = [node.func.value]
        for target in targets:
            base = target
            while isinstance(base, ast.Attribute | ast.Subscript | ast.Starred):
                base = base.value
            whole = isinstance(node, ast.AugAssign | ast.Call)  # x += v, x.append(v)
            if isinstance(base, ast.Name) and (base is not target or whole):
                names.add(base.id)
    return names


# -- saving -------------------------------------------------------------------------------


def save(
    relative: str, meta: dict[str, Any], max_bytes: int = 0, flush: bool = True
) -> dict[str, Any]:
    """Write the namespace to ``root/relative`` (a new folder); a summary for the host.

    ``max_bytes`` > 0: give up (nothing written) once the files pass it. ``flush``:
    every file reaches the disk (fsync) before the folder takes its name; without it
    (automatic checkpoints, against kernel deaths, which keep the page cache) a power
    cut may leave the checkpoint damaged, which its checksums then refuse.
    """
    global _flush
    _flush = flush
    target = os.path.join(root, relative)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    for stale in os.listdir(parent):  # a write cut short (the kernel died): never read, gone
        if stale.startswith(".") and stale.endswith(PARTIAL):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    if os.path.lexists(target):
        raise FileExistsError(f"jupyter-exec: a checkpoint exists at {relative}")
    temp = os.path.join(parent, f".{name}.{secrets.token_hex(4)}{PARTIAL}")
    os.mkdir(temp, 0o700)  # its pickles are its user's alone
    started = time.perf_counter()
    try:
        body = _write_all(temp, meta, max_bytes)
        digest = _write_manifest(temp, body)
        os.rename(temp, target)
        _fsync_dir(parent)
    except TooLarge:
        shutil.rmtree(temp, ignore_errors=True)
        return {"too_large": max_bytes}
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return {
        "names": [v["name"] for v in body["variables"]],
        "skipped": {s["name"]: s["reason"] for s in body["skipped"]},
        "size": sum(v.get("size", 0) for v in body["variables"]),
        "seconds": round(time.perf_counter() - started, 6),
        "sha256": digest,
    }


def _write_all(folder: str, meta: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    ns = _shell().user_ns
    variables: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    modules: set[str] = set()
    total = 0
    if max_bytes and estimate() > max_bytes:
        raise TooLarge(f"the namespace is larger than {max_bytes} bytes")
    dumps, serialiser = _serialiser()
    for number, name in enumerate(user_names()):
        value = ns[name]
        if isinstance(value, types.ModuleType):
            if getattr(value, "__spec__", None) is None:  # made at run time: no import finds it
                reason = "a module made at run time cannot be imported again"
                skipped.append({"name": name, "type": "module", "reason": reason})
                continue
            variables.append({"name": name, "kind": "module", "module": value.__name__})
            modules.add(value.__name__.partition(".")[0])
            continue
        try:
            used: set[str] = set()
            parts = dumps(value, used)
        except Exception as exc:  # whatever the object's own reducer raises
            reason = f"{type(exc).__name__}: {exc}".strip()
            skipped.append({"name": name, "type": _type_name(value), "reason": reason[:300]})
            continue
        file = f"v{number:05d}.pkl"
        size, digest = _write_file(os.path.join(folder, file), parts)
        total += size
        if max_bytes and total > max_bytes:
            raise TooLarge(f"the namespace passed {max_bytes} bytes")
        modules |= used
        variables.append(
            {
                "name": name,
                "kind": "pickle",
                "file": file,
                "size": size,
                "sha256": digest,
                "parts": [len(memoryview(p)) for p in parts],
                "type": _type_name(value),
            }
        )
    libraries = {m: _version(m) for m in sorted(modules) if _third_party(m)}
    return {
        **meta,
        "format": FORMAT,
        "version": VERSION,
        "created": time.time(),
        "environment": {
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "serialiser": serialiser,
            "libraries": {k: v for k, v in libraries.items() if v is not None},
        },
        "variables": variables,
        "skipped": skipped,
    }


def estimate() -> int:
    """A quick lower bound of the namespace's size in bytes (arrays and frames counted fully)."""
    ns = _shell().user_ns
    total = 0
    for name in user_names():
        value = ns[name]
        with contextlib.suppress(Exception):
            usage = getattr(value, "memory_usage", None)
            if callable(usage) and hasattr(value, "columns"):  # a DataFrame
                total += int(usage(index=True, deep=False).sum())
                continue
            nbytes = getattr(value, "nbytes", None)
            total += nbytes if isinstance(nbytes, int) else sys.getsizeof(value)
    return total


def _serialiser() -> tuple[Any, dict[str, str]]:
    """``dumps(value, modules) -> [pickle stream, out-of-band buffers...]``, and its name."""
    try:
        import cloudpickle  # type: ignore[import-untyped, unused-ignore]

        base: Any = cloudpickle.CloudPickler
        about = {"name": "cloudpickle", "version": str(cloudpickle.__version__)}
    except ImportError:
        base, about = pickle.Pickler, {"name": "pickle", "version": str(pickle.HIGHEST_PROTOCOL)}
    plain = base is pickle.Pickler

    def dumps(value: Any, modules: set[str]) -> list[Any]:
        buffers: list[Any] = []
        stream = io.BytesIO()

        class Pickler(base):  # type: ignore[misc]
            def reducer_override(self, obj: Any) -> Any:
                owner = obj if isinstance(obj, type | types.FunctionType) else type(obj)
                module = getattr(owner, "__module__", None) or ""
                if plain and module == "__main__":
                    raise pickle.PicklingError(
                        f"{owner.__qualname__} is defined in the session; install cloudpickle "
                        "in the kernel to store it"
                    )
                modules.add(module.partition(".")[0])
                parent = getattr(super(), "reducer_override", None)
                return NotImplemented if parent is None else parent(obj)

        Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(value)
        return [stream.getbuffer(), *(b.raw() for b in buffers)]

    return dumps, about


def _write_file(path: str, parts: list[Any]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "xb") as f:
        for part in parts:
            view = memoryview(part).cast("B")
            digest.update(view)
            f.write(view)
            size += len(view)
        if _flush:
            f.flush()
            os.fsync(f.fileno())
    return size, digest.hexdigest()


def _write_manifest(folder: str, body: dict[str, Any]) -> str:
    """Write the manifest (the host stamps and signs it next); the sha256 of its body."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    text = json.dumps({"sha256": digest, "body": body})
    with open(os.path.join(folder, MANIFEST), "x", encoding="utf-8") as f:
        f.write(text)
        if _flush:
            f.flush()
            os.fsync(f.fileno())
    _fsync_dir(folder)
    return digest


def _fsync_dir(path: str) -> None:
    if _flush:
        fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_path(path: str, flags: int) -> None:
    """fsync ``path`` through a descriptor opened with ``flags``; one that cannot be opened
    (removed meanwhile, a link under ``O_NOFOLLOW``) is skipped. The generations' writer
    syncs its files with it too."""
    with contextlib.suppress(OSError):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _third_party(module: str) -> bool:
    return bool(module) and module not in sys.stdlib_module_names and module != "__main__"


def _version(module: str) -> str | None:
    found = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(found, str):
        return found
    if module not in _versions:  # a search of every installed distribution: once
        _versions[module] = None
        with contextlib.suppress(Exception):
            from importlib import metadata

            _versions[module] = metadata.version(module)
    return _versions[module]


def environment(libraries: list[str]) -> dict[str, Any]:
    """This kernel's Python and the versions of ``libraries`` (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in libraries:
        try:
            importlib.import_module(name)
        except Exception:
            found[name] = None
            continue
        found[name] = _version(name)
    return {"python": platform.python_version(), "libraries": found}


def discard(relative: str) -> None:
    """Remove the checkpoint folder ``root/relative`` (an automatic one now superseded)."""
    target = os.path.join(root, relative)
    if os.path.isdir(target) and not os.path.islink(target):
        parent, name = os.path.split(target)
        doomed = os.path.join(parent, f".{name}.{secrets.token_hex(4)}{PARTIAL}")
        os.rename(target, doomed)  # gone from the listing at once
        shutil.rmtree(doomed, ignore_errors=True)


# -- loading ------------------------------------------------------------------------------


def load(relative: str, digest: str) -> dict[str, Any]:
    """Replace the user's namespace with the checkpoint at ``root/relative``, all or nothing.

    ``digest`` is the sha256 of the manifest body the host checked (its MAC, its
    origin): the body read here must be that one, and every file is read into
    memory, then hashed and compared, then unpickled from that same memory, so
    nothing swapped on disk since the host's check is ever unpickled.
    """
    folder = _open_folder(relative)
    try:
        with os.fdopen(_open_file(folder, MANIFEST), "rb") as f:
            body = json.loads(f.read())["body"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        if hashlib.sha256(canonical.encode()).hexdigest() != digest:
            raise ValueError("the checkpoint's manifest changed on disk after the host checked it")
        blobs: dict[str, tuple[bytearray, list[int]]] = {}
        for entry in body["variables"]:
            if entry["kind"] != "pickle":
                continue
            data = bytearray(entry["size"])  # read into once: arrays come back writable, no copy
            with os.fdopen(_open_file(folder, entry["file"]), "rb") as f:
                got = f.readinto(data)
                longer = bool(f.read(1))
            if got != len(data) or longer:
                raise _damaged(entry)
            blobs[entry["name"]] = (data, entry["parts"])
    finally:
        os.close(folder)
    _check_hashes(body["variables"], blobs)
    values: dict[str, Any] = {}
    for entry in body["variables"]:
        name = entry["name"]
        if entry["kind"] == "module":
            values[name] = importlib.import_module(entry["module"])
            continue
        data, sizes = blobs.pop(name)
        view, offsets = memoryview(data), [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        chunks = [view[a:b] for a, b in itertools.pairwise(offsets)]
        values[name] = pickle.loads(chunks[0], buffers=chunks[1:])
    shell = _shell()
    for name in user_names(shell):
        del shell.user_ns[name]
    shell.user_ns.update(values)
    return {"names": sorted(values)}


def _damaged(entry: dict[str, Any]) -> ValueError:
    return ValueError(
        f"the checkpoint is damaged: {entry['file']} ({entry['name']}) does not match its checksum"
    )


def _check_hashes(
    variables: list[dict[str, Any]], blobs: dict[str, tuple[bytearray, list[int]]]
) -> None:
    """Every file's sha256, from the memory it will be unpickled from, side by side (hashlib
    lets go of the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    entries = [e for e in variables if e["kind"] == "pickle"]
    workers = max(1, min(len(entries), os.cpu_count() or 1, 4))
    with ThreadPoolExecutor(workers, thread_name_prefix="jx-hash") as pool:
        digests = pool.map(lambda e: hashlib.sha256(blobs[e["name"]][0]).hexdigest(), entries)
        for entry, digest in zip(entries, digests, strict=True):
            if digest != entry["sha256"]:
                raise _damaged(entry)


def _open_folder(relative: str) -> int:
    """``root/relative`` opened one component at a time, no link followed (another kernel
    sharing the work dir may have planted one since the host checked)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in relative.split("/"):
        try:
            if part in ("", ".", ".."):
                raise ValueError(f"the checkpoint's path {relative!r} is not a plain one")
            following = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
        except OSError as exc:
            raise _refusal(part, exc) from None
        finally:
            os.close(fd)
        fd = following
    return fd


def _open_file(folder: int, name: str) -> int:
    """A regular file of the checkpoint's folder: never through a link, never a FIFO."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"the checkpoint names a file {name!r} outside its folder")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        raise _refusal(name, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"the checkpoint's {name} is not a regular file; refusing to read it")
    return fd


def _refusal(name: str, exc: OSError) -> Exception:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return ValueError(
            f"the checkpoint's {name} is a symbolic link or not what it should be (planted?); "
            "refusing to follow it"
        )
    return exc
