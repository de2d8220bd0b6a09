"""The Enterprise Gateway, Kubernetes and Helm files, parsed back and checked field by field.

Each file is read the way its consumer reads it: kernelspecs as JSON with each gateway's
placeholder substitution, the ``EG_*`` file by a real shell, the pod template rendered with
Jinja2 as each gateway's ``launch_kubernetes.py`` renders it, every Kubernetes object checked
against Kubernetes' own schema (strict), and the Helm values against the chart's keys.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
import uuid
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.provisioning import KernelProvisionerFactory

from jupyter_exec.cluster.deploy import MANIFEST, DeploySettings, render, write_deployment
from jupyter_exec.cluster.kube import KERNEL_LABELS, launch_script
from jupyter_exec.cluster.settings import launcher_name
from jupyter_exec.exceptions import InvalidArgument
from tests.deploy_helpers import (
    EG_PLACEHOLDERS,
    GP_PLACEHOLDERS,
    PLACEHOLDER,
    SAMPLE_LAUNCH,
    fake_launcher,
    load_json,
    load_yaml,
    render_pod,
    settings,
    substitute,
    validate,
    write_all,
)

KERNEL = "jupyter_exec_kubernetes"
EG_K8S = Path("kubernetes/enterprise-gateway") / KERNEL
GP_K8S = Path("kubernetes/gateway-provisioners") / KERNEL

# Enterprise Gateway 3.3's chart (etc/kubernetes/helm/enterprise-gateway/values.yaml): its keys.
CHART_KEYS = {
    "global", "global.rbac", "global.imagePullSecrets", "global.commonLabels",
    "imagePullSecretsCreate", "image", "imagePullPolicy", "service", "service.type",
    "service.externalIPs", "service.ports", "deployment", "deployment.enabled",
    "deployment.serviceAccountName", "deployment.terminationGracePeriodSeconds",
    "deployment.annotations", "deployment.resources", "deployment.replicas",
    "deployment.tolerations", "deployment.affinity", "deployment.nodeSelector",
    "deployment.extraEnv", "logLevel", "mirrorWorkingDirs", "authToken", "kernel",
    "kernel.clusterRole", "kernel.shareGatewayNamespace", "kernel.launchTimeout",
    "kernel.cullIdleTimeout", "kernel.cullConnected", "kernel.allowedKernels",
    "kernel.defaultKernelName", "kernel.defaultServiceAccountName", "kernelspecs",
    "kernelspecs.image", "kernelspecs.imagePullPolicy", "nfs", "nfs.enabled",
    "nfs.internalServerIPAddress", "kernelspecsPvc", "kernelspecsPvc.enabled",
    "kernelspecsPvc.name", "ingress", "ingress.enabled", "ingress.ingressClassName",
    "ingress.hostName", "ingress.pathType", "ingress.path", "ingress.annotations", "kip",
    "kip.enabled",
}  # fmt: skip
FREE_MAPS = {"deployment.extraEnv", "global.commonLabels"}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return write_all(tmp_path)


def _pod(out: Path, folder: Path, *, eg: bool, **launch: str) -> dict[str, Any]:
    documents = render_pod(out / folder / "scripts", {**SAMPLE_LAUNCH, **launch}, eg=eg)
    assert [d["kind"] for d in documents] == ["Pod"]
    return documents[0]


# -- Enterprise Gateway over SSH ---------------------------------------------------------------


def test_distributed_kernelspec_takes_enterprise_gateways_placeholders_and_remote_hosts(
    out: Path, tmp_path: Path
) -> None:
    spec = load_json(out / "enterprise-gateway/kernels/jupyter_exec_distributed/kernel.json")
    proxy = spec["metadata"]["process_proxy"]
    assert proxy["class_name"].endswith("processproxies.distributed.DistributedProcessProxy")
    assert proxy["config"] == {"remote_hosts": "127.0.0.2,127.0.0.3"}  # the comma string EG splits
    argv = spec["argv"]
    assert {m for a in argv for m in PLACEHOLDER.findall(a)} == EG_PLACEHOLDERS
    kernel_id = str(uuid.uuid4())
    values = {
        "kernel_id": kernel_id,
        "response_address": "127.0.0.1:8877",
        "public_key": "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A",
        "port_range": "40000..41000",
    }
    launched = substitute(argv, values)
    # the launcher's content-addressed name, where `jupyter-exec gateway --check-only` puts it
    source = fake_launcher(tmp_path).read_bytes()
    assert launched[:2] == ["python3", f"/var/tmp/jupyter-exec/{launcher_name(source)}"]
    pairs = dict(zip(launched[2::2], launched[3::2], strict=True))
    assert pairs == {
        "--RemoteProcessProxy.kernel-id": kernel_id,
        "--RemoteProcessProxy.response-address": "127.0.0.1:8877",
        "--RemoteProcessProxy.public-key": values["public_key"],
        "--RemoteProcessProxy.port-range": "40000..41000",
        "--work-root": "/var/tmp/jupyter-exec/kernels",
    }
    # EG joins the argv with spaces into the SSH command line, unquoted: it must split back.
    assert shlex.split(" ".join(launched)) == launched


def _sourced(path: Path, prefix: str) -> dict[str, str]:
    """The variables a shell has after ``set -a; . path``."""
    shown = subprocess.run(
        ["/bin/sh", "-c", 'set -a; . "$1"; env', "sh", str(path)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if line.startswith(prefix))


def test_gateway_env_file_reads_back_through_a_shell_with_loopback_defaults(out: Path) -> None:
    env = _sourced(out / "enterprise-gateway/enterprise-gateway.env", "EG_")
    assert env["EG_IP"] == "127.0.0.1"
    assert env["EG_PORT_RETRIES"] == "0"
    assert env["EG_REMOTE_HOSTS"] == "127.0.0.2,127.0.0.3"
    assert env["EG_SSH_PORT"] == "2222"
    assert env["EG_REMOTE_USER"] == "kernels"
    assert env["EG_RESPONSE_IP"] == "127.0.0.1"
    assert env["EG_RESPONSE_ADDR_ANY"] == "False"
    assert env["EG_UNAUTHORIZED_USERS"] == "root"
    assert env["EG_PORT_RANGE"] == "40000..41000"
    assert env["EG_ALLOWED_KERNELS"] == env["EG_DEFAULT_KERNEL_NAME"] == "jupyter_exec_distributed"
    # Beside the kernels' folders (the default remote dir), not in the hosts' /tmp.
    assert env["EG_KERNEL_LOG_DIR"] == "/var/tmp/jupyter-exec/logs"
    assert "EG_AUTH_TOKEN" not in env  # never a secret in a file


def test_hosts_off_loopback_need_the_response_address(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="response_ip is required"):
        settings(tmp_path, hosts=("10.0.0.5", "10.0.0.6"))
    chosen = settings(tmp_path, hosts=("10.0.0.5", "node-2.example.org"), response_ip="10.0.0.1")
    env = render(["enterprise-gateway"], chosen)["enterprise-gateway/enterprise-gateway.env"]
    assert b"EG_RESPONSE_IP=10.0.0.1\n" in env


# -- Kubernetes --------------------------------------------------------------------------------


@pytest.mark.parametrize(("folder", "eg"), [(EG_K8S, True), (GP_K8S, False)])
def test_pod_template_renders_as_each_gateway_renders_it_into_a_valid_hardened_pod(
    out: Path, folder: Path, eg: bool
) -> None:
    pod = _pod(out, folder, eg=eg)
    validate(pod)
    assert pod["metadata"]["name"] == SAMPLE_LAUNCH["KERNEL_POD_NAME"]
    assert pod["metadata"]["namespace"] == "jupyter-exec"
    # Both gateways find their pod by these two labels.
    assert pod["metadata"]["labels"]["kernel_id"] == SAMPLE_LAUNCH["KERNEL_ID"]
    assert pod["metadata"]["labels"]["component"] == "kernel"
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = spec["containers"]
    assert container["image"] == "jupyter-exec/kernel:latest"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"] == {
        "cpu": "1",
        "memory": "2Gi",
        "ephemeral-storage": "1Gi",
    }
    assert container["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert "emptyDir" in volumes[mounts["/work"]["name"]]
    assert mounts["/opt/jupyter-exec"]["readOnly"] is True
    assert volumes[mounts["/opt/jupyter-exec"]["name"]]["configMap"]["name"] == (
        "jupyter-exec-launcher"
    )
    # The launch values the gateway adds reach the container's environment.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RESPONSE_ADDRESS"] == "10.1.2.3:8877"
    assert env["KERNEL_ID"] == SAMPLE_LAUNCH["KERNEL_ID"]


def test_pod_runs_the_launcher_with_the_contracts_arguments(tmp_path: Path) -> None:
    """The ``sh -c`` script, run by a real shell with a stand-in Python that records argv."""
    record = tmp_path / "argv.json"
    python = tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump(sys.argv[1:], open(os.environ['RECORD'], 'w'))\n"
    )
    python.chmod(0o755)
    script = launch_script(settings(tmp_path, pod_python=str(python)))
    assert "$(" not in script  # Kubernetes would expand $(NAME) in a command itself
    env = {
        "KERNEL_ID": SAMPLE_LAUNCH["KERNEL_ID"],
        "RESPONSE_ADDRESS": "10.1.2.3:8877",
        "PUBLIC_KEY": "KEY",
        "PORT_RANGE": "40000..41000",
        "TRANSPORT_ENCRYPTION": "",
        "JUPYTER_EXEC_POD_IP": "10.1.9.9",
        "RECORD": str(record),
    }
    subprocess.run(["/bin/sh", "-c", script], env=env, check=True)
    argv = load_json(record)
    assert argv[0] == "/opt/jupyter-exec/launcher.py"
    assert dict(zip(argv[1::2], argv[2::2], strict=True)) == {
        "--kernel-id": SAMPLE_LAUNCH["KERNEL_ID"],
        "--response-address": "10.1.2.3:8877",
        "--public-key": "KEY",
        "--port-range": "40000..41000",
        "--transport-encryption": "",
        "--ip": "10.1.9.9",
        "--gateway-ip": "10.1.2.3",
        "--work-root": "/work",
    }


def test_network_policy_lets_only_the_gateway_reach_kernel_pods(out: Path) -> None:
    policy = load_yaml(out / "kubernetes/networkpolicy.yaml")
    validate(policy)
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == "jupyter-exec"
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    pod_labels = _pod(out, EG_K8S, eg=True)["metadata"]["labels"]
    selected = spec["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()  # it guards the pods the template makes
    [ingress] = spec["ingress"]
    [source] = ingress["from"]
    assert list(source) == ["podSelector"]  # same namespace, no ipBlock, no namespaceSelector
    gateway = source["podSelector"]["matchLabels"]
    assert gateway == {"gateway-selector": "enterprise-gateway"}  # the chart's gateway pod
    assert not gateway.items() <= pod_labels.items()  # a kernel pod is never "the gateway"
    assert ingress["ports"] == [{"protocol": "TCP", "port": 40000, "endPort": 41000}]
    [egress] = spec["egress"]
    assert egress["to"] == [source]
    assert egress["ports"] == [{"protocol": "TCP", "port": 8877}]


def test_kernel_gateway_env_puts_kernels_in_the_guarded_namespace(out: Path) -> None:
    env = _sourced(out / "kubernetes/gateway-provisioners/kernel-gateway.env", "GP_")
    pod = _pod(out, GP_K8S, eg=False)
    policy = load_yaml(out / "kubernetes/networkpolicy.yaml")
    assert env["GP_NAMESPACE"] == pod["metadata"]["namespace"] == policy["metadata"]["namespace"]
    assert env["GP_SHARED_NAMESPACE"] == "True"
    assert env["GP_PORT_RANGE"] == "40000..41000"
    assert env["GP_RESPONSE_PORT"] == "8877"
    assert env["GP_UNAUTHORIZED_USERS"] == "root"
    head = (out / "kubernetes/gateway-provisioners/kernel-gateway.env").read_text()
    assert "--KernelManager.transport_encryption=auto" in head


def test_launcher_configmap_carries_the_launcher(out: Path, tmp_path: Path) -> None:
    configmap = load_yaml(out / "kubernetes/launcher-configmap.yaml")
    validate(configmap)
    assert configmap["metadata"] == {"name": "jupyter-exec-launcher", "namespace": "jupyter-exec"}
    assert configmap["data"]["launcher.py"] == (tmp_path / "launcher.py").read_text()


def test_kubernetes_kernelspecs_use_each_gateways_placeholders(out: Path) -> None:
    eg = load_json(out / EG_K8S / "kernel.json")
    assert eg["metadata"]["process_proxy"] == {
        "class_name": "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy",
        "config": {"image_name": "jupyter-exec/kernel:latest"},
    }
    assert {m for a in eg["argv"] for m in PLACEHOLDER.findall(a)} == EG_PLACEHOLDERS
    assert (
        eg["argv"][1] == f"/usr/local/share/jupyter/kernels/{KERNEL}/scripts/launch_kubernetes.py"
    )
    assert all(a.startswith("--RemoteProcessProxy.") for a in eg["argv"][2::2])

    gp = load_json(out / GP_K8S / "kernel.json")
    provisioner = gp["metadata"]["kernel_provisioner"]
    registered = {e.name for e in entry_points(group="jupyter_client.kernel_provisioners")}
    assert provisioner["provisioner_name"] in registered  # gateway_provisioners' own name
    assert provisioner["config"]["image_name"] == "jupyter-exec/kernel:latest"
    assert provisioner["config"]["port_range"] == "40000..41000"
    assert _gateway_provisioners_accepts(provisioner["config"]["port_range"])
    assert {m for a in gp["argv"] for m in PLACEHOLDER.findall(a)} == GP_PLACEHOLDERS
    assert "curve" in gp["metadata"]["supported_encryption"]  # transport encryption: auto
    # gateway_provisioners renders the template next to its own launcher, copied beside it.
    assert (out / GP_K8S / "scripts/launch_kubernetes.py").read_text().startswith("#!")


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        ("enterprise-gateway/kernels", "jupyter_exec_distributed"),
        ("kubernetes/enterprise-gateway", KERNEL),
        ("kubernetes/gateway-provisioners", KERNEL),
    ],
)
def test_jupyter_client_reads_every_kernelspec_and_finds_its_provisioner(
    out: Path, folder: str, name: str
) -> None:
    manager = KernelSpecManager(kernel_dirs=[str(out / folder)])
    spec = manager.get_kernel_spec(name)
    assert Path(spec.resource_dir) == out / folder / name
    assert spec.language == "python"
    assert KernelProvisionerFactory.instance().is_provisioner_available(spec)


def test_transport_encryption_disabled_or_required(tmp_path: Path) -> None:
    off = render(["kubernetes"], settings(tmp_path, transport_encryption="disabled"))
    assert "supported_encryption" not in load_json_bytes(off[f"{GP_K8S}/kernel.json"])["metadata"]
    required = render(["kubernetes"], settings(tmp_path, transport_encryption="required"))
    assert f"{GP_K8S}/kernel.json" in required
    assert not [p for p in required if "enterprise-gateway" in p]  # EG cannot encrypt
    for target in ("enterprise-gateway", "helm"):
        with pytest.raises(InvalidArgument, match="does not encrypt kernel connections"):
            render([target], settings(tmp_path, transport_encryption="required"))


def load_json_bytes(data: bytes) -> Any:
    return json.loads(data)


# -- Helm --------------------------------------------------------------------------------------


def _key_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths.add(path)
        if isinstance(value, dict) and path not in FREE_MAPS:
            paths |= _key_paths(value, f"{path}.")
    return paths


def test_helm_values_use_the_charts_keys_and_these_kernelspecs(out: Path) -> None:
    values = load_yaml(out / "helm/values.yaml")
    assert _key_paths(values) <= CHART_KEYS
    assert "authToken" not in values  # given at install time, never written
    kernel = values["kernel"]
    assert kernel["allowedKernels"] == [KERNEL] == [EG_K8S.name]
    assert kernel["defaultKernelName"] == KERNEL
    assert kernel["shareGatewayNamespace"] is True  # kernels where the NetworkPolicy is
    assert values["kernelspecs"]["image"] == "jupyter-exec/eg-kernelspecs:latest"
    assert values["kip"] == {"enabled": False}  # no DaemonSet with the runtime's socket
    assert values["service"]["type"] == "ClusterIP"
    assert [p["port"] for p in values["service"]["ports"]] == [8888, 8877]  # http, response
    assert all(isinstance(v, str) for v in values["deployment"]["extraEnv"].values())
    assert values["deployment"]["extraEnv"]["EG_PORT_RANGE"] == "40000..41000"
    dockerfile = (out / "kubernetes/kernelspecs.Dockerfile").read_text()
    assert f"COPY enterprise-gateway/{KERNEL} /kernels/{KERNEL}" in dockerfile
    assert "FROM elyra/enterprise-gateway:3.3.0 AS gateway" in dockerfile


# -- settings, targets and rewriting -----------------------------------------------------------


def test_settings_carry_their_values_into_every_file(tmp_path: Path) -> None:
    out = write_all(
        tmp_path,
        image="registry.example.org:5000/team/kernel:2.1",
        namespace="agents",
        cpu_limit="2",
        memory_limit="4Gi",
        kernel_uid=2000,
        port_range=(50000, 51999),
    )
    pod = _pod(out, GP_K8S, eg=False, KERNEL_NAMESPACE="agents")
    validate(pod)
    assert pod["spec"]["containers"][0]["image"] == "registry.example.org:5000/team/kernel:2.1"
    assert pod["metadata"]["namespace"] == "agents"
    assert pod["spec"]["securityContext"]["runAsUser"] == 2000
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "4Gi"
    policy = load_yaml(out / "kubernetes/networkpolicy.yaml")
    assert policy["spec"]["ingress"][0]["ports"][0] == {
        "protocol": "TCP",
        "port": 50000,
        "endPort": 51999,
    }


def test_targets_are_named_and_checked(tmp_path: Path) -> None:
    chosen = settings(tmp_path)
    assert set(render("enterprise-gateway", chosen)) == {
        "enterprise-gateway/kernels/jupyter_exec_distributed/kernel.json",
        "enterprise-gateway/enterprise-gateway.env",
        "enterprise-gateway/jupyter_enterprise_gateway_config.py",
    }
    helm_only = render(["helm"], chosen)
    assert "helm/values.yaml" in helm_only
    assert "kubernetes/kernelspecs.Dockerfile" in helm_only  # what the values refer to
    assert render("kubernetes,helm", chosen) == render(["kubernetes", "helm"], chosen)
    with pytest.raises(InvalidArgument, match="unknown deployment target 'swarm'"):
        render(["swarm"], chosen)
    with pytest.raises(InvalidArgument, match="needs hosts"):
        render(["enterprise-gateway"], settings(tmp_path, hosts=()))
    no_hosts = settings(tmp_path, hosts=())
    assert "helm/values.yaml" in render(["helm"], no_hosts)  # Kubernetes needs no hosts


def test_writing_again_replaces_what_it_wrote(tmp_path: Path) -> None:
    out = write_all(tmp_path)
    first = load_json(out / MANIFEST)["written"]
    written = write_deployment(["kubernetes"], out, settings(tmp_path, image="other/kernel:1"))
    assert out / "kubernetes/networkpolicy.yaml" in written
    pod = _pod(out, GP_K8S, eg=False)
    assert pod["spec"]["containers"][0]["image"] == "other/kernel:1"
    second = load_json(out / MANIFEST)["written"]
    assert second.keys() == first.keys()  # earlier targets are still known as ours
    assert (
        second[f"{GP_K8S}/scripts/kernel-pod.yaml.j2"]
        != first[f"{GP_K8S}/scripts/kernel-pod.yaml.j2"]
    )


def test_default_settings_are_loopback_and_hardened() -> None:
    default = DeploySettings()
    assert default.gateway_ip == "127.0.0.1"
    assert default.effective_response_ip == "127.0.0.1"
    assert default.image == "jupyter-exec/kernel:latest"
    assert default.unauthorized_users == ("root",)
    assert default.transport_encryption == "auto"
    assert KERNEL_LABELS == {"app": "jupyter-exec", "component": "kernel"}


def test_the_gateway_command_writes_the_files_instead_of_starting_a_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_exec.cli import main
    from jupyter_exec.cli.exits import EXIT_OK, EXIT_USAGE

    out = tmp_path / "deploy"
    argv = ["gateway", "--hosts", "10.0.0.5,10.0.0.6", "--ssh-port", "2222"]
    assert main([*argv, "--write", "helm", "--response-ip", "10.0.0.1"]) == EXIT_USAGE
    assert "--out" in capsys.readouterr().err
    status = main(
        [*argv, "--response-ip", "10.0.0.1", "--namespace", "agents",
         "--write", "enterprise-gateway,kubernetes,helm", "--out", str(out)]
    )  # fmt: skip
    assert status == EXIT_OK
    printed = capsys.readouterr().out.split()
    assert sorted(printed) == sorted(str(p) for p in out.rglob("*") if p.is_file()
                                     and p.name != MANIFEST)  # fmt: skip
    spec = load_json(out / "enterprise-gateway/kernels/jupyter_exec_distributed/kernel.json")
    assert spec["metadata"]["process_proxy"]["config"] == {"remote_hosts": "10.0.0.5,10.0.0.6"}
    policy = load_yaml(out / "kubernetes/networkpolicy.yaml")
    assert policy["metadata"]["namespace"] == "agents"
    # hosts off loopback without the address they reach the gateway on: refused, nothing written
    again = tmp_path / "again"
    assert main([*argv, "--write", "helm", "--out", str(again)]) == EXIT_USAGE
    assert "response_ip" in capsys.readouterr().err
    assert not again.exists()


def _gateway_provisioners_accepts(port_range: str) -> bool:
    """gateway_provisioners' own check of a port range (the one a start runs first), applied
    to ``port_range``: 40000..40999 was refused there, and every kernel start failed."""
    from types import SimpleNamespace

    from gateway_provisioners.remote_provisioner import RemoteProvisionerBase

    def refuse(error: Exception) -> None:
        raise error

    owner = SimpleNamespace(port_range=port_range, log_and_raise=refuse)
    try:
        RemoteProvisionerBase._validate_port_range(owner)
    except ValueError:
        return False
    return True


def test_the_default_port_range_is_one_the_gateways_accept() -> None:
    settings = DeploySettings()
    assert _gateway_provisioners_accepts(settings.port_range_text)
    assert not _gateway_provisioners_accepts("40000..40999")  # the old default, refused there
    with pytest.raises(InvalidArgument, match="at least 1000"):
        DeploySettings(port_range=(40000, 40999))


def test_gateway_config_names_only_the_written_kernelspec_and_hosts(out: Path) -> None:
    source = (out / "enterprise-gateway/jupyter_enterprise_gateway_config.py").read_text()
    tree = ast.parse(source)  # Python EG can load (what it does is run by test_enterprise_gateway)
    values = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("KERNEL", "HOSTS")
    }
    assert values == {"KERNEL": "jupyter_exec_distributed", "HOSTS": ("127.0.0.2", "127.0.0.3")}
    imported = {
        node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
    }
    # Only what Enterprise Gateway installs: nothing of jupyter-exec on the gateway's machine.
    assert imported == {
        "enterprise_gateway.services.kernels.remotemanager",
        "jupyter_client.kernelspec",
        "tornado",
    }
