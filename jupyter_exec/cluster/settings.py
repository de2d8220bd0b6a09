"""What the deployment files are written from, checked once, before anything is written.

Every value here ends up inside a file another program reads back in its own syntax: a
kernelspec argv that Enterprise Gateway joins with spaces into an SSH command line (no
quoting), an ``EG_*`` environment file a shell may source, a Jinja2 template that the gateway
renders, YAML that Kubernetes and Helm parse. Quoting for each of those is easy to get wrong
in one of them, so the values are held to plain character sets instead: a host name is a DNS
name or an IP literal, a path is ``[A-Za-z0-9_./+-]``, an image is a Docker reference, a
namespace a DNS label. A value outside its set is an :class:`~jupyter_exec.InvalidArgument`
naming the field, before any file is touched; the writers still serialise with ``json`` and
``yaml.safe_dump`` rather than formatting text by hand.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_exec.exceptions import InvalidArgument


def launcher_name(source: bytes) -> str:
    """The launcher's content-addressed name: a new launcher never overwrites one in use."""
    return f"launcher-{hashlib.sha256(source).hexdigest()[:16]}.py"


__all__ = ["ENCRYPTION_POLICIES", "DeploySettings"]

ENCRYPTION_POLICIES = ("disabled", "auto", "required")
"""gateway_provisioners' spellings of the transport-encryption policy (CurveZMQ)."""

_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")
_COMMAND = re.compile(r"[A-Za-z0-9_./+-]+")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_IMAGE_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]{{1,5}})?/)?{_IMAGE_PART}(?:/{_IMAGE_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_LABEL_KEY = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")

_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_SUFFIX.update({f"{s}i": float(1024 ** (i + 1)) for i, s in enumerate("KMGTPE")})


def _refuse(name: str, value: object, rule: str) -> InvalidArgument:
    return InvalidArgument(f"{name}={value!r} is refused: {rule}")


def _check(name: str, value: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _refuse(name, value, rule)
    return value


def _check_host(value: object) -> str:
    """A DNS name or an IP literal; never one that makes the gateway skip SSH."""
    rule = "a host is a DNS name or an IP address (letters, digits, '-', '.'; no ',' or spaces)"
    if not isinstance(value, str) or not value:
        raise _refuse("hosts", value, rule)
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if len(value) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in value.split(".")):
            raise _refuse("hosts", value, rule) from None
        if value.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
            raise _refuse(
                "hosts",
                value,
                "the gateway starts kernels for a local host without SSH, on its own "
                "machine (use a loopback alias such as 127.0.0.2 for a test cluster)",
            ) from None
        return value
    if address.is_unspecified or str(address) in ("127.0.0.1", "::1"):
        raise _refuse(
            "hosts",
            value,
            "the gateway starts kernels for this address without SSH, on its own machine "
            "(use a loopback alias such as 127.0.0.2 for a test cluster)",
        )
    return str(address)


def _quantity(value: str) -> float:
    number = re.match(r"[0-9.]+", value)
    assert number is not None  # the value matched _QUANTITY
    return float(number.group()) * _SUFFIX.get(value[number.end() :], 1.0)


def _check_label(name: str, value: object) -> tuple[str, str]:
    if not isinstance(value, str) or value.count("=") != 1:
        raise _refuse(name, value, "a Kubernetes label is written key=value")
    key, label = value.split("=")
    if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(label) or len(label) > 63:
        raise _refuse(name, value, "not a valid Kubernetes label key=value")
    return key, label


@dataclass(frozen=True)
class DeploySettings:
    """Everything the Enterprise Gateway, Kubernetes and Helm files are written from.

    Checked when made: a value that could break out of the file it lands in is refused
    with an :class:`~jupyter_exec.InvalidArgument` naming the field.
    """

    hosts: tuple[str, ...] = ()
    """Hosts the distributed kernelspec places kernels on (Enterprise Gateway over SSH)."""
    ssh_port: int = 22
    ssh_user: str | None = None
    """The remote user the gateway's SSH logs in as (``EG_REMOTE_USER``); None: the gateway's."""
    python: str = "python3"
    """The interpreter on each host that runs the launcher and the kernel."""
    remote_dir: str = "/var/tmp/jupyter-exec"
    """On each host: the launcher (``launcher-<sha256>.py``) and the kernels' work dirs
    (``kernels/<id>/``)."""
    response_ip: str | None = None
    """Where the hosts reach the gateway; None is 127.0.0.1, allowed only for loopback hosts."""
    response_port: int = 8877
    gateway_ip: str = "127.0.0.1"
    """The address Enterprise Gateway's HTTP listens on (``EG_IP``): loopback by default."""
    gateway_port: int = 8888
    port_range: tuple[int, int] = (40000, 41000)
    """The ports kernels bind (``--port-range``); the NetworkPolicy opens only these.
    Enterprise Gateway and gateway_provisioners count a range as ``high - low`` and
    refuse one under 1000 (``GP_MIN_PORT_RANGE_SIZE``), so the default spans 1001 ports."""
    authorized_users: tuple[str, ...] = ()
    unauthorized_users: tuple[str, ...] = ("root",)
    transport_encryption: str = "auto"
    """CurveZMQ between gateway and kernels where the gateway supports it (gateway_provisioners)."""
    launch_timeout: int = 60
    image: str = "jupyter-exec/kernel:latest"
    pod_python: str = "/opt/kernel/bin/python"
    """The kernel image's interpreter, by absolute path (the gateway may hand the pod its PATH)."""
    namespace: str = "jupyter-exec"
    """Where the gateway and its kernel pods run (the Helm release's namespace)."""
    service_account: str = "default"
    """The kernel pods' service account; its token is never mounted."""
    kernel_uid: int = 1000
    kernel_gid: int = 1000
    cpu_request: str = "250m"
    cpu_limit: str = "1"
    memory_request: str = "512Mi"
    memory_limit: str = "2Gi"
    work_size: str = "1Gi"
    tmp_size: str = "256Mi"
    gateway_selector: str = "gateway-selector=enterprise-gateway"
    """The label of the gateway's pod: the one peer the NetworkPolicy lets reach kernel pods."""
    gateway_image: str = "elyra/enterprise-gateway:3.3.0"
    kernelspecs_image: str = "jupyter-exec/eg-kernelspecs:latest"
    """The data image Helm's ``kernelspecs.image`` copies kernelspecs from (Dockerfile written)."""
    kernelspec_dir: str = "/usr/local/share/jupyter/kernels"
    """Where kernelspecs live inside the gateway's image (the argv paths point there)."""
    launcher: Path | None = field(default=None, compare=False)
    """The launcher shipped to kernel pods; None: jupyter-exec's own (``cluster/launcher.py``)."""

    def __post_init__(self) -> None:
        hosts = tuple(self.hosts) if not isinstance(self.hosts, str) else (self.hosts,)
        checked = tuple(_check_host(h) for h in hosts)
        if len(set(checked)) != len(checked):
            raise _refuse("hosts", self.hosts, "a host is named twice")
        object.__setattr__(self, "hosts", checked)
        for name in ("ssh_port", "response_port", "gateway_port"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value < 65536:
                raise _refuse(name, value, "a port is a whole number from 1 to 65535")
        if self.ssh_user is not None:
            _check("ssh_user", self.ssh_user, _USER, "a user name is letters, digits, _ . -")
        _check("python", self.python, _COMMAND, "a command or path of [A-Za-z0-9_./+-]")
        self._check_path("remote_dir", self.remote_dir)
        self._check_path("pod_python", self.pod_python)
        self._check_path("kernelspec_dir", self.kernelspec_dir)
        for name in ("response_ip", "gateway_ip"):
            self._check_ip(name, getattr(self, name))
        if self.response_ip is None and not all(_is_loopback(h) for h in self.hosts):
            raise InvalidArgument(
                "response_ip is required for hosts that are not on loopback: name the address "
                "the hosts reach the gateway on (else kernels answer to the gateway's first "
                "non-loopback address, which may not be the one they can reach)"
            )
        self._check_port_range()
        for name in ("authorized_users", "unauthorized_users"):
            users = getattr(self, name)
            if isinstance(users, str):
                raise _refuse(name, users, "give a sequence of user names, not one string")
            object.__setattr__(self, name, tuple(users))
            for user in getattr(self, name):
                _check(name, user, _USER, "a user name is letters, digits, _ . - (no ',')")
        if self.transport_encryption not in ENCRYPTION_POLICIES:
            raise _refuse(
                "transport_encryption",
                self.transport_encryption,
                "one of " + ", ".join(ENCRYPTION_POLICIES),
            )
        if type(self.launch_timeout) is not int or not 0 < self.launch_timeout <= 3600:
            raise _refuse("launch_timeout", self.launch_timeout, "whole seconds, 1 to 3600")
        for name in ("image", "gateway_image", "kernelspecs_image"):
            _check(
                name,
                getattr(self, name),
                _IMAGE,
                "a Docker image reference (name[:tag][@sha256:...])",
            )
        _check("namespace", self.namespace, _NAMESPACE, "a Kubernetes namespace (DNS label)")
        _check("service_account", self.service_account, _NAMESPACE, "a Kubernetes name (DNS label)")
        for name in ("kernel_uid", "kernel_gid"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value < 2**31:
                raise _refuse(name, value, "kernel pods never run as root: a number above 0")
        self._check_resources()
        _check_label("gateway_selector", self.gateway_selector)

    @staticmethod
    def _check_path(name: str, value: object) -> None:
        rule = "an absolute path of [A-Za-z0-9_./+-], without '..'"
        _check(name, value, _PATH, rule)
        assert isinstance(value, str)
        if ".." in value.split("/") or value.rstrip("/") == "":
            raise _refuse(name, value, rule)

    @staticmethod
    def _check_ip(name: str, value: object) -> None:
        if value is None and name == "response_ip":
            return
        try:
            ipaddress.ip_address(value)  # type: ignore[arg-type]
        except ValueError:
            raise _refuse(name, value, "an IP address") from None
        if ipaddress.ip_address(value).is_unspecified:  # type: ignore[arg-type]
            raise _refuse(name, value, "never 0.0.0.0 or :: by our configuration")

    def _check_port_range(self) -> None:
        low, high = self.port_range
        if not (type(low) is int and type(high) is int and low >= 1024 and high < 65536):
            raise _refuse("port_range", self.port_range, "two ports from 1024 to 65535")
        if high - low < 1000:  # the gateways' own arithmetic: 40000..40999 is 999 to them
            raise _refuse(
                "port_range", self.port_range, "the gateways want high - low of at least 1000"
            )
        object.__setattr__(self, "port_range", (low, high))

    def _check_resources(self) -> None:
        rule = "a Kubernetes quantity such as 500m, 2, 512Mi or 1Gi"
        for name in (
            "cpu_request",
            "cpu_limit",
            "memory_request",
            "memory_limit",
            "work_size",
            "tmp_size",
        ):
            _check(name, getattr(self, name), _QUANTITY, rule)
        for kind in ("cpu", "memory"):
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            if _quantity(request) > _quantity(limit):
                raise _refuse(f"{kind}_request", request, f"it is above {kind}_limit={limit!r}")

    # -- derived values, one place each -------------------------------------------------------

    @property
    def launcher_path(self) -> str:
        """Where the launcher lives on each host: under its content-addressed name, where
        ``jupyter-exec gateway --hosts ... --remote-dir DIR --check-only`` installs it."""
        source = (self.launcher or Path(__file__).with_name("launcher.py")).read_bytes()
        return f"{self.remote_dir.rstrip('/')}/{launcher_name(source)}"

    @property
    def work_root(self) -> str:
        """The launcher's ``--work-root`` on each host."""
        return f"{self.remote_dir.rstrip('/')}/kernels"

    @property
    def port_range_text(self) -> str:
        return f"{self.port_range[0]}..{self.port_range[1]}"

    @property
    def effective_response_ip(self) -> str:
        return self.response_ip or "127.0.0.1"

    @property
    def gateway_label(self) -> tuple[str, str]:
        return _check_label("gateway_selector", self.gateway_selector)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
