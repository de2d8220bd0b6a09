"""Durable checkpoints on disk, seen from the host: find, check, list and copy them.

The kernel writes a checkpoint (:mod:`jupyter_exec.inkernel.state`) into the
session's ``.<name>_checkpoints/<checkpoint>/`` folder (a hidden name, see
:func:`jupyter_exec.boundary.naming.checkpoints_folder`) in the work dir: one file
per variable and ``manifest.json``, written last and then the folder renamed
into place. The kernel is the untrusted side, so the host never unpickles
anything: it only reads the manifest and hashes files, through
:mod:`jupyter_exec.boundary.paths` (no link is followed, nothing but regular files is
read). Once the kernel is done, the host stamps the manifest with the
kernel's origin (the backend that ran it, as the host knows it) and signs it
with its own key (:mod:`jupyter_exec.boundary.trust`): the MAC covers the
body, which holds every file's sha256 and the origin. A checkpoint is refused
as a whole, with :class:`CheckpointError` naming the fault, when its manifest
is missing, truncated, unsigned, signed with another key or does not match its
own checksum, or a file is missing or differs from the manifest (size,
sha256)::

    manifest.json   {"sha256": <of the body, canonical JSON>,
                     "mac": <HMAC-SHA256 of the body, the host's key>, "body": {
                      "format", "version", "name", "session", "cell_index", "created",
                      "origin": {"backend": "local" | "docker" | "remote", "image"?},
                      "environment": {"python", "serialiser", "libraries": {name: version}},
                      "variables": [{"name", "kind": "pickle", "file", "size", "sha256"},
                                    {"name", "kind": "module", "module"}],
                      "skipped": [{"name", "type", "reason"}], "undone": [...]}}
    v00000.pkl ...  pickle protocol 5, then its out-of-band buffers, back to back
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_exec.boundary import trust as checkpoint_trust
from jupyter_exec.boundary.naming import checkpoints_folder
from jupyter_exec.boundary.paths import Folder, write_all
from jupyter_exec.exceptions import CheckpointError, StorageError, WorkDirError
from jupyter_exec.inkernel.state import FORMAT, MANIFEST, PARTIAL, VERSION

__all__ = [
    "Checkpoint",
    "checkpoints_folder",
    "copy_checkpoint",
    "environment_mismatches",
    "names_on_disk",
    "on_disk",
    "read_checkpoint",
    "sign_checkpoint",
]

log = logging.getLogger("jupyter_exec")

MAX_MANIFEST_BYTES = 64 << 20
"""A manifest larger than this is refused unread (a namespace of a million names is ~100 MB)."""
CHUNK = 1 << 20


@dataclass(frozen=True)
class Checkpoint:
    """A named point in a session's state, to :meth:`~jupyter_exec.AsyncSession.restore` later.

    Kept in memory (a frozen copy-on-write fork of the kernel) for the life of
    the session that took it, and on disk (``path``) for good: a new session,
    on this machine or another with the same environment, restores it from there.
    """

    name: str
    cell_index: int
    """The notebook's length when it was taken: cells from this index on came after it."""
    created: datetime
    """When it was taken (UTC)."""
    session: str
    """The name of the session it belongs to."""
    path: Path | None = None
    """Its folder on disk (``<work dir>/.<session>_checkpoints/<name>``); None: memory only."""
    names: tuple[str, ...] = ()
    """The names stored on disk (modules included: they are imported again by name)."""
    skipped: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Names that could not be stored on disk, each with the reason (a generator, a lock...)."""
    size: int = 0
    """Bytes of its files on disk."""
    automatic: bool = False
    """Taken by the session on its own (option ``checkpoint_every``), not by a call."""
    environment: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    """Python and the versions of the libraries whose objects it stored."""
    origin: Mapping[str, Any] = field(
        default_factory=lambda: {"backend": "local"}, hash=False, compare=False
    )
    """The backend whose kernel wrote it, as this host recorded and signed it:
    ``{"backend": "local" | "docker" | "remote"}``, with ``"image"`` for Docker. One
    not from ``local`` loads into a kernel on the host only with ``trust_origin=True``."""
    digest: str = field(default="", repr=False, compare=False)
    """The sha256 of its signed manifest's body when it was read (a kernel loading it
    checks what it reads against this)."""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """The checkpoint in folder ``path``, checked whole (this host's MAC over the manifest,
        and every file's sha256).

        Raises :class:`~jupyter_exec.CheckpointError` for a damaged, partial, unsigned or
        altered one (nothing of it is loaded); nothing is unpickled here.
        Restore it into any session with ``session.restore(checkpoint)``.
        """
        folder = Path(path).absolute()
        return read_checkpoint(folder.parent, folder.name, verify=True)


def read_checkpoint(root: Path, relative: str, *, verify: bool) -> Checkpoint:
    """The checkpoint at ``root/relative`` (``root`` trusted, nothing below it); with
    ``verify``, every file is hashed too. :class:`CheckpointError` when it is not whole."""
    where = root / relative
    with _opened(root, relative, "read") as folder:
        body = _manifest(folder, where)
        if verify:  # hashlib lets go of the GIL: the files are hashed side by side
            entries = [e for e in body["variables"] if e["kind"] == "pickle"]
            workers = max(1, min(len(entries), os.cpu_count() or 1, 4))
            with ThreadPoolExecutor(workers, thread_name_prefix="jx-hash") as pool:
                for done in [pool.submit(_check_file, folder, where, e) for e in entries]:
                    done.result()
    return _from_body(body, where)


@contextlib.contextmanager
def _opened(root: Path, relative: str, doing: str) -> Iterator[Folder]:
    """The checkpoint's folder, open; a missing or unreadable one (or a file in it) is a
    :class:`CheckpointError` saying what could not be done (``doing``: "read", "signed")."""
    where = root / relative
    try:
        with Folder.open(root, relative) as folder:
            yield folder
    except FileNotFoundError:
        raise CheckpointError(
            f"no checkpoint at {where} (the folder or a file is missing)"
        ) from None
    except (StorageError, WorkDirError) as exc:
        raise CheckpointError(f"the checkpoint at {where} cannot be {doing}: {exc}") from None


def _manifest(folder: Folder, where: Path) -> dict[str, Any]:
    """The manifest's body, checked: this host's MAC, its checksum, its shape."""
    return _signed_manifest(folder, where)[0]


def _signed_manifest(folder: Folder, where: Path) -> tuple[dict[str, Any], bytes]:
    """The checked body and the manifest's bytes as read (what a copy writes)."""
    raw = _read_manifest(folder, where)
    outer, body, canonical = _parse(raw, where)
    checkpoint_trust.verify(canonical.encode(), outer.get("mac"), where / MANIFEST)
    _check_shape(body, where)
    return dict(body), raw


def _open_or_missing(folder: Folder, name: str, missing: str) -> int:
    """``name`` in ``folder``, open for reading; a missing one is CheckpointError(``missing``)."""
    try:
        return folder.open_file(name, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckpointError(missing) from None


def _read_manifest(folder: Folder, where: Path) -> bytes:
    fd = _open_or_missing(
        folder,
        MANIFEST,
        f"{where} has no {MANIFEST}: not a checkpoint, or one whose writing never finished",
    )
    try:
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{where / MANIFEST} is too large ({size} bytes) to be ours")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)


def _parse(raw: bytes, where: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The manifest's outer object, its body and the body's canonical JSON, checksum checked."""
    try:
        outer = json.loads(raw)
        body, summed = outer["body"], outer["sha256"]
        canonical = _canonical(body)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise CheckpointError(f"{where / MANIFEST} is truncated or not a checkpoint's") from None
    if not isinstance(body, dict) or hashlib.sha256(canonical.encode()).hexdigest() != summed:
        raise CheckpointError(f"{where / MANIFEST} does not match its own checksum (altered?)")
    return outer, body, canonical


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def sign_checkpoint(
    root: Path, relative: str, origin: Mapping[str, Any], digest: str | None
) -> Checkpoint:
    """Stamp the checkpoint a kernel just wrote at ``root/relative`` with ``origin`` and sign
    it with this host's key; the checkpoint, as :func:`read_checkpoint` would give it.

    ``digest``: the sha256 of the body as the kernel that wrote it reported it over its
    own channel (a kernel on the host: trusted); a manifest that differs (swapped on disk
    since, by another kernel sharing the folder) is refused unsigned.
    """
    where = root / relative
    with _opened(root, relative, "signed") as folder:
        _outer, body, _ = _parse(_read_manifest(folder, where), where)
        if digest is not None and _sha(body) != digest:
            raise CheckpointError(
                f"{where / MANIFEST} changed on disk after its kernel wrote it; not signed"
            )
        body = {**body, "origin": dict(origin)}
        _check_shape(body, where)
        canonical = _canonical(body)
        outer = {
            "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
            "mac": checkpoint_trust.mac(canonical.encode()),
            "body": body,
        }
        folder.write_atomic(MANIFEST, [json.dumps(outer).encode()])
    return _from_body(body, where)


def _sha(body: Any) -> str:
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


def _check_shape(body: Any, where: Path) -> None:
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{where / MANIFEST} is not a valid checkpoint manifest: {what}")

    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise bad("wrong format")
    if body.get("version") != VERSION:
        raise bad(f"version {body.get('version')!r}; this jupyter-exec reads {VERSION}")
    env = body.get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("libraries"), dict):
        raise bad("no environment")
    variables, skipped = body.get("variables"), body.get("skipped")
    if not isinstance(variables, list) or not isinstance(skipped, list):
        raise bad("no variables")
    files: set[str] = set()
    for entry in variables:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad("an entry without a name")
        if entry.get("kind") == "module":
            if not isinstance(entry.get("module"), str):
                raise bad(f"module {entry['name']!r} has no module name")
            continue
        file = entry.get("file")
        if (
            entry.get("kind") != "pickle"
            or not isinstance(file, str)
            or file in files
            or file in (MANIFEST, "", ".", "..")
            or "/" in file
            or not isinstance(entry.get("size"), int)
            or not isinstance(entry.get("sha256"), str)
            or not isinstance(entry.get("parts"), list)
            or sum(p for p in entry["parts"] if isinstance(p, int)) != entry["size"]
        ):
            raise bad(f"entry {entry['name']!r}")
        files.add(file)
    origin = body.get("origin")
    if (
        not isinstance(origin, dict)
        or origin.get("backend") not in checkpoint_trust.BACKENDS
        or not isinstance(origin.get("image", ""), str)
    ):
        raise bad("no origin")


def _check_file(folder: Folder, where: Path, entry: Mapping[str, Any]) -> None:
    name = entry["file"]
    fd = _open_or_missing(
        folder, name, f"the checkpoint at {where} is partial: {name} ({entry['name']}) is missing"
    )
    digest = hashlib.sha256()
    size = 0
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size != entry["size"] or digest.hexdigest() != entry["sha256"]:
        raise CheckpointError(
            f"the checkpoint at {where} is damaged: {name} ({entry['name']}) does not match "
            f"its checksum ({size} bytes, {entry['size']} expected)"
        )


def _from_body(body: Mapping[str, Any], where: Path) -> Checkpoint:
    created = body.get("created")
    when = datetime.fromtimestamp(0, timezone.utc)
    if isinstance(created, int | float):
        with contextlib.suppress(ValueError, OverflowError, OSError):
            when = datetime.fromtimestamp(created, timezone.utc)
    cell_index = body.get("cell_index")
    return Checkpoint(
        name=where.name,  # a checkpoint is its folder: renamed, it is renamed
        cell_index=cell_index if isinstance(cell_index, int) else 0,
        created=when,
        session=str(body.get("session") or ""),
        path=where,
        names=tuple(str(e["name"]) for e in body["variables"]),
        skipped={
            str(s.get("name")): str(s.get("reason")) for s in body["skipped"] if isinstance(s, dict)
        },
        size=sum(int(e.get("size", 0)) for e in body["variables"]),
        automatic=bool(body.get("automatic")),
        environment=dict(body["environment"]),
        origin=dict(body["origin"]),
        digest=_sha(body),
    )


def manifest_undone(checkpoint: Checkpoint) -> frozenset[int]:
    """The cells that were marked undone when ``checkpoint`` was taken (from its manifest)."""
    if checkpoint.path is None:
        return frozenset()
    with contextlib.suppress(Exception):
        with Folder.open(checkpoint.path.parent, checkpoint.path.name) as folder:
            body = _manifest(folder, checkpoint.path)
        return frozenset(int(i) for i in body.get("undone", []))
    return frozenset()


def names_on_disk(work_dir: Path, session: str) -> set[str]:
    """The entries of ``work_dir/.<session>_checkpoints`` (no link followed; none: empty)."""
    try:
        with Folder.open(work_dir, checkpoints_folder(session)) as folder:
            return {n for n in os.listdir(folder.fd) if not n.startswith(".")}
    except (FileNotFoundError, StorageError, WorkDirError):
        return set()


def on_disk(work_dir: Path, session: str) -> list[Checkpoint]:
    """The whole-looking checkpoints in ``work_dir/.<session>_checkpoints``, oldest first.

    Manifests are read and checked, files are not hashed (restore does that);
    a folder that is not a checkpoint is left out and logged.
    """
    relative = checkpoints_folder(session)
    try:
        with Folder.open(work_dir, relative) as folder:
            names = sorted(os.listdir(folder.fd))
            kinds = {n: folder.lstat(n) for n in names if not n.startswith(".")}
    except (FileNotFoundError, StorageError, WorkDirError):
        return []
    found: list[Checkpoint] = []
    for name, st in kinds.items():
        if st is None or not stat.S_ISDIR(st.st_mode):
            continue
        try:
            found.append(read_checkpoint(work_dir, f"{relative}/{name}", verify=False))
        except CheckpointError as exc:
            log.warning("ignored %s: %s", work_dir / relative / name, exc)
    return sorted(found, key=lambda c: c.created)


def environment_mismatches(stored: Mapping[str, Any], kernel: Mapping[str, Any]) -> tuple[str, ...]:
    """What differs between a checkpoint's environment and a kernel's, in words."""
    found: list[str] = []
    want, have = str(stored.get("python", "")), str(kernel.get("python", ""))
    if want.split(".")[:2] != have.split(".")[:2]:
        found.append(f"Python {want} in the checkpoint, {have} in this kernel")
    versions = kernel.get("libraries") or {}
    for name, version in sorted((stored.get("libraries") or {}).items()):
        now = versions.get(name)
        if now is None:
            found.append(f"{name} {version} in the checkpoint, not installed in this kernel")
        elif str(now) != str(version):
            found.append(f"{name} {version} in the checkpoint, {now} in this kernel")
    return tuple(found)


def copy_checkpoint(source: Checkpoint, work_dir: Path, session: str) -> str:
    """Copy ``source`` (checked whole) into ``work_dir/.<session>_checkpoints``, where this
    session's kernel can read it; the copy's path relative to ``work_dir``.

    Each file is hashed while copied and the copy refused if it differs; the
    manifest is copied last and the folder renamed into place.
    """
    assert source.path is not None
    relative = checkpoints_folder(session)
    name = source.name
    try:
        with Folder.open(work_dir, relative, create=True) as parent:
            if parent.lstat(name) is not None:
                name = f"{name}-{secrets.token_hex(3)}"
            temp = f".{name}.{secrets.token_hex(4)}{PARTIAL}"
            with (
                Folder.open(source.path.parent, source.path.name) as src,
                parent.sub(temp, create=True) as dst,
            ):
                body, raw = _signed_manifest(src, source.path)
                try:
                    for entry in body["variables"]:
                        if entry["kind"] == "pickle":
                            _copy_file(src, dst, source.path, entry)
                    dst.write_atomic(MANIFEST, [raw])  # the bytes checked, signed as they were
                except BaseException:
                    for entry in [*body["variables"], {"file": MANIFEST}]:
                        if "file" in entry:
                            dst.unlink(entry["file"])
                    with contextlib.suppress(OSError):
                        os.rmdir(temp, dir_fd=parent.fd)
                    raise
            parent.rename(temp, name)
    except (StorageError, WorkDirError) as exc:
        raise CheckpointError(f"could not copy the checkpoint {source.path}: {exc}") from None
    return f"{relative}/{name}"


def _copy_file(src: Folder, dst: Folder, where: Path, entry: Mapping[str, Any]) -> None:
    name = entry["file"]
    fd = _open_or_missing(src, name, f"the checkpoint at {where} is partial: {name} is missing")
    digest = hashlib.sha256()
    out = dst.create(name)
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            write_all(out, [chunk])
    finally:
        os.close(fd)
        os.close(out)
    if digest.hexdigest() != entry["sha256"]:
        raise CheckpointError(f"the checkpoint at {where} is damaged: {name} differs")
