"""Enterprise Gateway, Kubernetes and Helm files for people who run those gateways.

``jupyter-exec gateway --write enterprise-gateway,kubernetes,helm --out DIR`` calls
:func:`write_deployment`. What it writes (relative to ``DIR``)::

    enterprise-gateway/kernels/jupyter_exec_distributed/kernel.json   DistributedProcessProxy
    enterprise-gateway/enterprise-gateway.env                           EG_* (loopback defaults)
    enterprise-gateway/jupyter_enterprise_gateway_config.py             only ours, on our hosts
    kubernetes/enterprise-gateway/jupyter_exec_kubernetes/kernel.json   KubernetesProcessProxy
    kubernetes/enterprise-gateway/jupyter_exec_kubernetes/scripts/kernel-pod.yaml.j2
    kubernetes/gateway-provisioners/jupyter_exec_kubernetes/kernel.json KubernetesProvisioner
    kubernetes/gateway-provisioners/jupyter_exec_kubernetes/scripts/kernel-pod.yaml.j2
    kubernetes/gateway-provisioners/jupyter_exec_kubernetes/scripts/launch_kubernetes.py
    kubernetes/gateway-provisioners/kernel-gateway.env                  GP_* (its namespace)
    kubernetes/launcher-configmap.yaml                                  the launcher, for pods
    kubernetes/networkpolicy.yaml                                       only the gateway in
    kubernetes/kernelspecs.Dockerfile                                   Helm's kernelspecs image
    helm/values.yaml                                                    EG's chart
    .jupyter-exec-deploy.json                                           what we wrote (sha256)

Writing goes through the boundary's :class:`~jupyter_exec.boundary.paths.Folder`: no folder
or file on the way may be a symbolic link (a link is refused, never followed, even with
``force``), and each file is replaced atomically. A file already there is overwritten only
if this function wrote it (its content still matches the manifest) or with ``force``; the
check covers every file before the first is written, so a refusal leaves the folder as it was.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_exec.boundary.paths import Folder, read_regular
from jupyter_exec.cluster import kube
from jupyter_exec.cluster.settings import DeploySettings
from jupyter_exec.exceptions import InvalidArgument, MissingDependency, StorageError

__all__ = [
    "EG_CONFIG",
    "MANIFEST",
    "TARGETS",
    "DeploySettings",
    "eg_config",
    "render",
    "write_deployment",
]

TARGETS = ("enterprise-gateway", "kubernetes", "helm")
MANIFEST = ".jupyter-exec-deploy.json"
DISTRIBUTED_KERNEL = "jupyter_exec_distributed"
_MAX_FILE = 4 * 1024 * 1024


def _yaml_dump(data: Any) -> str:
    try:
        import yaml  # type: ignore[import-untyped]  # jupyter_server (via jupyter_events) needs it
    except ImportError as exc:  # pragma: no cover - a dependency of jupyter_server
        raise MissingDependency("writing YAML needs PyYAML: pip install pyyaml") from exc
    plain = json.loads(json.dumps(data))  # no shared objects, so no YAML anchors and aliases
    text: str = yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, width=4096)
    return text


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _yaml(data: Any, comment: str) -> bytes:
    lines = "".join(f"# {line}\n" for line in comment.splitlines())
    return (lines + _yaml_dump(data)).encode()


# -- Enterprise Gateway over SSH -------------------------------------------------------------


def distributed_kernelspec(settings: DeploySettings) -> dict[str, Any]:
    """EG's DistributedProcessProxy kernelspec running the jupyter-exec launcher on each host.

    EG joins this argv with spaces into the SSH command line, unquoted: every element is a
    placeholder EG substitutes or a value held to a plain character set by the settings.
    EG has no transport encryption, so no ``--transport-encryption`` (EG would pass the
    placeholder through literally).
    """
    argv = [settings.python, settings.launcher_path]
    for name in ("kernel-id", "response-address", "public-key", "port-range"):
        argv += [f"--RemoteProcessProxy.{name}", "{" + name.replace("-", "_") + "}"]
    argv += ["--work-root", settings.work_root]
    return {
        "display_name": "Python 3 (jupyter-exec, distributed)",
        "language": "python",
        "metadata": {
            "process_proxy": {
                "class_name": (
                    "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy"
                ),
                "config": {"remote_hosts": ",".join(settings.hosts)},
            }
        },
        "env": {},
        "argv": argv,
    }


def gateway_env(settings: DeploySettings) -> dict[str, str]:
    """Enterprise Gateway's environment: loopback HTTP, the response address, the user policy.

    No token: EG reads ``EG_AUTH_TOKEN`` from the environment it is started in.
    """
    env = {
        "EG_IP": settings.gateway_ip,
        "EG_PORT": str(settings.gateway_port),
        # The port asked for or none: EG otherwise moves to the next free one without a word,
        # and whatever holds the asked port gets the clients (and their token).
        "EG_PORT_RETRIES": "0",
        "EG_REMOTE_HOSTS": ",".join(settings.hosts),
        "EG_SSH_PORT": str(settings.ssh_port),
        "EG_RESPONSE_IP": settings.effective_response_ip,
        "EG_RESPONSE_PORT": str(settings.response_port),
        "EG_RESPONSE_ADDR_ANY": "False",
        "EG_ENABLE_TUNNELING": "False",
        "EG_PORT_RANGE": settings.port_range_text,
        "EG_KERNEL_LAUNCH_TIMEOUT": str(settings.launch_timeout),
        "EG_UNAUTHORIZED_USERS": ",".join(settings.unauthorized_users),
        "EG_LIST_KERNELS": "False",
        # Read by EG's own container image (its start script turns it into a kernelspec
        # filter); the written config file below is what refuses the others when started.
        "EG_ALLOWED_KERNELS": DISTRIBUTED_KERNEL,
        "EG_DEFAULT_KERNEL_NAME": DISTRIBUTED_KERNEL,
        # Each kernel's stdout and stderr, where ``jupyter-exec gateway`` puts them (EG's
        # default is the hosts' /tmp); the launcher removes its log when its kernel is shut down.
        "EG_KERNEL_LOG_DIR": f"{settings.remote_dir.rstrip('/')}/logs",
    }
    if settings.ssh_user:
        env["EG_REMOTE_USER"] = settings.ssh_user
    if settings.authorized_users:
        env["EG_AUTHORIZED_USERS"] = ",".join(settings.authorized_users)
    return env


def kernel_gateway_env(settings: DeploySettings) -> dict[str, str]:
    """gateway_provisioners' environment for a Kernel Gateway running the Kubernetes kernelspec.

    ``GP_NAMESPACE`` must be the namespace the pod template (and the NetworkPolicy) names.
    """
    env = {
        "GP_NAMESPACE": settings.namespace,
        "GP_SHARED_NAMESPACE": "True",
        "GP_RESPONSE_PORT": str(settings.response_port),
        "GP_RESPONSE_ADDR_ANY": "False",
        "GP_PORT_RANGE": settings.port_range_text,
        "GP_LAUNCH_TIMEOUT": str(settings.launch_timeout),
        "GP_UNAUTHORIZED_USERS": ",".join(settings.unauthorized_users),
    }
    if settings.authorized_users:
        env["GP_AUTHORIZED_USERS"] = ",".join(settings.authorized_users)
    return env


_EG_START = (
    "# Enterprise Gateway's environment, written by jupyter-exec. Start the gateway in this\n"
    "# folder with\n"
    "#   set -a; . ./enterprise-gateway.env; set +a\n"
    "#   JUPYTER_PATH=$PWD JUPYTER_CONFIG_PATH=$PWD EG_AUTH_TOKEN=... jupyter enterprisegateway\n"
    "# (JUPYTER_CONFIG_PATH loads jupyter_enterprise_gateway_config.py: without it, EG offers\n"
    "# and starts every kernelspec on its machine, and a client may pin any host).\n"
)

EG_CONFIG = "jupyter_enterprise_gateway_config.py"

_EG_CONFIG_TEMPLATE = """\
# Enterprise Gateway's configuration, written by jupyter-exec: it lists and starts only
# the kernelspec {kernel}, and a client may pin (KERNEL_REMOTE_HOST) only the hosts it
# was written for. EG reads it when JUPYTER_CONFIG_PATH names this folder.
#
# Why a config file and not EG_ALLOWED_KERNELS alone: Enterprise Gateway 3.x runs on
# jupyter_client 6, whose kernelspec allow-list (KernelSpecManager.whitelist, what EG's
# container image makes of EG_ALLOWED_KERNELS) only hides the other kernelspecs from the
# list: POST /api/kernels still starts any of them, on the gateway's own machine. And EG
# sends a start pinned to any host over SSH (a pin to this machine's own address skips SSH).
from enterprise_gateway.services.kernels.remotemanager import RemoteMappingKernelManager
from jupyter_client.kernelspec import KernelSpecManager
from tornado import web

KERNEL = {kernel!r}
HOSTS = {hosts!r}


def _refusal(status, message):
    # EG shows log_message as the error's "message" unformatted; tornado's log formats it.
    return web.HTTPError(status, message.replace("%", "%%"), reason=message)


def _not_ours(name):
    return _refusal(403, f"this gateway runs only the kernelspec {{KERNEL!r}}, not {{name!r}}")


class JupyterExecKernelSpecs(KernelSpecManager):
    \"\"\"Knows, and hands out, only KERNEL.\"\"\"

    def find_kernel_specs(self):
        return {{k: v for k, v in super().find_kernel_specs().items() if k == KERNEL}}

    def get_kernel_spec(self, kernel_name):
        if kernel_name.lower() != KERNEL:
            raise _not_ours(kernel_name)
        return super().get_kernel_spec(kernel_name)


class JupyterExecKernels(RemoteMappingKernelManager):
    \"\"\"Refuses a start for another kernelspec (403) or pinned outside HOSTS (400).\"\"\"

    async def start_kernel(self, *args, **kwargs):
        name = kwargs.get("kernel_name") or self.default_kernel_name
        if name != KERNEL:
            raise _not_ours(name)
        pinned = (kwargs.get("env") or {{}}).get("KERNEL_REMOTE_HOST")
        if pinned and pinned not in HOSTS:
            hosts = ", ".join(HOSTS)
            raise _refusal(400, f"KERNEL_REMOTE_HOST={{pinned!r}} is not one of {{hosts}}")
        return await super().start_kernel(*args, **kwargs)


c = get_config()  # noqa: F821 - given by traitlets when it loads this file
c.EnterpriseGatewayApp.kernel_spec_manager_class = JupyterExecKernelSpecs
c.EnterpriseGatewayApp.kernel_manager_class = JupyterExecKernels
c.EnterpriseGatewayApp.default_kernel_name = KERNEL
c.KernelSpecManager.ensure_native_kernel = False
"""


def eg_config(settings: DeploySettings) -> str:
    """``jupyter_enterprise_gateway_config.py``: EG starts only our kernelspec, on our hosts.

    The values are Python literals by ``repr`` of strings the settings hold to plain
    character sets; the file imports only what Enterprise Gateway itself installs.
    """
    return _EG_CONFIG_TEMPLATE.format(kernel=DISTRIBUTED_KERNEL, hosts=tuple(settings.hosts))


def _kg_start(settings: DeploySettings) -> str:
    return (
        "# gateway_provisioners' environment for Kernel Gateway in the cluster, written by\n"
        "# jupyter-exec. Start the gateway (in its pod, labelled as gateway_selector) with\n"
        "#   set -a; . ./kernel-gateway.env; set +a\n"
        "#   KG_AUTH_TOKEN=... jupyter kernelgateway --KernelManager.transport_encryption="
        f"{settings.transport_encryption}\n"
    )


def _env_file(head: str, env: dict[str, str]) -> bytes:
    head += (
        "# Every value is plain (no quotes, no spaces): shells, systemd and docker read it alike.\n"
    )
    return (head + "".join(f"{k}={v}\n" for k, v in env.items())).encode()


# -- the files of each target ----------------------------------------------------------------


def _launcher_source(settings: DeploySettings) -> str:
    path = settings.launcher or Path(__file__).with_name("launcher.py")
    try:
        return read_regular(path, limit=_MAX_FILE, follow=True).decode()
    except FileNotFoundError:
        raise MissingDependency(
            f"the kernel launcher {path} is missing: reinstall jupyter-exec[cluster]"
        ) from None


def _gp_launch_script() -> bytes:
    """gateway_provisioners' own ``launch_kubernetes.py``, as ``jupyter-k8s-spec`` installs it."""
    spec = importlib.util.find_spec("gateway_provisioners")
    if spec is None or spec.origin is None:
        raise MissingDependency(
            "the Kubernetes kernelspec for gateway_provisioners needs it installed: "
            "pip install 'jupyter-exec[cluster]'"
        )
    script = Path(spec.origin).parent / "kernel-launchers/kubernetes/scripts/launch_kubernetes.py"
    return read_regular(script, limit=_MAX_FILE, follow=True)


def _enterprise_gateway(settings: DeploySettings) -> dict[str, bytes]:
    root = "enterprise-gateway"
    return {
        f"{root}/kernels/{DISTRIBUTED_KERNEL}/kernel.json": _json(distributed_kernelspec(settings)),
        f"{root}/enterprise-gateway.env": _env_file(_EG_START, gateway_env(settings)),
        f"{root}/{EG_CONFIG}": eg_config(settings).encode(),
    }


def _kubernetes(settings: DeploySettings, with_eg: bool) -> dict[str, bytes]:
    name = kube.KERNEL_NAME
    template = kube.pod_template(settings, _yaml_dump).encode()
    gp = f"kubernetes/gateway-provisioners/{name}"
    files = {
        "kubernetes/gateway-provisioners/kernel-gateway.env": _env_file(
            _kg_start(settings), kernel_gateway_env(settings)
        ),
        f"{gp}/kernel.json": _json(kube.gp_kernelspec(settings)),
        f"{gp}/scripts/kernel-pod.yaml.j2": template,
        f"{gp}/scripts/launch_kubernetes.py": _gp_launch_script(),
        "kubernetes/launcher-configmap.yaml": _yaml(
            kube.configmap(settings, _launcher_source(settings)),
            "The jupyter-exec launcher, mounted read-only into every kernel pod.",
        ),
        "kubernetes/networkpolicy.yaml": _yaml(
            kube.network_policy(settings),
            "Only the gateway reaches kernel pods; kernel pods reach only the gateway.",
        ),
    }
    if with_eg:
        eg = f"kubernetes/enterprise-gateway/{name}"
        files[f"{eg}/kernel.json"] = _json(kube.eg_kernelspec(settings))
        files[f"{eg}/scripts/kernel-pod.yaml.j2"] = template
        files["kubernetes/kernelspecs.Dockerfile"] = kube.kernelspecs_dockerfile(settings).encode()
    return files


def _helm(settings: DeploySettings) -> dict[str, bytes]:
    comment = (
        "Values for Enterprise Gateway's Helm chart, written by jupyter-exec. Install with\n"
        f"  helm upgrade --install enterprise-gateway <chart> -n {settings.namespace} \\\n"
        "    -f values.yaml --set authToken=$JUPYTER_EXEC_GATEWAY_TOKEN\n"
        "after building kernelspecs.image from ../kubernetes/kernelspecs.Dockerfile."
    )
    return {"helm/values.yaml": _yaml(kube.helm_values(settings), comment)}


def _targets(targets: Sequence[str] | str) -> list[str]:
    names = [targets] if isinstance(targets, str) else list(targets)
    chosen: list[str] = []
    for raw in names:
        for name in str(raw).split(","):
            name = name.strip()
            if name not in TARGETS:
                raise InvalidArgument(
                    f"unknown deployment target {name!r}: choose from {', '.join(TARGETS)}"
                )
            if name not in chosen:
                chosen.append(name)
    if not chosen:
        raise InvalidArgument(f"name at least one target: {', '.join(TARGETS)}")
    return chosen


def render(targets: Sequence[str] | str, settings: DeploySettings) -> dict[str, bytes]:
    """Every file the targets need, by path relative to the output folder (nothing written)."""
    chosen = _targets(targets)
    eg_targets = [t for t in chosen if t in ("enterprise-gateway", "helm")]
    if settings.transport_encryption == "required" and eg_targets:
        raise InvalidArgument(
            f"transport_encryption='required' cannot be met by {', '.join(eg_targets)}: "
            "Enterprise Gateway 3.x does not encrypt kernel connections; use Kernel Gateway "
            "with gateway_provisioners (the kubernetes target), or transport_encryption='auto'"
        )
    if "enterprise-gateway" in chosen and not settings.hosts:
        raise InvalidArgument("the enterprise-gateway target needs hosts (--hosts h1,h2)")
    files: dict[str, bytes] = {}
    if "enterprise-gateway" in chosen:
        files.update(_enterprise_gateway(settings))
    if "kubernetes" in chosen or "helm" in chosen:
        files.update(_kubernetes(settings, settings.transport_encryption != "required"))
    if "helm" in chosen:
        files.update(_helm(settings))
    return files


# -- writing ---------------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _split(relative: str) -> tuple[str, str]:
    pure = PurePosixPath(relative)
    return str(pure.parent) if str(pure.parent) != "." else "", pure.name


def _existing(root: Path, relative: str) -> bytes | None:
    """The regular file at ``root/relative`` (None if absent); links and FIFOs are refused."""
    folder_rel, name = _split(relative)
    try:
        with Folder.open(root, folder_rel) as folder:
            if folder.lstat(name) is None:
                return None
            return folder.read_bytes(name, limit=_MAX_FILE)
    except FileNotFoundError:
        return None


def _manifest(root: Path) -> dict[str, str]:
    raw = _existing(root, MANIFEST)
    if raw is None:
        return {}
    try:
        written = json.loads(raw).get("written", {})
    except (ValueError, AttributeError):
        return {}
    if not isinstance(written, dict):
        return {}
    return {str(k): str(v) for k, v in written.items()}


def _open_root(out_dir: Path) -> Path:
    """The output folder, made if missing (its parent must exist); never through a link."""
    out_dir = Path(os.path.abspath(out_dir))
    try:
        Folder.open(out_dir).close()
    except FileNotFoundError:
        try:
            Folder.open(out_dir.parent, out_dir.name, create=True, mode=0o755).close()
        except (FileNotFoundError, StorageError) as exc:
            if exc.errno != errno.ENOENT:
                raise
            raise InvalidArgument(
                f"cannot write into {out_dir}: its parent folder does not exist"
            ) from None
    return out_dir


def write_deployment(
    targets: Sequence[str] | str,
    out_dir: Path,
    settings: DeploySettings,
    *,
    force: bool = False,
) -> list[Path]:
    """Write the files of ``targets`` into ``out_dir``; returns their paths.

    Refuses (:class:`~jupyter_exec.StorageError`, ``EEXIST``) before writing anything when a
    file it would replace was not written by it, unless ``force``; refuses a symbolic link
    anywhere under ``out_dir`` always (``ELOOP``).
    """
    files = render(targets, settings)
    root = _open_root(out_dir)
    ours = _manifest(root)
    foreign = []
    for relative in [*files, MANIFEST]:
        current = _existing(root, relative)
        if current is None or relative == MANIFEST:
            continue
        if ours.get(relative) != _sha(current) and current != files[relative]:
            foreign.append(relative)
    if foreign and not force:
        raise StorageError(
            f"refusing to overwrite {', '.join(foreign)} in {root}: jupyter-exec did not write "
            "them (or they were edited since); move them away, or pass force to replace them",
            errno.EEXIST,
        )
    written: list[Path] = []
    for relative, data in files.items():
        folder_rel, name = _split(relative)
        with Folder.open(root, folder_rel, create=True) as folder:
            folder.write_atomic(name, [data], mode=0o755 if name.endswith(".py") else 0o644)
        ours[relative] = _sha(data)
        written.append(root / relative)
    manifest = {"written": dict(sorted(ours.items()))}
    with Folder.open(root) as folder:
        folder.write_atomic(MANIFEST, [_json(manifest)], mode=0o644)
    return written
