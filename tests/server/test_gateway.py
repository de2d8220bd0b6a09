"""``--gateway-url``: the extension's sessions run unchanged on a remote gateway's kernels.

Two real servers on loopback: one plain jupyter_server acting as the gateway (it owns the
kernels, as Enterprise Gateway would on Kubernetes), and one with the extension and
``--GatewayClient.url`` pointing at it.

The gateway runs without a token: jupyter_server's ``GatewayKernelClient`` (what
``kernel_manager.get_kernel(id).client()`` returns in gateway mode) opens its kernel websocket
without ``GatewayClient``'s auth headers, so a token-protected gateway refuses it (403). That is
upstream's limitation, for any in-server client of a gateway kernel, not this extension's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from server_helpers import JupyterProcess


def test_sessions_run_on_a_gateway(tmp_path: Path) -> None:
    gateway_server = JupyterProcess(
        tmp_path / "gateway",
        "--ServerApp.disable_check_xsrf=True",
        token="",
        enable_extension=False,
    )
    with (
        gateway_server as gateway,
        JupyterProcess(tmp_path / "server", f"--GatewayClient.url={gateway.url}") as server,
    ):

        def call(method: str, path: str = "", **body: Any) -> requests.Response:
            url = f"{server.url}/api/exec/sessions{path}"
            return requests.request(method, url, json=body, headers=server.headers, timeout=90)

        def gateway_kernels() -> list[str]:
            found = requests.get(f"{gateway.url}/api/kernels", timeout=10).json()
            return [k["id"] for k in found]

        created = call("POST", name="remote")
        assert created.status_code == 201, (created.text, server.tail())
        sid, kernel_id = created.json()["id"], created.json()["kernel"]["id"]
        assert kernel_id in gateway_kernels()  # the kernel lives on the gateway

        out = call("POST", f"/{sid}/execute", code="import os\nv = os.getpid()\nprint('hi')\nv")
        assert (out.json()["status"], out.json()["stdout"]) == ("ok", "hi\n"), out.text
        assert call("POST", f"/{sid}/execute", code="v").json()["text"] == out.json()["text"]
        stream = call("POST", f"/{sid}/execute/stream", code="print('streamed')")
        assert 'event: output\ndata: {"output_type": "stream"' in stream.text
        assert "event: result" in stream.text

        assert call("POST", f"/{sid}/restart").status_code == 200
        lost = call("POST", f"/{sid}/execute", code="v").json()
        assert lost["error"]["ename"] == "NameError"
        nb = json.loads((server.root / "jupyter-exec" / "remote" / "remote.ipynb").read_text())
        assert len(nb["cells"]) == 4

        assert call("DELETE", f"/{sid}").status_code == 204
        assert kernel_id not in gateway_kernels()
