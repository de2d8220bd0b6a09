"""The Kubernetes side: a hardened kernel pod, the NetworkPolicy around it, Helm values.

Both gateways that run kernels on Kubernetes (Enterprise Gateway's KubernetesProcessProxy,
gateway_provisioners' KubernetesProvisioner) launch a kernel the same way: the kernelspec's
argv runs ``launch_kubernetes.py`` next to a Jinja2 template ``kernel-pod.yaml.j2``, which it
renders with every ``KERNEL_*`` variable of the start request (lower-cased) and sends to the API
server. Those variables come from whoever holds the gateway's token, so the template written
here takes only two of them, the ones the gateway itself sets and finds the pod by
(``kernel_pod_name``, ``kernel_id``), each through Jinja2's ``tojson``
(a JSON string is a YAML scalar; the filter exists in every Jinja2 either gateway uses). Image,
user, resources, volumes and namespace are fixed at write time: a client cannot pick another
image, run as root, mount a host path or leave the namespace the NetworkPolicy guards (the API
server refuses a pod whose namespace differs from the one it is sent to).

The pod runs the jupyter-exec launcher (shipped in a ConfigMap, so it is always the gateway
side's version) with the kernel image's own Python: non-root, read-only root filesystem with
``emptyDir`` work and temp dirs, every capability dropped, no privilege escalation, seccomp
``RuntimeDefault``, no service-account token, requests and limits. Its argv is a fixed
``sh -c`` script that reads the values the gateway adds to the pod's environment
(``KERNEL_ID``, ``RESPONSE_ADDRESS``...) as quoted parameters, so no value is evaluated as shell
code, and Kubernetes' own ``$(VAR)`` expansion never sees one.
"""

from __future__ import annotations

from typing import Any

from jupyter_exec.cluster.settings import DeploySettings

__all__ = [
    "CONFIGMAP_NAME",
    "KERNEL_LABELS",
    "POD_TEMPLATE_VARIABLES",
    "configmap",
    "eg_kernelspec",
    "gp_kernelspec",
    "helm_values",
    "kernelspecs_dockerfile",
    "network_policy",
    "pod_template",
]

KERNEL_NAME = "jupyter_exec_kubernetes"
CONFIGMAP_NAME = "jupyter-exec-launcher"
LAUNCHER_MOUNT = "/opt/jupyter-exec"
WORK_MOUNT = "/work"
KERNEL_LABELS = {"app": "jupyter-exec", "component": "kernel"}
"""Kernel pods' labels: ``component=kernel`` is how both gateways find their pods; ``app`` is
ours, never the gateway's, so a kernel pod never matches the gateway's selector."""

POD_TEMPLATE_VARIABLES = ("kernel_pod_name", "kernel_id")
"""The only template variables the pod template reads (the gateway sets them, not the client)."""

GATEWAY_ENV = ("KERNEL_ID", "RESPONSE_ADDRESS", "PUBLIC_KEY", "PORT_RANGE", "TRANSPORT_ENCRYPTION")
"""What ``launch_kubernetes.py`` puts in the pod's environment for the launcher to read."""

_MARK = "JUPYTER_EXEC_TEMPLATE_"
_EG_PROXIES = "enterprise_gateway.services.processproxies"


def launch_script(settings: DeploySettings) -> str:
    """The pod's ``sh -c`` script: a fixed text, the gateway's values only as quoted parameters."""
    return (
        f"exec {settings.pod_python} {LAUNCHER_MOUNT}/launcher.py"
        ' --kernel-id "$KERNEL_ID" --response-address "$RESPONSE_ADDRESS"'
        ' --public-key "$PUBLIC_KEY" --port-range "$PORT_RANGE"'
        ' --transport-encryption "$TRANSPORT_ENCRYPTION"'
        ' --ip "$JUPYTER_EXEC_POD_IP" --gateway-ip "${RESPONSE_ADDRESS%:*}"'
        f" --work-root {WORK_MOUNT}"
    )


def _pod(settings: DeploySettings) -> dict[str, Any]:
    drop_all = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    env: list[dict[str, Any]] = [{"name": name, "value": ""} for name in GATEWAY_ENV]
    env += [
        {"name": "JUPYTER_EXEC_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOME", "value": "/tmp"},
        {"name": "TMPDIR", "value": "/tmp"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{_MARK}kernel_pod_name",
            "namespace": settings.namespace,
            "labels": {**KERNEL_LABELS, "kernel_id": f"{_MARK}kernel_id"},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": settings.service_account,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": settings.kernel_uid,
                "runAsGroup": settings.kernel_gid,
                "fsGroup": settings.kernel_gid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "kernel",
                    "image": settings.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", launch_script(settings)],
                    "workingDir": WORK_MOUNT,
                    "env": env,
                    "securityContext": drop_all,
                    "resources": {
                        "requests": {
                            "cpu": settings.cpu_request,
                            "memory": settings.memory_request,
                        },
                        "limits": {
                            "cpu": settings.cpu_limit,
                            "memory": settings.memory_limit,
                            "ephemeral-storage": settings.work_size,
                        },
                    },
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "work", "mountPath": WORK_MOUNT},
                        {"name": "launcher", "mountPath": LAUNCHER_MOUNT, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": settings.tmp_size}},
                {"name": "work", "emptyDir": {"sizeLimit": settings.work_size}},
                {"name": "launcher", "configMap": {"name": CONFIGMAP_NAME, "defaultMode": 0o444}},
            ],
        },
    }


def pod_template(settings: DeploySettings, dump: Any) -> str:
    """``kernel-pod.yaml.j2``: the pod as YAML, with the gateway's two values as ``tojson``.

    ``dump`` is ``yaml.safe_dump``-like (passed in so this module needs no YAML library).
    The settings' values are plain by construction (see :mod:`.settings`); the count of
    Jinja2 delimiters is checked anyway, so no value can ever open a template expression.
    """
    text = str(dump(_pod(settings)))
    expected = 0
    for name in POD_TEMPLATE_VARIABLES:
        expected += text.count(f"{_MARK}{name}")
        text = text.replace(f"{_MARK}{name}", "{{ " + name + " | tojson }}")
    header = (
        "# Kernel pod for Enterprise Gateway / gateway_provisioners, written by jupyter-exec.\n"
        "# Rendered by the gateway's launch_kubernetes.py; only the gateway's own values\n"
        "# (pod name, kernel id) are substituted: edit the rest here, not per request.\n"
    )
    opened = sum(text.count(d) for d in ("{{", "{%", "{#"))
    if opened != expected or expected != len(POD_TEMPLATE_VARIABLES):
        raise AssertionError("a value would open a Jinja2 expression in the pod template")
    return header + text


def network_policy(settings: DeploySettings) -> dict[str, Any]:
    """Only the gateway's pod reaches kernel pods (on the kernel ports); kernels reach only
    the gateway's response port. Nothing else in or out, DNS included (the response address
    is an IP)."""
    key, value = settings.gateway_label
    gateway = {"podSelector": {"matchLabels": {key: value}}}
    low, high = settings.port_range
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "jupyter-exec-kernels", "namespace": settings.namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(KERNEL_LABELS)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [gateway], "ports": [{"protocol": "TCP", "port": low, "endPort": high}]}
            ],
            "egress": [
                {"to": [gateway], "ports": [{"protocol": "TCP", "port": settings.response_port}]}
            ],
        },
    }


def configmap(settings: DeploySettings, launcher_source: str) -> dict[str, Any]:
    """The launcher, mounted read-only into every kernel pod."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME, "namespace": settings.namespace},
        "data": {"launcher.py": launcher_source},
    }


def _argv(settings: DeploySettings, *, eg: bool) -> list[str]:
    """``launch_kubernetes.py`` and its placeholders, in each gateway's spelling."""
    script = f"{settings.kernelspec_dir}/{KERNEL_NAME}/scripts/launch_kubernetes.py"
    prefix = "--RemoteProcessProxy." if eg else "--"
    argv = ["python", script]
    for name in ("kernel-id", "port-range", "response-address", "public-key"):
        argv += [prefix + name, "{" + name.replace("-", "_") + "}"]
    if not eg:
        argv += ["--transport-encryption", "{transport_encryption}"]
    return argv


def eg_kernelspec(settings: DeploySettings) -> dict[str, Any]:
    """Enterprise Gateway's KubernetesProcessProxy kernelspec (EG has no transport encryption)."""
    return {
        "display_name": "Python 3 (jupyter-exec, Kubernetes)",
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {
            "process_proxy": {
                "class_name": f"{_EG_PROXIES}.k8s.KubernetesProcessProxy",
                "config": {"image_name": settings.image},
            }
        },
        "env": {},
        "argv": _argv(settings, eg=True),
    }


def gp_kernelspec(settings: DeploySettings) -> dict[str, Any]:
    """gateway_provisioners' KubernetesProvisioner kernelspec, with transport encryption."""
    metadata: dict[str, Any] = {
        "kernel_provisioner": {
            "provisioner_name": "kubernetes-provisioner",
            "config": {
                "image_name": settings.image,
                "port_range": settings.port_range_text,
                "launch_timeout": settings.launch_timeout,
                "authorized_users": list(settings.authorized_users),
                "unauthorized_users": list(settings.unauthorized_users),
            },
        }
    }
    if settings.transport_encryption != "disabled":
        metadata["supported_encryption"] = ["curve"]
    return {
        "display_name": "Python 3 (jupyter-exec, Kubernetes)",
        "language": "python",
        "interrupt_mode": "message",
        "metadata": metadata,
        "env": {},
        "argv": _argv(settings, eg=False),
    }


def kernelspecs_dockerfile(settings: DeploySettings) -> str:
    """The data image Helm's ``kernelspecs.image`` copies into the gateway's kernels dir.

    Enterprise Gateway's ``launch_kubernetes.py`` is taken from its own image (it ships with
    every kernelspec there), so the launcher that renders our template is EG's, unchanged.
    """
    shipped = f"{settings.kernelspec_dir}/python_kubernetes/scripts/launch_kubernetes.py"
    return (
        "# The kernelspecs data image for Enterprise Gateway's Helm chart (kernelspecs.image).\n"
        "# Build it from this folder:\n"
        f"#   docker build -f kernelspecs.Dockerfile -t {settings.kernelspecs_image} .\n"
        f"FROM {settings.gateway_image} AS gateway\n"
        "FROM busybox:1.36\n"
        f"COPY enterprise-gateway/{KERNEL_NAME} /kernels/{KERNEL_NAME}\n"
        f"COPY --from=gateway {shipped} /kernels/{KERNEL_NAME}/scripts/launch_kubernetes.py\n"
    )


def helm_values(settings: DeploySettings) -> dict[str, Any]:
    """Values for Enterprise Gateway's chart (its own keys, from the chart's values.yaml).

    Kernels share the gateway's namespace (the one the NetworkPolicy guards), the service is
    cluster-internal (the chart's default is a NodePort on every node), the kernel image puller
    (a DaemonSet with the container runtime's socket) is off, and no token is written: pass it
    at install time (``--set authToken=$JUPYTER_EXEC_GATEWAY_TOKEN``).
    """
    extra_env = {
        "EG_PORT_RANGE": settings.port_range_text,
        "EG_UNAUTHORIZED_USERS": ",".join(settings.unauthorized_users),
    }
    if settings.authorized_users:
        extra_env["EG_AUTHORIZED_USERS"] = ",".join(settings.authorized_users)
    return {
        "global": {"rbac": True},
        "image": settings.gateway_image,
        "imagePullPolicy": "IfNotPresent",
        "service": {
            "type": "ClusterIP",
            "ports": [
                {
                    "name": "http",
                    "port": settings.gateway_port,
                    "targetPort": settings.gateway_port,
                },
                {
                    "name": "http-response",
                    "port": settings.response_port,
                    "targetPort": settings.response_port,
                },
            ],
        },
        "deployment": {"enabled": True, "replicas": 1, "extraEnv": extra_env},
        "logLevel": "INFO",
        "mirrorWorkingDirs": False,
        "kernel": {
            "shareGatewayNamespace": True,
            "launchTimeout": settings.launch_timeout,
            "allowedKernels": [KERNEL_NAME],
            "defaultKernelName": KERNEL_NAME,
            "defaultServiceAccountName": settings.service_account,
        },
        "kernelspecs": {"image": settings.kernelspecs_image, "imagePullPolicy": "IfNotPresent"},
        "ingress": {"enabled": False},
        "kip": {"enabled": False},
    }
