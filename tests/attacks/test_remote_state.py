"""Attacks on a remote session's per-cell state, written as the remote kernel (its code is the
attacker's), on the loopback cluster through ``jupyter-exec gateway``.

The state is pickles the remote kernel wrote on its host. What must hold: nothing of it is
ever unpickled on this host (even with every file and a valid signature of ours lying in a
local work dir, only the origin rule stands between them and a local kernel, and it holds);
the host signs only the generations it asked for, and no signature comes home from the
kernel's folder; a manifest altered on the host after it was signed is never loaded.
"""

from __future__ import annotations

import ast
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec import Session
from jupyter_exec.state.generations import signed_on_disk
from tests.cluster.conftest import loopback_cluster  # noqa: F401  (the cluster's fixture)
from tests.cluster_gateway import RunningGateway
from tests.cluster_hosts import Cluster

PAYLOAD = (
    "import os\n"
    "MARKER = {marker!r}\n"
    "class Evil:\n"
    "    def __reduce__(self):\n"
    "        code = \"import os; open(%r + '-' + os.environ.get('JUPYTER_EXEC_HOST', "
    "'this-host'), 'w').close()\" % MARKER\n"
    "        return (exec, (code,))\n"
    "payload = Evil()\n"
    "mark = 'remote'"
)


def _session(gateway: RunningGateway, work: Path, name: str, **kwargs: Any) -> Session:
    return Session(
        backend="remote", url=gateway.url, token=gateway.token, work_dir=work, name=name,
        timeout=120, **kwargs,
    )  # fmt: skip


def _remote_state(s: Session) -> Path:
    cwd = ast.literal_eval(str(s.execute("import os; os.getcwd()").text))
    return Path(cwd) / f".{s.name}-{s.kernel_id}_state"


def test_a_remote_kernels_state_never_loads_on_this_host(
    gateway: RunningGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "payload-ran"
    work = tmp_path / "remote"
    with _session(gateway, work, "evil") as s:
        assert s.execute(PAYLOAD.format(marker=str(marker))).ok
        s.flush()
        # The attacker's best case: its pickles and manifests lie beside our signatures.
        shutil.copytree(_remote_state(s), work / ".evil_state", dirs_exist_ok=True)
    copy = tmp_path / "copied"
    shutil.copytree(work, copy)
    signed = signed_on_disk(copy, "evil")
    assert signed
    assert all(g.origin["backend"] == "remote" for g in signed)
    caplog.set_level(logging.WARNING, logger="jupyter_exec")
    with Session.resume(copy / "evil.ipynb") as here:  # a kernel on this host
        assert here.execute("mark").text == "'remote'"  # the recorded cells ran again
        assert here.execute("type(payload).__name__").text == "'Evil'"
    refused = [r.getMessage() for r in caplog.records if "not loaded" in r.getMessage()]
    assert any("written by a remote kernel" in m for m in refused), refused
    assert not list(tmp_path.glob("payload-ran-*")), "a remote kernel's pickle ran"


def test_a_remote_kernel_gets_no_generation_signed_it_was_not_asked_for_and_no_signature_home(
    gateway: RunningGateway, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    forge = (
        "import sys, os, json\n"
        "_g = sys.modules['_jupyter_exec_generations']\n"
        "_real = _g.commit\n"
        "def _forged(*args, **kwargs):\n"
        "    answer = _real(*args, **kwargs)\n"
        "    answer.setdefault('done', []).append([999, 'a' * 64, 1, 999])\n"
        "    return answer\n"
        "_g.commit = _forged\n"
        "os.makedirs('.forged_state/signed', exist_ok=True)\n"
        "open('.forged_state/signed/7.json', 'w').write(json.dumps({'generation': 7}))\n"
        "os.makedirs('forged_state/signed', exist_ok=True)\n"
        "open('forged_state/signed/8.json', 'w').write('{}')\n"
        "del _real, _forged, _g"
    )
    with _session(gateway, work, "forged") as s:
        assert s.execute("x = 1").ok
        ran = s.execute(forge)
        assert ran.ok, ran.error
        assert s.execute("y = 2").ok
        s.flush()
        numbers = sorted(int(p.stem) for p in (work / ".forged_state" / "signed").iterdir())
        assert numbers, "nothing was signed"
        assert max(numbers) <= 3, numbers  # only the generations it handed out
        assert 999 not in [g.number for g in signed_on_disk(work, "forged")]
        assert "7" not in [p.stem for p in (work / ".forged_state" / "signed").iterdir()]
        # Its non-hidden copy came home as a plain file, never as a signature.
        assert (work / "forged_state" / "signed" / "8.json").read_text() == "{}"
        assert all(g.number != 8 for g in signed_on_disk(work, "forged"))


def test_a_manifest_altered_on_the_host_after_it_was_signed_is_never_loaded(
    gateway: RunningGateway,
    loopback_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "payload-ran"
    with _session(gateway, tmp_path / "w", "altered") as s:
        assert s.execute(PAYLOAD.format(marker=str(marker))).ok
        s.flush()
        folder = _remote_state(s)
        newest = max(folder.glob("gen-*.json"), key=lambda p: int(p.stem[4:]))
        # A cell that binds nothing reuses that manifest; it appends to it on the host.
        altered = s.execute(f"open({str(newest)!r}, 'a').write(' ')")
        assert altered.ok, altered.error
        s.flush()
        kernel_id = str(s.kernel_id)

        def kill(event: dict[str, Any]) -> None:
            if "running" in str(event.get("text", "")):
                os.kill(loopback_cluster.kernel_process(kernel_id).pid, signal.SIGKILL)

        died = s.execute(
            "print('running', flush=True)\nimport time\ntime.sleep(120)", on_output=kill
        )
        assert died.status == "died", died
        assert died.recovered is None, died.recovered
        assert died.error is not None
        assert "did not load" in died.error.evalue, died.error
        assert s.execute("mark").status == "error"  # nothing of that state was loaded
    assert not list(tmp_path.glob("payload-ran-*"))
