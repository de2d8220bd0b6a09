"""A default Docker kernel, proven against a real container: state, files, isolation, limits."""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.docker.conftest import Kernel

OWNER = (1000, 1000)  # conftest.OWNER: who owns the test work dirs

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="session")]


async def test_state_persists_across_cells_in_the_work_dir(shared_kernel: Kernel) -> None:
    assert (await shared_kernel.run("x = 21 * 2")).status == "ok"
    run = await shared_kernel.run(
        "import os, getpass\n"
        "print(x, os.getcwd(), os.getuid(), getpass.getuser(), os.environ['HOME'])"
    )
    assert run.stdout.split() == ["42", "/work", str(OWNER[0]), run.stdout.split()[3], "/tmp"]
    assert (await shared_kernel.run("x + 1")).result == "43"


async def test_plot_is_displayed_and_saved_owned_by_the_work_dir_owner(
    shared_kernel: Kernel,
) -> None:
    run = await shared_kernel.run(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.savefig('plot.png'); plt.show()",
        timeout=60,
    )
    assert run.status == "ok", run.error
    png = [o for o in run.outputs if "image/png" in o["content"]["data"]]
    assert png, "plt.show() produced no image/png display_data"
    assert base64.b64decode(png[0]["content"]["data"]["image/png"]).startswith(b"\x89PNG")
    saved = shared_kernel.work_dir / "plot.png"
    assert saved.read_bytes().startswith(b"\x89PNG")
    assert (saved.stat().st_uid, saved.stat().st_gid) == OWNER


async def test_no_network_by_default(shared_kernel: Kernel) -> None:
    run = await shared_kernel.run(
        "import os, socket\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
        "except OSError as e:\n"
        "    print('blocked', e.errno)\n"
    )
    assert run.stdout.splitlines()[0] == "['lo']"
    assert run.stdout.splitlines()[1].startswith("blocked")


async def test_only_the_work_dir_and_tmp_are_writable(shared_kernel: Kernel) -> None:
    run = await shared_kernel.run(
        "import errno\n"
        "paths = ['/etc/x', '/opt/kernel/x', '/x', '/run/jx/x', '/run/jxc/x',\n"
        "         '/run/jxc/kernel.json', '/work/ok.txt', '/tmp/ok.txt']\n"
        "for path in paths:\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print(path, 'ok')\n"
        "    except OSError as e:\n"
        "        print(path, errno.errorcode[e.errno])\n"
    )
    results = dict(line.split() for line in run.stdout.splitlines())
    assert results == {
        "/etc/x": "EROFS",
        "/opt/kernel/x": "EROFS",
        "/x": "EROFS",
        "/run/jx/x": "ok",  # the private socket dir; nothing else of the host is writable
        "/run/jxc/x": "EROFS",  # the connection file's folder: the host writes there
        "/run/jxc/kernel.json": "EROFS",
        "/work/ok.txt": "ok",
        "/tmp/ok.txt": "ok",
    }
    assert (shared_kernel.work_dir / "ok.txt").stat().st_uid == OWNER[0]


async def test_no_capabilities_and_no_new_privileges(shared_kernel: Kernel) -> None:
    run = await shared_kernel.run(
        "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "print(status['CapEff'].strip(), status['CapBnd'].strip(), status['NoNewPrivs'].strip())\n"
        "import os; print(os.getppid())"
    )
    caps_eff, caps_bnd, nnp, ppid = run.stdout.split()
    assert int(caps_eff, 16) == int(caps_bnd, 16) == 0
    assert nnp == "1"
    assert ppid == "1"  # docker-init is PID 1, the kernel is not


async def test_limits_are_set(shared_kernel: Kernel, docker_client: object) -> None:
    info = shared_kernel.provisioner._client().api.inspect_container(shared_kernel.container_id)
    host = info["HostConfig"]
    assert host["Memory"] == host["MemorySwap"] == 2 * 1024**3
    assert host["NanoCpus"] == 10**9
    assert host["PidsLimit"] == 256
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert info["Config"]["User"] == f"{OWNER[0]}:{OWNER[1]}"


async def test_run_command_combines_output_in_order(shared_kernel: Kernel) -> None:
    code, output = await shared_kernel.provisioner.run_command(
        ["sh", "-c", "echo one; echo two >&2; echo three; pwd; exit 3"], timeout=20
    )
    assert (code, output) == (3, "one\ntwo\nthree\n/work\n")
    code, output = await shared_kernel.provisioner.run_command(
        ["python", "-c", "import time; print('started'); time.sleep(30)"], timeout=1
    )
    assert code == 124
    assert output.startswith("started\n")
    assert "timed out" in output
    code, output = await shared_kernel.provisioner.run_command(["no-such-program"], timeout=5)
    assert code == 127
    assert "No such file" in output


async def test_host_env_does_not_leak_but_the_callers_does(shared_kernel: Kernel) -> None:
    run = await shared_kernel.run("import os; print(os.environ['PATH'])")
    assert run.stdout.strip().startswith("/opt/kernel/bin")
    assert os.environ["PATH"] != run.stdout.strip()


async def test_resolve_path(shared_kernel: Kernel) -> None:
    (shared_kernel.work_dir / "data.csv").write_text("a\n")
    expected = str(shared_kernel.work_dir / "data.csv")
    assert shared_kernel.km.resolve_path("data.csv") == expected
    assert shared_kernel.km.resolve_path("/work/data.csv") == expected
    assert shared_kernel.km.resolve_path("/etc/passwd") is None
    assert shared_kernel.km.resolve_path("../../etc/passwd") is None
