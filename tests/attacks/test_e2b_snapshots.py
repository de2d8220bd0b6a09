"""Attacks on the E2B server's snapshots and forks, written as the attacker.

* Another key: the server is started again on the same root with another API key (a
  second tenant of the data dir), and that key lists, starts from and deletes the first
  key's snapshot by its id; a sandbox's token (no key) calls the snapshot routes.
* A forged snapshot: an entry written beside the genuine ones (a signature made up), and
  the genuine snapshot's saved namespace replaced by a pickle that runs a command.
* Another sandbox's token forking a victim sandbox.
* Races: a wake (a paused sandbox's next call) against its deletion; a sandbox starting
  from a snapshot against the snapshot's deletion.

Each is refused, and the asset is untouched: the snapshot still starts sandboxes for the
key that took it, the victim keeps its state, no sandbox is made, no kernel is left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import psutil
import pytest
from e2b import SandboxException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import API_KEY, Running, run_server

from jupyter_exec.e2b import E2BConfig
from jupyter_exec.e2b.branches import MAX_FORKS
from jupyter_exec.e2b.snapshots import DATA, KIND, SnapshotStore, owner_of
from jupyter_exec.manager.saved import registry_folder

pytestmark = pytest.mark.timeout(300)

OTHER_KEY = "another-tenant-5678"
DEADLINE = 60.0


@contextlib.contextmanager
def server(root: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    """A server on ``root`` with API key ``key``, the SDK pointed at it with that key."""
    running = run_server(E2BConfig(root_dir=root, ports=(0,), api_key=key))
    started = next(running)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.setenv("E2B_API_URL", started.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", started.url)
    monkeypatch.setenv("E2B_API_KEY", key)
    try:
        yield started
    finally:
        with contextlib.suppress(StopIteration):
            next(running)


def _digest(folder: Path) -> str:
    """Every file under ``folder``, names and bytes: to show it was not touched."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _snapshot_of(secret: str) -> tuple[Sandbox, str]:
    source = Sandbox.create()
    source.run_code(f"secret = {secret!r}")
    source.files.write("secret.txt", secret)
    return source, source.create_snapshot().snapshot_id


def test_another_keys_snapshot_is_not_found_and_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with server(tmp_path, API_KEY, monkeypatch):
        source, snapshot = _snapshot_of("tenant one's")
        source.kill()
    data = tmp_path / registry_folder(DATA) / snapshot
    entry = tmp_path / registry_folder(KIND) / f"{snapshot}.json"
    before = (_digest(data), entry.read_bytes())

    with server(tmp_path, OTHER_KEY, monkeypatch) as other:
        assert Sandbox.list_snapshots().next_items() == []
        with pytest.raises(SandboxException, match="404"):
            Sandbox.create(snapshot)
        assert Sandbox.delete_snapshot(snapshot) is False
        listed = httpx.get(f"{other.url}/sandboxes", headers={"X-API-KEY": OTHER_KEY}).json()
        assert listed == []  # the refused create left no sandbox
    assert (_digest(data), entry.read_bytes()) == before

    with server(tmp_path, API_KEY, monkeypatch):  # the owner's key: still whole, still usable
        copy = Sandbox.create(snapshot)
        try:
            assert copy.run_code("secret").text == "tenant one's"
            assert copy.files.read("secret.txt") == "tenant one's"
        finally:
            copy.kill()


def test_a_sandbox_token_opens_no_snapshot_or_fork_route(api_env: Running) -> None:
    victim, snapshot = _snapshot_of("the victim's")
    attacker = Sandbox.create()
    try:
        token = attacker._envd_access_token or ""
        before = len(api_env.server.sandboxes.every())
        for headers in (
            {"E2b-Sandbox-Id": attacker.sandbox_id, "X-Access-Token": token},
            {"E2b-Sandbox-Id": victim.sandbox_id, "X-Access-Token": token},
            {"X-Access-Token": token, "X-API-KEY": token},
        ):
            calls = [
                ("POST", f"/sandboxes/{victim.sandbox_id}/fork", {"count": 3}),
                ("POST", f"/sandboxes/{victim.sandbox_id}/snapshots", {}),
                ("GET", "/snapshots", None),
                ("DELETE", f"/templates/{snapshot}", None),
                ("POST", "/v2/sandboxes", {"templateID": snapshot}),
            ]
            for method, path, body in calls:
                answer = httpx.request(method, api_env.url + path, headers=headers, json=body)
                assert answer.status_code == 401, (method, path, answer.text[:200])
                assert snapshot not in answer.text
                assert "the victim" not in answer.text
        assert len(api_env.server.sandboxes.every()) == before  # no fork, no sandbox made
        assert [s.snapshot_id for s in Sandbox.list_snapshots().next_items()].count(snapshot) == 1
        assert victim.run_code("secret").text == "the victim's"
    finally:
        attacker.kill()
        victim.kill()
        Sandbox.delete_snapshot(snapshot)


class _Payload:
    """Unpickled, runs a command that leaves a file: the proof that it ran."""

    def __init__(self, proof: str) -> None:
        self.proof = proof

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.proof}",))


def test_a_forged_or_tampered_snapshot_is_refused_and_runs_nothing(
    api_env: Running, tmp_path: Path
) -> None:
    root = api_env.root
    source, snapshot = _snapshot_of("genuine")
    try:
        entries = root / registry_folder(KIND)
        data = root / registry_folder(DATA)
        proof = tmp_path / "pwned"

        # 1. a forged entry beside the genuine one: a copy of its data, a signature made up
        genuine = json.loads((entries / f"{snapshot}.json").read_text())
        forged_id = "snap-" + "f" * 16
        forged = {**genuine, "entry": {**genuine["entry"], "id": forged_id}, "mac": "0" * 64}
        (entries / f"{forged_id}.json").write_text(json.dumps(forged))
        (data / forged_id).mkdir()
        for name in ("files", "memory"):
            os.system(f"cp -r {data / snapshot / name} {data / forged_id / name}")
        listed = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
        assert forged_id not in listed
        assert snapshot in listed
        with pytest.raises(SandboxException, match="404"):
            Sandbox.create(forged_id)

        # 2. the genuine snapshot's saved namespace swapped for a payload
        memory = data / snapshot / "memory"
        before = _digest(memory)
        payload = pickle.dumps(_Payload(str(proof)))
        swapped = [p for p in memory.rglob("*") if p.is_file() and p.suffix != ".json"]
        assert swapped, "the snapshot holds no saved names"
        originals = {p: p.read_bytes() for p in swapped}
        for path in swapped:
            path.write_bytes(payload)
        count = len(api_env.server.sandboxes.every())
        with pytest.raises(SandboxException, match="409"):
            Sandbox.create(snapshot)
        assert not proof.exists(), "the tampered snapshot's payload ran"
        assert len(api_env.server.sandboxes.every()) == count  # the refused sandbox is gone

        for path, content in originals.items():  # put back: the genuine snapshot works again
            path.write_bytes(content)
        assert _digest(memory) == before
        copy = Sandbox.create(snapshot)
        try:
            assert copy.run_code("secret").text == "genuine"
        finally:
            copy.kill()
    finally:
        source.kill()
        Sandbox.delete_snapshot(snapshot)


def _kernels_in(work_dir: Path) -> list[psutil.Process]:
    """Processes (kernels) running in ``work_dir``."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if Path(process.cwd()) == work_dir and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def test_a_wake_racing_a_delete_leaves_no_kernel(api_env: Running) -> None:
    sandbox = Sandbox.create()
    work_dir = api_env.root / sandbox.sandbox_id
    sandbox.run_code("x = 1")
    assert sandbox.pause() is True
    assert _kernels_in(work_dir) == []
    woke: list[BaseException | str] = []

    def wake() -> None:
        try:
            woke.append(sandbox.run_code("x").text or "")
        except BaseException as exc:  # refused: the sandbox went away
            woke.append(exc)

    waking = threading.Thread(target=wake)
    waking.start()
    Sandbox.kill(sandbox.sandbox_id)
    waking.join(DEADLINE)
    assert not waking.is_alive()
    assert sandbox.sandbox_id not in [s.id for s in api_env.server.sandboxes.every()]
    assert not any(
        n.startswith(sandbox.sandbox_id) for n in (i.name for i in api_env.server.manager.list())
    )
    end = time.monotonic() + DEADLINE
    while _kernels_in(work_dir):  # a kernel the wake started is ended with the sandbox
        assert time.monotonic() < end, f"left running: {_kernels_in(work_dir)}"
        time.sleep(0.05)


def test_a_start_from_a_snapshot_racing_its_delete_is_whole_or_refused(
    api_env: Running,
) -> None:
    source, snapshot = _snapshot_of("whole")
    source.kill()
    made: list[Sandbox | BaseException] = []

    def start() -> None:
        try:
            made.append(Sandbox.create(snapshot))
        except BaseException as exc:
            made.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    deleted = Sandbox.delete_snapshot(snapshot)
    starting.join(DEADLINE)
    assert not starting.is_alive()
    assert deleted is True
    (result,) = made
    if isinstance(result, Sandbox):  # it started first: whole
        try:
            assert result.run_code("secret").text == "whole"
            assert result.files.read("secret.txt") == "whole"
        finally:
            result.kill()
    else:
        assert "404" in str(result) or "not found" in str(result)
    assert not (api_env.root / registry_folder(DATA) / snapshot).exists()
    assert snapshot not in [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]


def test_a_docker_sandboxs_snapshot_never_becomes_a_local_sandboxs_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot keeps the trust of the sandbox it was taken of. What a Docker kernel wrote
    (a ``.profile`` a local login shell would run, a module a local kernel would import)
    must not be started as a local sandbox by a server on the same root and key."""
    with server(tmp_path, API_KEY, monkeypatch):
        source, snapshot = _snapshot_of("from a container")
        source.kill()
    # What a server with --backend docker on this root writes: the same entry, its trust.
    store = SnapshotStore(tmp_path)
    taken = store.get(snapshot, owner_of(API_KEY))
    store.save(replace(taken, trust="kernel"))
    data = tmp_path / registry_folder(DATA) / snapshot
    before = _digest(data)
    folders = sorted(tmp_path.iterdir())

    with server(tmp_path, API_KEY, monkeypatch) as local:
        with pytest.raises(SandboxException, match="Docker or remote sandbox"):
            Sandbox.create(snapshot)
        listed = httpx.get(f"{local.url}/sandboxes", headers={"X-API-KEY": API_KEY}).json()
        assert listed == []  # no sandbox made, so no copy of its files on the host
    assert sorted(tmp_path.iterdir()) == folders  # no sandbox folder holds its files
    assert _digest(data) == before


@pytest.mark.parametrize("count", [0, -1, MAX_FORKS + 1, 10**9, True, "4", 2.0])
def test_a_fork_count_out_of_bounds_is_a_400_and_forks_nothing(
    api_env: Running, count: object
) -> None:
    """The owner's own key asking for no fork, a negative one, or more than the server makes
    at once (each fork is a kernel): refused with the bounds, before anything is captured."""
    victim = Sandbox.create()
    try:
        before = len(api_env.server.sandboxes.every())
        answer = httpx.post(
            f"{api_env.url}/sandboxes/{victim.sandbox_id}/fork",
            headers={"X-API-KEY": API_KEY},
            json={"count": count},
        )
        assert answer.status_code == 400, answer.text[:200]
        assert f"from 1 to {MAX_FORKS}" in answer.text
        assert len(api_env.server.sandboxes.every()) == before
    finally:
        victim.kill()
