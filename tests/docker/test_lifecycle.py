"""Docker kernels that get interrupted, killed, restarted, starved and orphaned, for real."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest

from jupyter_exec.docker.image import BuildOptions, build_image
from jupyter_exec.docker.reap import L_KEEP, L_PID, LABEL, reap
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.exceptions import ImageError, KernelStartError

if TYPE_CHECKING:
    from tests.docker.conftest import StartKernel

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="session")]


def _containers(client: docker.DockerClient, **labels: str) -> list[Any]:
    wanted = [f"{LABEL}=1", *(f"{k}={v}" for k, v in labels.items())]
    return list(client.containers.list(ignore_removed=True, all=True, filters={"label": wanted}))


async def test_interrupt_keeps_state_even_with_a_child_process(start_kernel: StartKernel) -> None:
    kernel = await start_kernel()
    await kernel.run("x = 42")
    for code in (
        "import time; time.sleep(30)",
        "import subprocess; subprocess.run(['sleep', '30'])",
    ):
        started = time.monotonic()
        pending = asyncio.ensure_future(kernel.run(code, timeout=20))
        await asyncio.sleep(0.5)
        await kernel.km.interrupt_kernel()  # interrupt_request on the control channel
        run = await pending
        assert run.error is not None
        assert run.error["ename"] == "KeyboardInterrupt"
        # Stopped by the interrupt, not by the 30 s the cell would take (nor the 20 s timeout):
        # a bound against the cell, not the machine's speed (5 s failed once at load 20).
        assert time.monotonic() - started < 15
    # the signal fallback: SIGINT through the engine, forwarded by docker-init
    pending = asyncio.ensure_future(kernel.run("import time; time.sleep(30)", timeout=20))
    await asyncio.sleep(0.5)
    await kernel.km.signal_kernel(signal.SIGINT)
    assert (await pending).error["ename"] == "KeyboardInterrupt"  # type: ignore[index]
    assert (await kernel.run("x")).result == "42"


async def test_oom_kill_is_detected_and_explained(start_kernel: StartKernel) -> None:
    kernel = await start_kernel(memory="256m")
    kernel.kc.execute("hog = bytearray(b'x') * (700 << 20)")
    took = await kernel.wait_dead(timeout=20)
    description = await kernel.provisioner.exit_description()
    assert "out-of-memory killer" in description
    assert "256m" in description
    assert took < 20


async def test_docker_kill_is_detected_within_a_second(
    start_kernel: StartKernel, docker_client: docker.DockerClient
) -> None:
    kernel = await start_kernel()
    assert await kernel.km.is_alive()
    docker_client.api.kill(kernel.container_id)
    took = await kernel.wait_dead(timeout=5)
    assert took < 1.0
    assert await kernel.provisioner.exit_description() == (
        "killed by `docker kill` (SIGKILL, exit code 137)"
    )


async def test_pids_limit_holds_a_fork_bomb(start_kernel: StartKernel) -> None:
    kernel = await start_kernel(pids_limit=64)
    _code, output = await kernel.provisioner.run_command(
        ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 3"], timeout=1.5
    )
    assert "fork" in output.lower() or "resource temporarily unavailable" in output.lower()
    run = await kernel.run(
        "import threading, time\n"
        "started = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()\n"
        "        started += 1\n"
        "except RuntimeError as e:\n"
        "    print('refused after', started)\n"
    )
    assert run.stdout.startswith("refused after"), run
    assert int(run.stdout.split()[-1]) < 64
    await asyncio.sleep(1.2)
    assert (await kernel.run("1 + 1")).result == "2"  # the kernel survived both


async def test_restart_now_and_graceful(
    start_kernel: StartKernel, docker_client: docker.DockerClient
) -> None:
    kernel = await start_kernel()
    for now in (True, False):
        await kernel.run("y = 1")
        old = kernel.container_id
        await kernel.km.restart_kernel(now=now)
        # IOPub too, not just shell: the first cell's output must not be lost to a
        # SUB socket that has not reconnected yet.
        await KernelHandle(km=kernel.km, kc=kernel.kc).wait_ready(30)
        assert kernel.container_id != old
        assert (await kernel.run("'y' in dir()")).result == "False"
        assert (await kernel.run("y = 2; y")).result == "2"
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(old)


async def test_shutdown_removes_container_and_run_dir(
    start_kernel: StartKernel, docker_client: docker.DockerClient
) -> None:
    kernel = await start_kernel()
    container_id, run_dir = kernel.container_id, kernel.provisioner._run_dir
    assert run_dir.is_dir()
    assert len(f"{run_dir}/k-5") <= 107
    started = time.monotonic()
    kernel.kc.stop_channels()
    await kernel.km.shutdown_kernel()
    assert time.monotonic() - started < 3
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container_id)
    assert not run_dir.exists()


async def test_keep_container_for_inspection(
    start_kernel: StartKernel, docker_client: docker.DockerClient
) -> None:
    kernel = await start_kernel(auto_remove=False)
    await kernel.run("print('for the record')")
    container_id = kernel.container_id
    kernel.kc.stop_channels()
    await kernel.km.shutdown_kernel()
    try:
        kept = docker_client.containers.get(container_id)
        assert kept.status == "exited"
        assert kept.labels[L_KEEP] == "1"
    finally:
        docker_client.api.remove_container(container_id, force=True)


async def test_reap_removes_orphans_of_a_dead_process(
    kernel_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, os, sys
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
        from jupyter_client.manager import AsyncKernelManager
        import jupyter_exec.docker.launch
        # Its watchdog dies with it (as a SIGKILL of its process group would do): the orphan
        # is reap's alone, not a race between the two.
        jupyter_exec.docker.launch.ensure_watchdog = lambda *args, **kwargs: None
        spec = KernelSpec(
            argv=["python", "-m", "ipykernel_launcher", "-f", "{{connection_file}}"],
            language="python",
            metadata={{"kernel_provisioner": {{"provisioner_name": "jupyter-exec-docker",
                       "config": {{"image": {kernel_image!r}}}}}}},
        )
        class One(KernelSpecManager):
            def get_kernel_spec(self, name): return spec
        async def main():
            km = AsyncKernelManager(kernel_name="x", kernel_spec_manager=One())
            await km.start_kernel(cwd={str(tmp_path)!r})
            print(km.provisioner._container_id, km.provisioner._run_dir, flush=True)
            os._exit(0)  # a crash: no shutdown, no atexit
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    container_id, run_dir = done.stdout.split()
    orphan = docker_client.containers.get(container_id)
    assert orphan.labels[L_PID] != str(os.getpid())
    assert Path(run_dir).is_dir()
    result = reap(docker_client)
    assert orphan.name in result.removed
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container_id)
    assert not Path(run_dir).exists()


async def test_root_owned_work_dir_is_lent_then_taken_back(
    start_kernel: StartKernel, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    work = tmp_path / "rootwork"
    work.mkdir()
    (work / "input.txt").write_text("from root\n")
    before = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in [work, *work.iterdir()]}
    kernel = await start_kernel(work_dir=work, owner=None)
    run = await kernel.run(
        "import os\n"
        "print(os.getuid(), open('input.txt').read().strip())\n"
        "open('made.txt', 'w').write('x')\n"
        "open('made.txt', 'a').write('y')\n"
        "try:\n"
        "    open('input.txt', 'a')\n"
        "except PermissionError:\n"
        "    print('read-only')\n"
    )
    assert run.stdout.splitlines() == ["65532 from root", "read-only"]  # not root
    assert (work / "made.txt").stat().st_uid == 65532  # the kernel's own file
    kernel.kc.stop_channels()
    await kernel.km.shutdown_kernel()
    after = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in [work, *work.iterdir()]}
    assert after.pop("made.txt")[0] == 65532
    assert after == before  # owner and mode of the user's entries never changed
    assert (work / "input.txt").read_text() == "from root\n"


async def test_network_when_enabled(start_kernel: StartKernel) -> None:
    kernel = await start_kernel(network=True)
    run = await kernel.run("import os; print(sorted(os.listdir('/sys/class/net')))")
    assert "eth0" in run.stdout


async def test_volumes_env_and_bind_dir(start_kernel: StartKernel, tmp_path: Path) -> None:
    data, engine_view = tmp_path / "data", tmp_path / "engine-view"
    data.mkdir()
    (data / "ref.txt").write_text("reference")
    engine_view.mkdir()
    (engine_view / "seen.txt").write_text("through bind_dir")
    os.chown(engine_view, 1000, 1000)
    kernel = await start_kernel(
        volumes=[f"{data}:/data", f"{tmp_path}:/scratch:rw"],
        env={"GREETING": "hello"},
        bind_dir=str(engine_view),
    )
    run = await kernel.run(
        "import os\n"
        "print(open('/data/ref.txt').read(), os.environ['GREETING'], open('seen.txt').read())\n"
        "try:\n"
        "    open('/data/new', 'w')\n"
        "except OSError as e:\n"
        "    print('read-only', e.errno)\n"
    )
    assert run.stdout.splitlines() == ["reference hello through bind_dir", "read-only 30"]


async def test_too_long_socket_path_is_a_clear_error(
    kernel_image: str, start_raw: Any, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    with pytest.raises(KernelStartError, match="107"):
        await start_raw(tmp_path, image=kernel_image, run_root=str(deep))


async def test_missing_image_is_a_clear_error(
    docker_client: docker.DockerClient, start_raw: Any, tmp_path: Path
) -> None:
    with pytest.raises(ImageError, match="jupyter-exec image build --tag no/such:image"):
        await start_raw(tmp_path, image="no/such:image", build_if_missing=False)


async def test_failed_build_shows_the_log_tail(
    docker_client: docker.DockerClient, kernel_image: str, tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {kernel_image}\nRUN echo preparing the broken step && exit 3\n")
    lines: list[str] = []
    with pytest.raises(ImageError) as failure:
        build_image(
            docker_client,
            BuildOptions(tag="jx-test/broken:1", dockerfile=str(dockerfile)),
            on_line=lines.append,
        )
    assert "returned a non-zero code: 3" in str(failure.value)
    assert "preparing the broken step" in failure.value.log_tail
    assert any("preparing the broken step" in line for line in lines)  # streamed as it ran


async def test_a_kernel_that_cannot_start_says_why(
    kernel_image: str, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    from jupyter_client.manager import AsyncKernelManager

    spec_manager = _spec_manager(
        image=kernel_image,
        run_kwargs={"entrypoint": ["sh", "-c", "echo no kernel here >&2; exit 3"]},
    )
    km = AsyncKernelManager(kernel_name="broken", kernel_spec_manager=spec_manager)
    await km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        with pytest.raises(RuntimeError, match="died"):
            await kc.wait_for_ready(timeout=20)
        assert await km.provisioner.exit_description() == (
            "exited with code 3; its last output:\nno kernel here"
        )
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def _spec_manager(**config: Any) -> Any:
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    spec = KernelSpec(
        argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        language="python",
        metadata={
            "kernel_provisioner": {"provisioner_name": "jupyter-exec-docker", "config": config}
        },
    )

    class One(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return spec

    return One()


async def test_jupyter_server_starts_the_installed_kernelspec(
    kernel_image: str, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """What JupyterLab does on choosing "Python 3 (Docker)" for a notebook in a folder."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    from jupyter_exec.docker.resources import kernels_dir

    notebooks = tmp_path / "notebooks"
    (notebooks / "project").mkdir(parents=True)
    os.chown(notebooks / "project", 1000, 1000)
    manager = AsyncMappingKernelManager(
        root_dir=str(notebooks),
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels_dir())]),
    )
    kernel_id = await manager.start_kernel(kernel_name="python3-docker", path="project")
    try:
        km = manager.get_kernel(kernel_id)
        kc = km.client()
        kc.start_channels()
        await KernelHandle(km=km, kc=kc).wait_ready(30)
        msg_id = kc.execute("import os; open('from-lab.txt', 'w').write(os.getcwd())")
        reply = await kc.get_shell_msg(timeout=20)
        while reply["parent_header"].get("msg_id") != msg_id:  # skip kernel_info replies
            reply = await kc.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "ok"
        kc.stop_channels()
        written = notebooks / "project" / "from-lab.txt"
        assert written.read_text() == "/work"
        assert written.stat().st_uid == 1000
    finally:
        await manager.shutdown_kernel(kernel_id, now=True)
