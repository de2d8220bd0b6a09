"""Pure unit tests: options -> ``containers.run`` kwargs, uid choice, exit descriptions, traits.

No engine needed; these run everywhere.
"""

from __future__ import annotations

import errno
import json
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_exec.cli import docker_main as cli_main
from jupyter_exec.docker import PROVISIONER_NAME
from jupyter_exec.docker.engine import is_rootless
from jupyter_exec.docker.image import DEFAULT_IMAGE, BuildOptions
from jupyter_exec.docker.options import (
    Limits,
    Mount,
    RunSpec,
    Security,
    forwarded_env,
    network_mode,
    parse_volume,
    run_kwargs,
    split_user,
)
from jupyter_exec.docker.ownership import Loan, choose_user, lend, take_back
from jupyter_exec.docker.provisioner import DockerProvisioner
from jupyter_exec.docker.resources import kernels_dir, kernelspec_dirs
from jupyter_exec.docker.watcher import describe_exit
from jupyter_exec.exceptions import WorkDirError


def spec(**changes: object) -> RunSpec:
    base = RunSpec(
        image="img",
        command=("python", "-m", "ipykernel_launcher", "-f", "/run/jx/kernel.json"),
        name="jx-test",
        user="1000:1000",
        work_mount=Mount("/home/u/work", "/work", read_only=False),
        run_mount=Mount("/tmp/jx-abc", "/run/jx", read_only=False),
    )
    return RunSpec(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_defaults_are_the_hardened_ones() -> None:
    kw = run_kwargs(spec())
    assert kw["init"] is True
    assert kw["network_mode"] == "none"
    assert kw["read_only"] is True
    assert kw["tmpfs"] == {
        "/tmp": "rw,nosuid,nodev,noexec,size=512m",
        # run-time `pip install` target: writable and exec (compiled extensions), size-limited
        "/opt/packages": "rw,exec,nosuid,nodev,mode=1777,size=512m",
    }
    assert kw["environment"]["PIP_TARGET"] == "/opt/packages"
    assert kw["environment"]["PYTHONPATH"].split(":")[0] == "/opt/packages"
    assert kw["cap_drop"] == ["ALL"]
    assert "cap_add" not in kw
    assert kw["security_opt"] == ["no-new-privileges"]
    assert kw["mem_limit"] == kw["memswap_limit"] == "2g"
    assert kw["nano_cpus"] == 1_000_000_000
    assert kw["pids_limit"] == 256
    assert kw["ulimits"] == [{"name": "nofile", "soft": 4096, "hard": 4096}]
    assert kw["user"] == "1000:1000"
    assert kw["working_dir"] == "/work"
    assert kw["detach"] is True
    assert kw["auto_remove"] is False  # the exit state must survive for exit_description
    assert kw["mounts"] == [
        {"Type": "bind", "Source": "/home/u/work", "Target": "/work", "ReadOnly": False},
        {"Type": "bind", "Source": "/tmp/jx-abc", "Target": "/run/jx", "ReadOnly": False},
    ]


def test_every_default_can_be_relaxed() -> None:
    kw = run_kwargs(
        spec(
            security=Security(
                init=False,
                read_only=False,
                tmpfs_size="",
                tmp_exec=True,
                cap_drop=(),
                cap_add=("NET_RAW",),
                no_new_privileges=False,
                network="bridge",
                packages_dir="",
            ),
            limits=Limits(memory="", cpus=0, pids=0, nofile=0),
            volumes=(parse_volume("/data:/data"),),
            extra={"hostname": "lab", "network_mode": "host"},
        )
    )
    assert kw["init"] is False
    assert kw["read_only"] is False
    assert kw["tmpfs"] == {"/tmp": "rw,nosuid,nodev,exec"}
    assert "PIP_TARGET" not in kw["environment"]
    assert "cap_drop" not in kw
    assert kw["cap_add"] == ["NET_RAW"]
    assert "security_opt" not in kw
    for key in ("mem_limit", "memswap_limit", "nano_cpus", "pids_limit", "ulimits"):
        assert key not in kw
    assert kw["mounts"][2] == {
        "Type": "bind",
        "Source": "/data",
        "Target": "/data",
        "ReadOnly": True,
    }
    assert kw["hostname"] == "lab"
    assert kw["network_mode"] == "host"  # extra is applied last


def test_memory_swap_can_differ() -> None:
    kw = run_kwargs(spec(limits=Limits(memory="1g", memory_swap="3g", cpus=0.5)))
    assert (kw["mem_limit"], kw["memswap_limit"], kw["nano_cpus"]) == ("1g", "3g", 500_000_000)


def test_two_mounts_on_one_target_are_refused() -> None:
    with pytest.raises(ValueError, match="/work"):
        run_kwargs(spec(volumes=(parse_volume("/x:/work:rw"),)))


@pytest.mark.parametrize(
    ("value", "mode"),
    [(False, "none"), (True, "bridge"), ("", "none"), ("true", "bridge"), ("labnet", "labnet")],
)
def test_network_mode(value: bool | str, mode: str) -> None:
    assert network_mode(value) == mode


def test_parse_volume() -> None:
    assert parse_volume("/a:/b") == Mount("/a", "/b", read_only=True)
    assert parse_volume("/a:/b:rw") == Mount("/a", "/b", read_only=False)
    for bad in ("/a", "a:/b", "/a:/b:xx", "/a:b"):
        with pytest.raises(ValueError, match="volume"):
            parse_volume(bad)


def test_split_user() -> None:
    assert split_user("1000:100") == (1000, 100)
    assert split_user("1000") == (1000, 1000)
    with pytest.raises(ValueError, match="numeric"):
        split_user("alice")


def test_only_deliberate_env_crosses_into_the_container() -> None:
    host = {"PATH": "/usr/bin", "SECRET": "s", "LANG": "C"}
    requested = {**host, "PATH": "/venv/bin:/usr/bin", "FOO": "1", "LANG": "C", "SPEC": "x"}
    requested["SECRET"] = "s"
    assert forwarded_env(requested, host, always=["LANG"]) == {"FOO": "1", "LANG": "C", "SPEC": "x"}


def test_describe_exit() -> None:
    oom = describe_exit(
        {"OOMKilled": True, "ExitCode": 137}, [], "", memory="256m", stopped_by_us=False
    )
    assert "out-of-memory killer" in oom
    assert "256m" in oom
    kill_events = [{"Action": "kill", "Actor": {"Attributes": {"signal": "9"}}}, {"Action": "die"}]
    killed = describe_exit({"ExitCode": 137}, kill_events, "", memory="", stopped_by_us=False)
    assert killed == "killed by `docker kill` (SIGKILL, exit code 137)"
    assert "SIGSEGV" in describe_exit({"ExitCode": 139}, [], "", memory="", stopped_by_us=False)
    failed = describe_exit(
        {"ExitCode": 1}, [], "No module named x\n", memory="", stopped_by_us=False
    )
    assert failed == "exited with code 1; its last output:\nNo module named x"
    assert "docker rm" in describe_exit(
        None, [{"Action": "destroy"}], "", memory="", stopped_by_us=False
    )
    assert "jupyter-exec" in describe_exit({"ExitCode": 0}, [], "", memory="", stopped_by_us=True)


def test_user_is_the_work_dir_owner(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    os.chown(tmp_path, 1234, 4321)
    user = choose_user(tmp_path, euid=0)
    assert (user.uid, user.gid, user.lends) == (1234, 4321, False)
    assert choose_user(tmp_path, explicit="2000:2000", euid=0).docker_user == "2000:2000"


def test_root_owned_work_dir_is_lent_by_an_acl_on_that_folder_only(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to lend")
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "old.txt").write_text("x")
    work.chmod(0o750)
    before = {p: (p.stat().st_uid, p.stat().st_mode) for p in [work, *work.rglob("*")]}
    user = choose_user(work, euid=0, fallback="65532:65532")
    assert (user.uid, user.gid, user.lends) == (65532, 65532, True)
    loan = lend(work, user)
    assert loan is not None
    assert loan.how == "acl"
    assert Loan.from_label(loan.label) == loan
    assert os.getxattr(work, "system.posix_acl_access")  # the one change
    assert {p: p.stat().st_uid for p in before} == {p: uid for p, (uid, _) in before.items()}
    assert take_back(work, loan)
    assert {p: (p.stat().st_uid, p.stat().st_mode) for p in before} == before
    with pytest.raises(OSError, match="No data"):
        os.getxattr(work, "system.posix_acl_access")
    assert not take_back(tmp_path, loan)  # another folder: never changed


def test_a_loan_is_never_taken_back_through_a_link(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to lend")
    work, elsewhere = tmp_path / "w", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    loan = lend(work, choose_user(work, euid=0))
    assert loan is not None
    work.rename(tmp_path / "moved")
    work.symlink_to(elsewhere)
    assert not take_back(work, loan)
    with pytest.raises(OSError, match="No data"):
        os.getxattr(elsewhere, "system.posix_acl_access")


def test_without_acls_only_the_folder_itself_is_lent_by_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to lend")
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)

    def no_acls(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "setxattr", no_acls)
    loan = lend(work, choose_user(work, euid=0))
    assert loan is not None
    assert loan.how == "owner"
    assert (work.stat().st_uid, (work / "sub").stat().st_uid) == (65532, 0)  # one entry
    assert take_back(work, loan)
    assert work.stat().st_uid == 0


def test_a_rootless_engine_runs_the_kernel_as_the_owner_itself(tmp_path: Path) -> None:
    """Rootless Docker maps the container's uid 0 to the user running the engine."""
    user = choose_user(tmp_path, euid=1000, rootless=True)
    assert (user.docker_user, user.lends, user.mapped) == ("0:0", False, True)
    assert lend(tmp_path, user) is None

    class Engine:
        def __init__(self, options: list[str]) -> None:
            self.options = options

        def info(self) -> dict[str, list[str]]:
            return {"SecurityOptions": self.options}

    rootless = ["name=seccomp,profile=default", "name=rootless", "name=cgroupns"]
    assert is_rootless(Engine(rootless), "unix:///run/user/1000/docker.sock")  # type: ignore[arg-type]
    assert not is_rootless(Engine(["name=seccomp,profile=default"]), "tcp://x:1")  # type: ignore[arg-type]


def test_work_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkDirError, match="does not exist"):
        choose_user(tmp_path / "missing")
    (tmp_path / "f").write_text("")
    with pytest.raises(WorkDirError, match="not a directory"):
        choose_user(tmp_path / "f")
    with pytest.raises(WorkDirError, match="must not be root"):
        choose_user(tmp_path, fallback="0:0", euid=0)


def test_build_tags() -> None:
    assert BuildOptions().resolved_tag() == DEFAULT_IMAGE
    assert BuildOptions(base_image="jupyter-exec/base:bookworm").resolved_tag() == DEFAULT_IMAGE
    custom = BuildOptions(pip_packages=("seaborn",)).resolved_tag()
    assert custom.startswith("jupyter-exec/kernel:custom-")
    assert custom == BuildOptions(pip_packages=("seaborn",)).resolved_tag()
    assert custom != BuildOptions(pip_packages=("polars",)).resolved_tag()
    assert BuildOptions(tag="me/k:1", pip_packages=("x",)).resolved_tag() == "me/k:1"


def test_options_are_configurable_traits() -> None:
    config = Config()
    config.DockerProvisioner.memory = "1g"
    config.DockerProvisioner.network = True
    provisioner = DockerProvisioner(config=config, pids_limit=64)  # kwargs = kernelspec config
    assert (provisioner.memory, provisioner.network, provisioner.pids_limit) == ("1g", True, 64)
    assert DockerProvisioner(network="labnet").network == "labnet"
    helps = DockerProvisioner.class_traits(config=True)
    assert all(trait.help for trait in helps.values())
    with pytest.raises(TraitError, match="size"):
        DockerProvisioner(memory="lots")
    with pytest.raises(TraitError, match="volume"):
        DockerProvisioner(volumes=["relative:/x"])


def test_kernelspec_names_the_registered_provisioner() -> None:
    assert (kernels_dir() / "docker" / "Dockerfile").is_file()
    spec_dir = kernels_dir() / "python3-docker"
    assert spec_dir in kernelspec_dirs()
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (Docker)"
    assert spec["argv"] == ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == PROVISIONER_NAME
    DockerProvisioner(**spec["metadata"]["kernel_provisioner"]["config"])  # config is valid
    registered = entry_points(group="jupyter_client.kernel_provisioners")
    assert any(
        ep.name == PROVISIONER_NAME and ep.load() is DockerProvisioner for ep in registered
    ), "the jupyter-exec-docker entry point is not installed (pip install -e .)"


def test_kernels_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["kernels", "install", "--prefix", str(tmp_path)]) == 0
    installed = tmp_path / "share" / "jupyter" / "kernels" / "python3-docker" / "kernel.json"
    assert json.loads(installed.read_text())["display_name"] == "Python 3 (Docker)"
    assert "installed kernelspec python3-docker" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["image", "build"], ["kernels", "install"], ["reap"]])
def test_help_teaches_with_examples(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "examples:" in capsys.readouterr().out
