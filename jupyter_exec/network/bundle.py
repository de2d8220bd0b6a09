"""The kernel's CA bundle: its image's own system bundle plus what the session's proxy asks it to
trust (:data:`~jupyter_exec.network.proxy.TRUST_NAME`: the session's authority, the policy's
``extra_ca``), written into the proxy's folder that is mounted read-only in the container.

Starting from the *image's* bundle keeps the kernel's view of public authorities the image's
own (what it would trust with a full network), not this machine's. It is read once per image
(per process) from a created, never started container (``docker cp`` of the file), and is
kept in memory by the image's id. An image without a bundle at any usual place gets this
machine's default bundle instead, so tunnelled hosts still verify.
"""

from __future__ import annotations

import io
import logging
import os
import ssl
import tarfile
import threading
from pathlib import Path
from typing import Any

import docker.errors

from jupyter_exec.network.proxy import BUNDLE_NAME, TRUST_NAME

__all__ = ["image_bundle", "write_bundle"]

log = logging.getLogger(__name__)

#: Where images keep their system bundle (Debian/Ubuntu/Alpine, Fedora/RHEL, SUSE, others).
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/var/lib/ca-certificates/ca-bundle.pem",
    "/etc/ssl/cert.pem",
)
MAX_BUNDLE = 16 * 1024 * 1024

_cache: dict[str, bytes] = {}
_lock = threading.Lock()


def needs_bundle(folder: str | os.PathLike[str]) -> bool:
    """Whether the proxy in ``folder`` asks the kernel to trust anything (so: a bundle, and
    the variables of :func:`~jupyter_exec.network.proxy.ca_env`)."""
    return (Path(folder) / TRUST_NAME).is_file()


def image_bundle(client: Any, image: str) -> bytes:
    """The system CA bundle inside ``image`` (``client`` a ``docker.DockerClient``)."""
    image_id = str(client.images.get(image).id)
    with _lock:
        if image_id in _cache:
            return _cache[image_id]
    found = _read_from_image(client, image_id)
    if found is None:
        log.warning("no CA bundle found in image %s; the kernel gets this machine's", image)
        default = ssl.get_default_verify_paths().cafile
        found = Path(default).read_bytes() if default and os.path.isfile(default) else b""
    with _lock:
        _cache[image_id] = found
    return found


def _read_from_image(client: Any, image_id: str) -> bytes | None:
    container = client.containers.create(image_id, command=["true"], network_disabled=True)
    try:
        for path in SYSTEM_BUNDLES:
            try:
                stream, stat = container.get_archive(path)
            except docker.errors.NotFound:
                continue
            if stat.get("size", 0) > MAX_BUNDLE:
                continue
            data = b"".join(stream)
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                member = archive.next()
                extracted = archive.extractfile(member) if member is not None else None
                if extracted is not None:  # None: a link (the paths listed are its targets)
                    return extracted.read()
        return None
    finally:
        container.remove(force=True)


def write_bundle(folder: str | os.PathLike[str], system: bytes) -> None:
    """Write ``system`` + the proxy's trusted certificates as the kernel's bundle (atomically:
    a restarted kernel's container sees the old file or the new one, never half of one)."""
    folder = Path(folder)
    target = folder / BUNDLE_NAME
    spare = folder / f".{BUNDLE_NAME}.tmp"
    spare.write_bytes(system.rstrip() + b"\n" + (folder / TRUST_NAME).read_bytes())
    spare.chmod(0o644)
    os.replace(spare, target)
