"""Languages by name, without a kernel: aliases, each language's kernel, the options that
refuse a contradiction, the Docker kernelspecs and image tags, and the pools' keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_exec import InvalidArgument, SessionOptions
from jupyter_exec.docker.image import (
    IMAGE_LANGUAGES,
    LANGUAGES_IMAGE,
    BuildOptions,
    image_languages,
)
from jupyter_exec.docker.resources import kernels_dir
from jupyter_exec.engine.languages import (
    LANGUAGES,
    canonical_language,
    kernel_for,
    language_of_kernel,
    normalise_language,
)
from jupyter_exec.manager.pool import PoolKey
from jupyter_exec.session import backends


@pytest.mark.parametrize(
    ("name", "language", "kernel"),
    [
        ("python", "python", "python3"),
        ("py", "python", "python3"),
        ("R", "r", "ir"),
        ("r", "r", "ir"),
        ("bash", "bash", "bash"),
        ("sh", "bash", "bash"),
        ("js", "javascript", "deno"),
        ("JavaScript", "javascript", "deno"),
        ("ts", "typescript", "deno"),
        ("typescript", "typescript", "deno"),
    ],
)
def test_each_language_and_alias_names_one_kernel(name: str, language: str, kernel: str) -> None:
    assert canonical_language(name) == language
    assert kernel_for(name) == kernel
    assert language in LANGUAGES


@pytest.mark.parametrize("bad", ["cobol", "", "  ", "r bash", "python; rm -rf /", 3, None])
def test_an_unknown_language_is_refused_naming_the_choices_and_the_install_command(
    bad: object,
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        canonical_language(bad)
    assert "python, r, bash, javascript, typescript" in str(refused.value)
    if isinstance(bad, str) and bad.strip():
        assert "jupyter-exec kernels install" in str(refused.value)


def test_code_fences_keep_shell_as_sh_and_name_the_new_languages() -> None:
    assert normalise_language("bash") == "sh"
    assert normalise_language("sh") == "sh"
    assert normalise_language("py") == "python"
    assert normalise_language("R") == "r"
    assert normalise_language("js") == "javascript"
    assert normalise_language("ts") == "typescript"
    assert normalise_language("{.typescript}") == "typescript"
    assert normalise_language("sql") == "sql"
    assert normalise_language("", "$ ls") == "sh"


def test_a_kernelspec_name_says_its_language() -> None:
    assert language_of_kernel("ir") == "r"
    assert language_of_kernel("deno") == "typescript"
    assert language_of_kernel("python3") == "python"
    assert language_of_kernel("julia-1.10") is None
    assert language_of_kernel("my-r", "R") == "r"


def test_options_take_a_language_and_set_its_kernel() -> None:
    assert SessionOptions(language="R").kernel_name == "ir"
    assert SessionOptions(language="R").language == "r"
    assert SessionOptions(language="ts").kernel_name == "deno"
    assert SessionOptions(language="bash", kernel_name="bash").kernel_name == "bash"
    assert SessionOptions().language is None


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"language": "r", "kernel_name": "bash"}, "give one of them"),
        ({"language": "r", "python": "/usr/bin/python3"}, "python= names a Python interpreter"),
        ({"language": "r", "undo_steps": 2}, "undo_steps needs a Python kernel"),
        ({"language": "klingon"}, "unknown language"),
    ],
)
def test_options_refuse_a_language_that_contradicts_another_option(
    given: dict[str, object], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        SessionOptions(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kernel", "argv0", "interrupt"),
    [
        ("python3", "python", "message"),
        ("ir", "R", "signal"),
        ("bash", "python", "signal"),
        ("deno", "python", "message"),
    ],
)
def test_a_docker_kernel_of_each_language_runs_its_kernel_in_the_image(
    kernel: str, argv0: str, interrupt: str
) -> None:
    spec = backends.docker_kernel_spec({"memory": "1g"}, kernel)
    assert spec.argv[0] == argv0
    assert any("{connection_file}" in arg for arg in spec.argv)
    assert spec.interrupt_mode == interrupt
    config = spec.metadata["kernel_provisioner"]["config"]
    assert config["memory"] == "1g"
    if kernel == "python3":
        assert "image" not in config  # the provisioner's default image
    else:
        assert config["image"] == LANGUAGES_IMAGE == backends.LANGUAGES_IMAGE
    mine = backends.docker_kernel_spec({"image": "my/kernel:r"}, kernel)
    assert mine.metadata["kernel_provisioner"]["config"]["image"] == "my/kernel:r"


@pytest.mark.parametrize("kernel", ["ir", "bash", "deno"])
def test_the_shipped_docker_kernelspecs_match_what_sessions_run(kernel: str) -> None:
    """JupyterLab's "R (Docker)" and a Session(language="r", backend="docker") run the same."""
    shipped = json.loads((kernels_dir() / f"{kernel}-docker" / "kernel.json").read_text())
    ours = backends.docker_kernel_spec({}, kernel)
    assert shipped["argv"] == ours.argv
    assert shipped["interrupt_mode"] == ours.interrupt_mode
    assert shipped["metadata"]["kernel_provisioner"]["config"]["image"] == LANGUAGES_IMAGE
    assert shipped["metadata"]["kernel_provisioner"]["config"]["network"] is False
    language = language_of_kernel(kernel)
    assert language is not None
    assert backends.language_kernelspec(language, "docker") == f"{kernel}-docker"
    assert backends.language_kernelspec(language, "local") == kernel


def test_image_languages_parse_and_tag() -> None:
    assert image_languages("typescript,r") == ("r", "typescript")
    assert image_languages("R, sh,js,python") == ("r", "bash", "javascript")
    with pytest.raises(InvalidArgument):
        image_languages("r,cobol")
    assert BuildOptions(languages=IMAGE_LANGUAGES).resolved_tag() == LANGUAGES_IMAGE
    assert BuildOptions(languages=("r",)).resolved_tag() == "jupyter-exec/kernel:languages-r"
    assert BuildOptions(languages=("r",), tag="me/r:1").resolved_tag() == "me/r:1"
    custom = BuildOptions(languages=("r",), pip_packages=("polars",)).resolved_tag()
    assert custom.startswith("jupyter-exec/kernel:custom-")
    assert custom != BuildOptions(pip_packages=("polars",)).resolved_tag()
    assert BuildOptions().resolved_tag() == "jupyter-exec/kernel:latest"
    assert BuildOptions(languages=("r",)).python_layer().resolved_tag() == (
        "jupyter-exec/kernel:latest"
    )


def test_the_languages_dockerfile_ships_beside_the_kernel_image() -> None:
    folder = kernels_dir() / "languages"
    dockerfile = (folder / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE" in dockerfile
    assert "DENO_DIR=/tmp/" in dockerfile  # Deno's cache on the tmpfs of a read-only root
    assert (folder / "deno_kernel.py").is_file()
    setup = (Path(__file__).parents[2] / "setup.cfg").read_text()
    for shipped in ("languages/Dockerfile", "languages/deno_kernel.py", "ir-docker/kernel.json"):
        assert f"kernels/{shipped}" in setup


def test_a_pool_key_follows_the_language_to_its_kernel() -> None:
    r = PoolKey.of({"language": "r"})
    assert r is not None
    assert r.kernel_name == "ir"
    assert PoolKey.of({"language": "R", "kernel_name": "python3"}) == r
    assert PoolKey.of({}) != r


def test_java_is_a_local_language_only_for_now() -> None:
    assert kernel_for("Java") == "java"
    assert SessionOptions(language="java").kernel_name == "java"
    with pytest.raises(InvalidArgument, match="this machine's kernel only"):
        SessionOptions(language="java", backend="docker")
    with pytest.raises(InvalidArgument, match="Java has no Docker kernel"):
        backends.docker_kernel_spec({}, "java")
    with pytest.raises(InvalidArgument, match="Java has no Docker kernel"):
        backends.language_kernelspec("java", "docker")
    with pytest.raises(InvalidArgument, match="no Docker kernel for java"):
        image_languages("r,java")
