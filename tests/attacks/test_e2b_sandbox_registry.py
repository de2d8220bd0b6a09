"""Attacks on the E2B server's saved sandboxes, which come back after a restart.

A local user or a sandbox's code writes ``<root>/.jupyter_exec/e2b-sandboxes/``
between two runs of ``jupyter-exec e2b``: a forged sandbox (with a salt of its
choosing, so a token it could compute if tokens were unkeyed), or a genuine
entry edited to change its id or to stretch its life. Each is skipped on the
next start: not listed, ``Sandbox.connect`` refused, its token opens nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import e2b_process

from jupyter_exec.e2b.saved import KIND
from jupyter_exec.manager.saved import registry_folder

pytestmark = pytest.mark.timeout(300)

FORGED = "sbx-" + "f" * 16


def test_forged_e2b_sandbox_entry_is_refused_and_its_token_opens_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with e2b_process(tmp_path, monkeypatch, "SIGTERM"):
        genuine = Sandbox.create(timeout=600)
    folder = tmp_path / registry_folder(KIND)
    entry = json.loads((folder / f"{genuine.sandbox_id}.json").read_text())
    forged = dict(entry["entry"], id=FORGED, salt="0" * 32, end=None)  # never ends
    (folder / f"{FORGED}.json").write_text(json.dumps({**entry, "entry": forged}))
    stretched = dict(entry["entry"], end=time.time() + 10 * 365 * 86400)
    (folder / f"{genuine.sandbox_id}.json").write_text(json.dumps({**entry, "entry": stretched}))
    (tmp_path / FORGED).mkdir()

    with e2b_process(tmp_path, monkeypatch, "SIGKILL") as url:
        assert [s.sandbox_id for s in Sandbox.list().next_items()] == []
        for sandbox_id in (FORGED, genuine.sandbox_id):
            with pytest.raises(Exception, match="not found"):
                Sandbox.connect(sandbox_id)
        for token in (genuine._envd_access_token, "0" * 32):
            response = httpx.post(
                f"{url}/execute",
                json={"code": "print(1)"},
                headers={"X-Access-Token": token or "", "E2b-Sandbox-Id": FORGED},
                timeout=30,
            )
            # 502 "not found" is E2B's own answer for a sandbox it does not run
            assert response.status_code in (401, 403, 502), response.text
            assert "print" not in response.text
        log = (tmp_path.parent / f"{tmp_path.name}-e2b.log").read_text()
        assert log.count("signature does not match") == 2
