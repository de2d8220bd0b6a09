"""Attacks on the deployment files: hostile settings, hostile start requests, a hostile folder.

Three attackers. Someone who feeds ``jupyter-exec gateway --write`` a value (a host list from
an inventory, an image name from a form) that would break out of the file it lands in: a
second host smuggled in with ``,``, shell code for the SSH command line, a newline that adds
a YAML key or an ``EG_*`` variable, a Jinja2 expression. A client of the gateway who sends
``KERNEL_*`` variables meant to change the kernel pod (another image, root, a host path, a
second document). Someone with write access to the output folder who plants links, FIFOs or
files for the writer to follow or clobber. Each is refused with our own error, and the asset
(the file elsewhere, the pod's hardening) is untouched.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_exec.cluster.deploy import MANIFEST, DeploySettings, write_deployment
from jupyter_exec.cluster.kube import launch_script
from jupyter_exec.exceptions import InvalidArgument, StorageError
from tests.deploy_helpers import SAMPLE_LAUNCH, render_pod, settings, validate, write_all

HOSTILE = ["a,b", "$(touch /tmp/x)", "`id`", "a\nb", "a'b", 'a"b', "a b", "a;b", "{{ 7*7 }}"]
TARGETS = ["enterprise-gateway", "kubernetes", "helm"]
GP_SCRIPTS = Path("kubernetes/gateway-provisioners/jupyter_exec_kubernetes/scripts")
EG_SCRIPTS = Path("kubernetes/enterprise-gateway/jupyter_exec_kubernetes/scripts")


# -- hostile settings --------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    "field",
    [
        "ssh_user",
        "python",
        "remote_dir",
        "image",
        "namespace",
        "service_account",
        "cpu_limit",
        "memory_request",
        "gateway_selector",
        "pod_python",
        "kernelspecs_image",
        "response_ip",
    ],
)
def test_setting_with_shell_yaml_or_template_syntax_is_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    with pytest.raises(InvalidArgument, match=rf"^{field}="):
        settings(tmp_path, **{field: value})


@pytest.mark.parametrize("value", HOSTILE)
def test_host_smuggling_a_second_host_or_shell_code_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^hosts="):
        settings(tmp_path, hosts=("127.0.0.2", value))


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "::1", "0.0.0.0"])
def test_host_the_gateway_would_run_without_ssh_on_its_own_machine_is_refused(
    tmp_path: Path, host: str
) -> None:
    with pytest.raises(InvalidArgument, match="without SSH"):
        settings(tmp_path, hosts=(host,))


@pytest.mark.parametrize("users", [("alice,root",), ("$(id)",), ("bob\nEG_IP=0.0.0.0",)])
def test_user_policy_entry_that_would_widen_the_policy_is_refused(
    tmp_path: Path, users: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidArgument, match=r"^authorized_users="):
        settings(tmp_path, authorized_users=users)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gateway_ip", "0.0.0.0"),
        ("response_ip", "::"),
        ("kernel_uid", 0),
        ("ssh_port", "22; id"),
        ("port_range", (40000, 40010)),
        ("port_range", (40000, 40999)),  # 999 by the gateways' count: every start failed
        ("memory_request", "8Gi"),  # above the limit
        ("remote_dir", "/var/../etc"),
        ("transport_encryption", "none"),
    ],
)
def test_setting_that_would_weaken_the_deployment_is_refused(
    tmp_path: Path, field: str, value: Any
) -> None:
    with pytest.raises(InvalidArgument, match=rf"^{field}="):
        settings(tmp_path, **{field: value})


def test_output_folder_without_a_parent_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="parent folder does not exist"):
        write_deployment(TARGETS, tmp_path / "missing" / "out", settings(tmp_path))
    assert not (tmp_path / "missing").exists()


def test_refused_settings_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(InvalidArgument):
        write_deployment(TARGETS, out, DeploySettings(hosts=("127.0.0.2", "a,b")))
    assert not out.exists()


# -- hostile start requests --------------------------------------------------------------------

HOSTILE_LAUNCH = {
    "KERNEL_IMAGE": "attacker/miner:latest",
    "KERNEL_UID": "0",
    "KERNEL_GID": "0",
    "KERNEL_NAMESPACE": "kube-system",
    "KERNEL_SERVICE_ACCOUNT_NAME": "cluster-admin",
    "KERNEL_WORKING_DIR": "/",
    "KERNEL_CPUS_LIMIT": "64",
    "KERNEL_VOLUMES": "[{name: root, hostPath: {path: /}}]",
    "KERNEL_VOLUME_MOUNTS": "[{name: root, mountPath: /host}]",
}


@pytest.mark.parametrize(("scripts", "eg"), [(EG_SCRIPTS, True), (GP_SCRIPTS, False)])
def test_client_kernel_variables_cannot_change_the_kernel_pod(
    tmp_path: Path, scripts: Path, eg: bool
) -> None:
    out = write_all(tmp_path)
    [honest] = render_pod(out / scripts, dict(SAMPLE_LAUNCH), eg=eg)
    [attacked] = render_pod(out / scripts, {**SAMPLE_LAUNCH, **HOSTILE_LAUNCH}, eg=eg)
    validate(attacked)
    # The template reads none of them: the pod is the honest one (its env lists the request's
    # variables, as the gateway's launcher adds them; they configure nothing).
    for pod in (honest, attacked):
        pod["spec"]["containers"][0].pop("env")
    assert attacked == honest
    spec = attacked["spec"]
    assert spec["containers"][0]["image"] == "jupyter-exec/kernel:latest"
    assert spec["securityContext"]["runAsUser"] == 1000
    assert attacked["metadata"]["namespace"] == "jupyter-exec"  # the API refuses a mismatch
    assert not [v for v in spec["volumes"] if "hostPath" in v]


@pytest.mark.parametrize(("scripts", "eg"), [(EG_SCRIPTS, True), (GP_SCRIPTS, False)])
@pytest.mark.parametrize(
    "name",
    [
        'x"\nkind: Secret\n#',
        "x\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: second}",
        "x }}{% for i in range(9) %}",
        "x' , hostNetwork: true , 'y",
    ],
)
def test_pod_name_that_injects_yaml_or_a_second_document_stays_one_value(
    tmp_path: Path, scripts: Path, eg: bool, name: str
) -> None:
    out = write_all(tmp_path)
    launch = {**SAMPLE_LAUNCH, "KERNEL_POD_NAME": name}
    expected: Any = name
    if not eg:  # gateway_provisioners parses every KERNEL_* value as YAML before rendering
        try:
            expected = yaml.safe_load(name)
        except yaml.YAMLError:
            with pytest.raises(yaml.YAMLError):  # its own parse refuses it: no pod at all
                render_pod(out / scripts, launch, eg=eg)
            return
    documents = render_pod(out / scripts, launch, eg=eg)
    assert [d["kind"] for d in documents] == ["Pod"]
    [attacked] = documents
    # One value in one place (the API server then refuses it as a pod name) ...
    assert attacked["metadata"]["name"] == expected
    # ... and nothing else in the pod moved.
    [honest] = render_pod(out / scripts, dict(SAMPLE_LAUNCH), eg=eg)
    for pod in (honest, attacked):
        pod["spec"]["containers"][0].pop("env")
        pod["metadata"].pop("name")
    assert attacked == honest


def test_gateway_values_with_shell_syntax_reach_the_launcher_as_plain_arguments(
    tmp_path: Path,
) -> None:
    """The pod's ``sh -c`` script is run by a real shell with hostile launch values."""
    record = tmp_path / "argv.json"
    canary = tmp_path / "pwned"
    python = tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "json.dump(sys.argv[1:], open(os.environ['RECORD'], 'w'))\n"
    )
    python.chmod(0o755)
    script = launch_script(settings(tmp_path, pod_python=str(python)))
    hostile = {
        "KERNEL_ID": f"$(touch {canary})",
        "RESPONSE_ADDRESS": f"`touch {canary}`:8877",
        "PUBLIC_KEY": f"'; touch {canary}; '",
        "PORT_RANGE": f'"; touch {canary}; "',
        "TRANSPORT_ENCRYPTION": f"a b\ntouch {canary}",
        "JUPYTER_EXEC_POD_IP": "*",
    }
    subprocess.run(
        ["/bin/sh", "-c", script], env={**hostile, "RECORD": str(record)}, cwd=tmp_path, check=True
    )
    argv = json.loads(record.read_text())
    assert not canary.exists()
    assert dict(zip(argv[1::2], argv[2::2], strict=True)) == {
        "--kernel-id": hostile["KERNEL_ID"],
        "--response-address": hostile["RESPONSE_ADDRESS"],
        "--public-key": hostile["PUBLIC_KEY"],
        "--port-range": hostile["PORT_RANGE"],
        "--transport-encryption": hostile["TRANSPORT_ENCRYPTION"],
        "--ip": "*",  # not globbed against the working directory
        "--gateway-ip": f"`touch {canary}`",
        "--work-root": "/work",
    }


# -- a hostile output folder -------------------------------------------------------------------


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious\n")
    return victim


@pytest.mark.parametrize("force", [False, True])
def test_planted_link_at_a_file_is_refused_and_its_target_untouched(
    tmp_path: Path, force: bool
) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    (out / "helm").mkdir(parents=True)
    (out / "helm" / "values.yaml").symlink_to(victim)
    with pytest.raises(StorageError) as caught:
        write_deployment(TARGETS, out, settings(tmp_path), force=force)
    assert caught.value.errno == errno.ELOOP
    assert victim.read_text() == "precious\n"
    assert (out / "helm" / "values.yaml").is_symlink()


@pytest.mark.parametrize("force", [False, True])
def test_planted_link_at_a_folder_is_refused_and_nothing_lands_behind_it(
    tmp_path: Path, force: bool
) -> None:
    elsewhere = _victim(tmp_path).parent
    out = tmp_path / "out"
    out.mkdir()
    (out / "kubernetes").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StorageError) as caught:
        write_deployment(TARGETS, out, settings(tmp_path), force=force)
    assert caught.value.errno == errno.ELOOP
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.txt"]


def test_planted_link_as_the_manifest_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).symlink_to(victim)
    with pytest.raises(StorageError) as caught:
        write_deployment(TARGETS, out, settings(tmp_path))
    assert caught.value.errno == errno.ELOOP
    assert victim.read_text() == "precious\n"


def test_planted_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "kubernetes").mkdir(parents=True)
    os.mkfifo(out / "kubernetes" / "networkpolicy.yaml")
    with pytest.raises(StorageError) as caught:
        write_deployment(["kubernetes"], out, settings(tmp_path), force=True)
    assert caught.value.errno == errno.EINVAL


def test_file_it_did_not_write_is_kept_and_nothing_else_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "kubernetes").mkdir(parents=True)
    mine = out / "kubernetes" / "networkpolicy.yaml"
    mine.write_text("# the cluster admin's own policy\n")
    with pytest.raises(StorageError, match="did not write") as caught:
        write_deployment(TARGETS, out, settings(tmp_path))
    assert caught.value.errno == errno.EEXIST
    assert mine.read_text() == "# the cluster admin's own policy\n"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "kubernetes",
        "kubernetes/networkpolicy.yaml",
    ]
    write_deployment(TARGETS, out, settings(tmp_path), force=True)
    assert mine.read_text().startswith("# Only the gateway reaches kernel pods")


def test_file_edited_since_it_was_written_is_kept(tmp_path: Path) -> None:
    out = write_all(tmp_path)
    values = out / "helm" / "values.yaml"
    values.write_text(values.read_text() + "authToken: edited-by-hand\n")
    with pytest.raises(StorageError, match=r"helm/values\.yaml"):
        write_deployment(["helm"], out, settings(tmp_path))
    assert values.read_text().endswith("authToken: edited-by-hand\n")


def test_forged_manifest_claiming_a_foreign_file_changes_nothing_but_that_file(
    tmp_path: Path,
) -> None:
    """A manifest only vouches for content it hashed: a claim on another file's path is
    honoured only if that file holds what the manifest says, which is then ours anyway."""
    out = tmp_path / "out"
    (out / "helm").mkdir(parents=True)
    (out / "helm" / "values.yaml").write_text("someone else's\n")
    (out / MANIFEST).write_text(json.dumps({"written": {"helm/values.yaml": "0" * 64}}))
    with pytest.raises(StorageError, match="did not write"):
        write_deployment(["helm"], out, settings(tmp_path))
    assert (out / "helm" / "values.yaml").read_text() == "someone else's\n"
