"""R, Bash and Deno kernels in the hardened container (``jupyter-exec/kernel:languages``):
the same sessions as on this machine, with a read-only root, no network, no capabilities
and a non-root user; Deno's cache on the tmpfs; its kernel behind the ipc sockets."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from jupyter_exec import CheckpointError, ForkError, Session, replay
from jupyter_exec.docker.image import (
    IMAGE_LANGUAGES,
    LANGUAGES_IMAGE,
    BuildOptions,
    build_image,
    image_exists,
)
from jupyter_exec.docker.reap import L_PID, LABEL
from tests.docker.conftest import TEST_BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.languages]

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")
def languages_image(docker_client: docker.DockerClient, kernel_image: str) -> str:
    """The kernel image with R, Bash and Deno (built on ``kernel_image`` when missing)."""
    options = BuildOptions(languages=IMAGE_LANGUAGES, base_image=TEST_BASE_IMAGE)
    if not image_exists(docker_client, LANGUAGES_IMAGE):
        build_image(docker_client, options)
    return LANGUAGES_IMAGE


def _owned_work(base: Path) -> Path:
    work = base / "work"
    work.mkdir()
    os.chown(work, 1000, 1000)
    return work


@pytest.fixture(scope="module")
def r_docker(languages_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    work = _owned_work(tmp_path_factory.mktemp("r-docker"))
    with Session(language="r", backend="docker", work_dir=work, name="r") as s:
        yield s


@pytest.fixture(scope="module")
def deno_docker(
    languages_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    work = _owned_work(tmp_path_factory.mktemp("deno-docker"))
    with Session(language="ts", backend="docker", work_dir=work, name="ts") as s:
        yield s


def test_the_languages_image_is_built_on_the_kernel_image(
    docker_client: docker.DockerClient, languages_image: str
) -> None:
    """``image build --languages`` adds the kernels on top of the Python image (its
    layers reused, so a rebuild with nothing changed is all cache)."""
    tag = build_image(
        docker_client,
        BuildOptions(languages=IMAGE_LANGUAGES, base_image=TEST_BASE_IMAGE),
        on_line=lambda line: None,
    )
    assert tag == languages_image
    image = docker_client.images.get(tag)
    assert image.labels["io.jupyter-exec.languages"] == "r bash javascript typescript"
    python_layers = docker_client.images.get("jupyter-exec/kernel:latest").attrs["RootFS"]
    assert (
        image.attrs["RootFS"]["Layers"][: len(python_layers["Layers"])] == (python_layers["Layers"])
    )


def test_r_in_docker_keeps_state_draws_and_tables(r_docker: Session) -> None:
    assert r_docker.execute("x <- 41").ok
    assert r_docker.execute("x + 1").results[0].text == "[1] 42"
    plot = r_docker.execute("plot(1:10)")
    (png,) = [f for f in plot.files if f.suffix == ".png"]
    assert png.read_bytes().startswith(PNG)
    frame = r_docker.execute("data.frame(k = c('a', 'b'), v = 1:2)")
    assert "<table" in (frame.results[0].html or "")
    failed = r_docker.execute("stop('bad input')")
    assert failed.error is not None
    assert "bad input" in failed.error.evalue


def test_r_in_docker_cannot_write_the_image_or_reach_the_network(r_docker: Session) -> None:
    denied = r_docker.execute("cat(file.create('/usr/lib/x'), Sys.info()[['user']] != 'root')")
    assert denied.stdout.startswith("FALSE TRUE"), denied.stdout + denied.stderr
    offline = r_docker.execute(
        "tryCatch({ url('http://1.1.1.1', open = 'r'); 'reached' }, error = function(e) 'refused')"
    )
    assert offline.results[0].text == '[1] "refused"'


def test_the_kernel_container_is_hardened(
    r_docker: Session, docker_client: docker.DockerClient
) -> None:
    labels = [f"{LABEL}=1", f"{L_PID}={os.getpid()}"]
    mine = [
        c
        for c in docker_client.containers.list(filters={"label": labels})
        if c.attrs["Config"]["Image"] == LANGUAGES_IMAGE
        and "IRkernel::main()" in c.attrs["Config"]["Cmd"]
    ]
    assert mine, "the R session's container was not found"
    host = mine[0].attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["NetworkMode"] == "none"
    assert "no-new-privileges" in " ".join(host["SecurityOpt"] or [])
    assert mine[0].attrs["Config"]["User"] not in ("", "0", "root", "0:0")


def test_deno_in_docker_keeps_state_displays_and_caches_modules_on_the_tmpfs(
    deno_docker: Session,
) -> None:
    assert deno_docker.execute("let n: number = 1").ok
    for i in range(2, 12):
        assert deno_docker.execute(f"n += {i}; n").text == str(i * (i + 1) // 2)
    shown = deno_docker.execute("Deno.jupyter.html`<p>${n}</p>`")
    assert [f.read_text() for f in shown.files] == ["<p>66</p>"]
    # A local TypeScript module: Deno transpiles and caches it in DENO_DIR (the tmpfs).
    (deno_docker.work_dir / "double.ts").write_text(
        "export const double = (x: number): number => 2 * x;\n"
    )
    imported = deno_docker.execute("const { double } = await import('./double.ts'); double(n)")
    assert imported.text == "132", imported.error
    assert deno_docker.execute("Deno.env.get('DENO_DIR')").text == '"/tmp/.deno"'
    offline = deno_docker.execute(
        "try { await fetch('http://1.1.1.1'); 'reached' } catch (e) { e.name }"
    )
    assert offline.text == '"TypeError"'


def test_deno_in_docker_is_interrupted_and_keeps_its_state(deno_docker: Session) -> None:
    stopped = deno_docker.execute("while (true) {}", timeout=1.5)
    assert stopped.status == "timeout"
    assert not stopped.state_lost
    assert deno_docker.execute("n").text == "66"


@pytest.mark.parametrize(
    ("language", "setup", "runaway", "check", "expected"),
    [
        ("bash", "KEPT=7", "sleep 60", "echo $((KEPT * 6))", "42\n"),
        ("r", "kept <- 7", "Sys.sleep(60)", "cat(kept * 6)", "42"),
    ],
)
def test_a_docker_timeout_interrupts_and_keeps_the_state(
    languages_image: str,
    tmp_path: Path,
    language: str,
    setup: str,
    runaway: str,
    check: str,
    expected: str,
) -> None:
    with Session(
        language=language, backend="docker", work_dir=_owned_work(tmp_path), interrupt_grace=10
    ) as s:
        s.execute(setup).raise_for_error()
        stopped = s.execute(runaway, timeout=1.5)
        assert (stopped.status, stopped.state_lost) == ("timeout", False)
        assert s.execute(check, timeout=30).stdout == expected


def test_an_r_notebook_recorded_in_docker_replays_in_docker(
    languages_image: str, tmp_path: Path
) -> None:
    work = _owned_work(tmp_path)
    with Session(language="r", backend="docker", work_dir=work, name="rec") as s:
        s.execute("x <- 6").raise_for_error()
        s.execute("cat(x * 7)").raise_for_error()
        notebook = s.notebook_path
    assert notebook is not None
    meta = json.loads(notebook.read_text())["metadata"]
    assert meta["kernelspec"]["name"] == "ir"
    assert meta["language_info"]["name"] == "R"
    report = replay(notebook, backend="docker")
    assert report.reproduced, report.problems()


def test_python_only_features_are_refused_in_docker_too(r_docker: Session) -> None:
    with pytest.raises(ForkError, match="needs an IPython kernel"):
        r_docker.fork()
    with pytest.raises(CheckpointError, match="needs an IPython kernel"):
        r_docker.checkpoint()
    # A cell decides the stream guard: run one here, not rely on another test of the module
    # running first on this worker (the fixture is made again by each xdist worker).
    assert r_docker.execute("1").ok
    kernel = r_docker._async._kernel
    assert kernel is not None
    assert kernel.stream_guard is False
