"""Whom a checkpoint on disk may be trusted by: the host's key, the manifest's MAC, its origin.

A checkpoint is written by a kernel, and a Docker kernel is the untrusted
side: it can write any folder in its work dir, manifest and pickles
included, and recompute every unkeyed checksum. What it cannot do is make a
MAC with a key it never sees. So the host, and only the host:

* keeps one key (:func:`key_path`): 32 random bytes from :mod:`secrets`,
  made once, in the Jupyter data dir (``JUPYTER_DATA_DIR``), or where
  ``JUPYTER_EXEC_CHECKPOINT_KEY`` says; mode 0600, created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` and read with ``O_NOFOLLOW``; never in a
  work dir (refused there, :func:`check_outside`), so never mounted into a
  kernel, never in a notebook or a log;
* stamps every checkpoint a session's kernel writes with its **origin**, the
  backend that ran that kernel as the host knows it (``local``, ``docker``
  with its image, ``remote``), never as the kernel says, and signs the
  manifest (HMAC-SHA256 over its canonical body, which holds the sha256 of
  every file and the origin);
* checks the MAC before it reads anything else of a manifest
  (:func:`verify`), and refuses to load a checkpoint whose origin is not
  ``local`` into a kernel on the host unless the person says they trust it
  (:func:`check_origin`: ``restore(..., trust_origin=True)``, CLI
  ``--trust-checkpoint-origin``). A Docker checkpoint into a Docker kernel is
  always fine: its pickles run where they were made. A remote kernel's (stamped
  with the server this host reached it through) loads only into a kernel of that
  same server: never here, in a container, or on another server's hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jupyter_exec.exceptions import CheckpointError

__all__ = [
    "KEY_ENV",
    "TRUST_CLI_FLAG",
    "TRUST_FLAG",
    "check_origin",
    "check_outside",
    "fingerprint",
    "key_path",
    "mac",
    "origin_words",
    "verify",
]

KEY_ENV = "JUPYTER_EXEC_CHECKPOINT_KEY"
"""The key file's path, in place of ``<Jupyter data dir>/jupyter_exec/checkpoint.key``."""
TRUST_FLAG = "trust_origin=True"
TRUST_CLI_FLAG = "--trust-checkpoint-origin"
BACKENDS = ("local", "docker", "remote")
KEY_BYTES = 32
_CONTEXT = b"jupyter-exec checkpoint manifest v1\0"
"""Prefixed to what is signed, so this key's MACs mean nothing anywhere else."""


def key_path() -> Path:
    """Where the host's checkpoint key is (made on first use)."""
    chosen = os.environ.get(KEY_ENV)
    if chosen:
        return Path(chosen).expanduser().absolute()
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()).absolute() / "jupyter_exec" / "checkpoint.key"


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(
            f"the checkpoint key {path} cannot be read ({exc.strerror}; a link is refused): "
            "no checkpoint can be signed or checked"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"the checkpoint key {path} is not a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise CheckpointError(
                f"the checkpoint key {path} must be this user's and readable by no one else "
                f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it, or remove it to make a new "
                "one (checkpoints signed with it are then refused)"
            )
        text = os.read(fd, 4 * KEY_BYTES + 1)
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise CheckpointError(f"the checkpoint key {path} is damaged (not {KEY_BYTES} hex bytes)")
    return key


def _create(path: Path) -> None:
    """Publish a new key at ``path`` whole or not at all (another process may race us)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES).hex().encode("ascii") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path, follow_symlinks=False)  # fails if it exists: the first one wins
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def fingerprint(secret: bytes, purpose: bytes) -> str:
    """A short id of ``secret`` (an API key, a bearer token) for ``purpose``: an HMAC under a
    key derived from the host's key, so the same secret on this host has the same id, the id
    tells nothing of the secret, and ids for two purposes never match. What an owner record
    keeps instead of the credential."""
    key = hmac.new(load_key(), purpose + b"\0", hashlib.sha256).digest()
    return hmac.new(key, secret, hashlib.sha256).hexdigest()[:32]


def load_key() -> bytes:
    """The host's checkpoint key, made on first use."""
    path = key_path()
    key = _read(path)
    if key is None:
        try:
            _create(path)
        except OSError as exc:
            raise CheckpointError(
                f"cannot make the checkpoint key {path}: {exc.strerror or exc}; set "
                f"{KEY_ENV} to a file path in a folder this user can write"
            ) from None
        key = _read(path)
    if key is None:
        raise CheckpointError(f"the checkpoint key {path} vanished while it was made")
    return key


def check_outside(folders: Iterable[Path]) -> None:
    """Refuse to sign or check for a kernel that can see the key (it lies in one of ``folders``).

    A kernel sees its work dir (a Docker kernel: every folder mounted into it):
    a key there could sign anything.
    """
    key = key_path().resolve()
    for folder in folders:
        with contextlib.suppress(OSError, ValueError):
            key.relative_to(folder.resolve())
            raise CheckpointError(
                f"the checkpoint key {key} lies inside {folder}, which the kernel can read: "
                f"no checkpoint is written or loaded; set {KEY_ENV} to a path outside it"
            )


def mac(canonical: bytes, key: bytes | None = None) -> str:
    """The MAC of a manifest's canonical body."""
    return hmac.new(key or load_key(), _CONTEXT + canonical, hashlib.sha256).hexdigest()


def verify(canonical: bytes, signed: Any, where: Path) -> None:
    """Raise :class:`CheckpointError` unless ``signed`` is this host's MAC of ``canonical``."""
    not_loaded = "it was not loaded"
    if not isinstance(signed, str) or not signed:
        raise CheckpointError(
            f"{where} is not signed by this host's checkpoint key (no MAC): not written by a "
            f"session of this machine's jupyter-exec, or forged; {not_loaded}"
        )
    if not hmac.compare_digest(mac(canonical), signed):
        raise CheckpointError(
            f"{where} does not carry this host's MAC: its manifest was altered, forged, or "
            f"signed with another key (another machine's, or one since replaced); {not_loaded}"
        )


def origin_words(origin: Mapping[str, Any]) -> str:
    """``a Docker kernel (image x)`` and the like, for messages."""
    backend = origin.get("backend")
    if backend == "docker":
        image = origin.get("image")
        return f"a Docker kernel (image {image})" if image else "a Docker kernel"
    if backend == "remote":
        server = origin.get("server")
        return f"a remote kernel (server {server})" if server else "a remote kernel"
    return "a kernel on this host"


def check_origin(
    name: str, origin: Mapping[str, Any], kernel: Mapping[str, Any], *, trusted: bool
) -> None:
    """Refuse to load a checkpoint from a sandbox into a kernel on the host, unless ``trusted``.

    Loading unpickles: whatever the writing kernel put in the files runs in the
    loading kernel. A local kernel is the host; a Docker or remote kernel
    loading anything stays where it is. A remote kernel's state loads only into a kernel of
    the same server (the same hosts, the same SSH user): never on this host, in a
    container of this host, nor on another server's hosts.
    """
    if trusted or origin.get("backend") == "local":
        return
    if origin.get("backend") == "remote":
        server = origin.get("server")  # (none known: no kernel is proven to be of its server)
        same = kernel.get("backend") == "remote" and bool(server) and kernel.get("server") == server
        if same:
            return
        raise CheckpointError(
            f"{name!r} was written by {origin_words(origin)}, and this session's kernel is "
            f"{_kernel_words(kernel)}: loading it would unpickle there what that kernel wrote "
            "(code included); a remote kernel's state loads only into a kernel of the same "
            f"server; it was not loaded. If you trust that kernel's code, pass {TRUST_FLAG} "
            f"(CLI: {TRUST_CLI_FLAG})"
        )
    if kernel.get("backend") != "local":
        return
    raise CheckpointError(
        f"checkpoint {name!r} was written by {origin_words(origin)}, and this session's kernel "
        "runs on this host: loading it would unpickle, on the host, what that kernel wrote "
        f"(code included); it was not loaded. If you trust that kernel's code, pass "
        f"restore(..., {TRUST_FLAG}) (CLI: {TRUST_CLI_FLAG})"
    )


def _kernel_words(kernel: Mapping[str, Any]) -> str:
    """The loading kernel, for messages (``on this host`` and the like)."""
    if kernel.get("backend") == "local":
        return "on this host"
    return origin_words(kernel)
