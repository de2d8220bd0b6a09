"""How a load checks the chunks it reads: by their sha256, or, on a wake of a local session
into a local kernel (the session held its folder all along, only the host's kernels wrote
there), by their xxh3-128 names, which the signed manifest binds as it binds their sha256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from jupyter_exec.inkernel import generations as inkernel
from jupyter_exec.state.generations import checks_by_name

LOCAL = {"backend": "local"}
DOCKER = {"backend": "docker", "image": "jupyter-exec/kernel:latest"}
REMOTE = {"backend": "remote", "server": "https://example.invalid"}


def test_only_a_local_kernels_state_woken_into_a_local_kernel_is_checked_by_name() -> None:
    assert checks_by_name(LOCAL, LOCAL, own_folder=True)
    assert not checks_by_name(LOCAL, LOCAL, own_folder=False)  # a resume: others could write
    for origin, kernel in ((DOCKER, LOCAL), (DOCKER, DOCKER), (LOCAL, DOCKER),
                           (REMOTE, REMOTE), (REMOTE, LOCAL), ({}, LOCAL)):  # fmt: skip
        assert not checks_by_name(origin, kernel, own_folder=True), (origin, kernel)


def _stored(root: Path, pieces: list[bytes]) -> dict[str, object]:
    """An entry whose chunks are ``pieces``, written under their xxh3-128 names."""
    objects = root / inkernel.OBJECTS
    objects.mkdir(exist_ok=True)
    chunks = []
    for piece in pieces:
        address = inkernel._address(memoryview(piece))
        (objects / address).write_bytes(piece)
        chunks.append([address, hashlib.sha256(piece).hexdigest(), len(piece)])
    return {"kind": "pickle", "chunks": chunks, "size": sum(map(len, pieces))}


def _load(root: Path, entry: dict[str, object], fast: bool) -> bytearray:
    raws: dict[str, bytearray] = {}
    for job in inkernel._reads(str(root), "x", entry, raws, fast):
        job()
    return raws["x"]


@pytest.mark.skipif(inkernel._fast is None, reason="xxhash is not installed")
def test_a_fast_load_checks_each_chunk_against_its_name_and_refuses_a_swapped_one(
    tmp_path: Path,
) -> None:
    entry = _stored(tmp_path, [b"a" * 1000, b"b" * 10])
    chunks = entry["chunks"]
    assert isinstance(chunks, list)
    chunks[0][1] = "0" * 64  # its sha256 no longer matches: only a sha256 check sees it
    assert _load(tmp_path, entry, fast=True) == b"a" * 1000 + b"b" * 10
    with pytest.raises(ValueError, match="does not match its hash"):
        _load(tmp_path, entry, fast=False)

    entry = _stored(tmp_path, [b"c" * 1000])
    chunks = entry["chunks"]
    assert isinstance(chunks, list)
    swapped = tmp_path / inkernel.OBJECTS / str(chunks[0][0])
    os.unlink(swapped)
    swapped.write_bytes(b"d" * 1000)  # same size, other bytes: neither check takes it
    for fast in (True, False):
        with pytest.raises(ValueError, match="does not match its hash"):
            _load(tmp_path, entry, fast=fast)
