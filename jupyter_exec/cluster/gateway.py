"""Configuring and running the server of ``jupyter-exec gateway``: Kernel Gateway or Jupyter Server.

The server runs as a child process, configured by a generated config file in a
directory private to this run (0700: config, the one kernelspec, the runtime
dir, an empty root dir), and by the environment gateway_provisioners reads at
import (:func:`gateway_env`). The token reaches it through a file in that
directory, read by the config file and removed once the server proves it read that config
(:mod:`jupyter_exec.cluster.proof`; nothing else is sent before): never
through its command line (``ps``) or its environment (which provisioners copy
and log at debug level). The child runs in its own session, so a Ctrl-C in the
terminal reaches only us; we forward SIGTERM, on which both servers shut every
kernel down; on Linux it also gets SIGTERM if we die, even by SIGKILL.

What the generated config decides, and why:

* the server's own classes from :mod:`jupyter_exec.cluster.managers`: a spec
  manager that starts no kernel but ours (not even ipykernel's built-in
  ``python3``, which jupyter_client finds whatever the kernel dirs say, and
  which would run on the gateway itself), and a kernel manager that answers a
  provisioner's refusal with a 4xx and its reason, not a 500;
* the kernelspec is the default kernel; ``list_kernels`` on (clients poll
  ``GET /api/kernels/<id>`` to see a restart);
* the restarter on (ours, :class:`~jupyter_exec.cluster.managers.ClusterRestarter`),
  polling every :data:`TIME_TO_DEAD` s, so a remote death is noticed within about a second,
  and a kernel whose pinned host is down is declared dead with the reason; transport
  encryption as asked (``required`` by default);
* the HTTP port on ``--ip`` (loopback by default), the response port on
  :func:`response_ip`, never 0.0.0.0 by our configuration.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_exec.cluster.clean import OWNER_FILE
from jupyter_exec.cluster.spec import SPEC_NAME
from jupyter_exec.exceptions import BackendError, InvalidArgument

__all__ = [
    "SERVERS",
    "TIME_TO_DEAD",
    "TOKEN_ENV",
    "GatewayConfig",
    "GatewayProcess",
    "free_port",
    "gateway_env",
    "keep_token_out_of_logs",
    "private_dirs",
    "response_ip",
    "server_config",
]

SERVERS = ("kernel-gateway", "jupyter-server")
"""The servers ``jupyter-exec gateway`` can run."""

TOKEN_ENV = "JUPYTER_EXEC_GATEWAY_TOKEN"
"""The environment variable a token may come from (else one is generated)."""

TIME_TO_DEAD = 0.5
"""Seconds between the restarter's polls of a kernel: a death is seen within about a second."""

STOP_GRACE = 60.0
"""Seconds the server gets after SIGTERM to shut every kernel down before it is killed."""

_SECRET_ENV = ("JUPYTER_EXEC_GATEWAY_TOKEN", "KG_AUTH_TOKEN", "JUPYTER_TOKEN", "JUPYTER_PASSWORD")
"""Never handed to the server: a token there would be in every provisioner's env dump."""


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the server is started with (the token is kept out of ``repr``)."""

    hosts: tuple[str, ...]
    addresses: tuple[str, ...]
    ssh_port: int
    ssh_user: str
    remote_dir: str
    ip: str = "127.0.0.1"
    port: int = 8888
    server: str = "kernel-gateway"
    transport_encryption: str = "required"
    users: tuple[str, ...] = ()
    keep_logs: int = 0
    """Days the kernels' logs stay on the hosts (0: each goes with its kernel)."""
    token: str = field(default="", repr=False)

    @property
    def authorized_users(self) -> tuple[str, ...]:
        """Who may be named in KERNEL_USERNAME: the running user, then ``--users``."""
        names = [getpass.getuser(), *self.users]
        return tuple(dict.fromkeys(n for n in names if n))

    @property
    def url(self) -> str:
        """The URL clients use (a wildcard ``--ip`` is shown as this machine's name)."""
        host = self.ip
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def local_ip(self) -> str:
        """The address this process reaches the server on (a wildcard is reached on loopback)."""
        if self.ip in ("0.0.0.0", ""):
            return "127.0.0.1"
        if self.ip == "::":
            return "::1"
        return self.ip

    @property
    def local_url(self) -> str:
        """The URL this process polls for readiness (a wildcard is reached on loopback)."""
        host = self.ip
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "[::1]"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def is_loopback(ip: str) -> bool:
    """Whether the server's ``--ip`` is reachable from this machine only."""
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


def response_ip(addresses: Sequence[str]) -> str:
    """The address the hosts reach the gateway on, where its response port listens.

    127.0.0.1 when every host is on loopback; else the source address of this
    machine's route to the first host (a UDP ``connect`` sends nothing), so the
    port is bound to one interface, never to 0.0.0.0.
    """
    if all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((addresses[0], 9))
            source = str(probe.getsockname()[0])
        except OSError as exc:
            raise BackendError(f"no route from this machine to {addresses[0]}: {exc}") from exc
    if ipaddress.ip_address(source).is_unspecified:
        raise BackendError(f"no source address on this machine routes to {addresses[0]}")
    return source


def port_is_taken(ip: str, port: int) -> bool:
    """Whether another socket holds ``ip:port`` now (bound as the servers bind: SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def refuse_taken_port(ip: str, port: int, what: str) -> None:
    """A :class:`BackendError` naming the port when another process holds it."""
    if port_is_taken(ip, port):
        raise BackendError(
            f"port {ip}:{port} ({what} port) is held by another process: refusing to start "
            "(the token would go to whoever answers there); stop it or choose another --port"
        )


def free_port(ip: str = "127.0.0.1") -> int:
    """A port free on ``ip`` now (the server binds it a moment later)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PrivateDirs:
    """The run's private directory and its parts."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def kernels(self) -> Path:
        return self.data / "kernels"

    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    @property
    def server_root(self) -> Path:
        return self.root / "root"

    @property
    def token_file(self) -> Path:
        """The token and the proof key (JSON), read by the config once; removed when ready."""
        return self.root / "token"

    @property
    def config_file(self) -> Path:
        return self.config / "gateway_config.py"


@contextlib.contextmanager
def private_dirs(remote_dir: str = "") -> Iterator[PrivateDirs]:
    """A fresh 0700 directory for one gateway run, removed afterwards; it names this
    process and ``remote_dir`` (``owner.json``), so ``--clean`` can tell a folder a SIGKILL
    left from a running gateway's."""
    root = Path(tempfile.mkdtemp(prefix="jupyter-exec-gateway-"))
    dirs = PrivateDirs(root)
    try:
        # The owner first, whole (written aside, then renamed): a folder is never seen
        # without it while its command lives, so no --clean can take it for a dead one's.
        owner = {"pid": os.getpid(), "remote_dir": remote_dir}
        (root / f"{OWNER_FILE}.new").write_text(json.dumps(owner), encoding="utf-8")
        os.replace(root / f"{OWNER_FILE}.new", root / OWNER_FILE)
        for folder in (dirs.config, dirs.data, dirs.kernels, dirs.runtime, dirs.server_root):
            folder.mkdir(mode=0o700, parents=True)
        yield dirs
    finally:
        shutil.rmtree(root, ignore_errors=True)


def gateway_env(
    config: GatewayConfig, dirs: PrivateDirs, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The server's environment: ours without secrets, Jupyter's dirs private, the GP_* settings."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _SECRET_ENV}
    authorized = config.authorized_users
    env.update(
        {
            "JUPYTER_CONFIG_DIR": str(dirs.config),
            "JUPYTER_DATA_DIR": str(dirs.data),
            "JUPYTER_PATH": str(dirs.data),
            "JUPYTER_RUNTIME_DIR": str(dirs.runtime),
            "JUPYTER_PLATFORM_DIRS": "1",
            # A config file that raises stops the server (traitlets' default: log, go on).
            "TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR": "1",
            "GP_SSH_PORT": str(config.ssh_port),
            "GP_REMOTE_USER": config.ssh_user,
            "GP_RESPONSE_IP": response_ip(config.addresses),
            "GP_RESPONSE_PORT": str(free_port(response_ip(config.addresses))),
            "GP_AUTHORIZED_USERS": ",".join(authorized),
            # gateway_provisioners refuses root by default; refuse it unless it is authorized.
            "GP_UNAUTHORIZED_USERS": "" if "root" in authorized else "root",
            "GP_KERNEL_LOG_DIR": f"{config.remote_dir}/logs",
            "JUPYTER_EXEC_KEEP_LOGS": str(config.keep_logs),
            # gateway_provisioners gives its sockets this timeout, then hands them to asyncio,
            # whose accept/connect then block the event loop that long; with its default
            # (10 ms) and a response-port poll every 0.1 ms, every hop of every message waits
            # ~10 ms (~30 ms a cell). Non-blocking sockets are what asyncio expects.
            "GP_SOCKET_TIMEOUT": "0",
        }
    )
    return env


def _extension_names() -> list[str]:
    """Server extensions enabled by configuration files outside ours (all switched off)."""
    from jupyter_core.paths import jupyter_config_path

    names: set[str] = {"jupyter_exec"}
    for folder in jupyter_config_path():
        conf_d = Path(folder) / "jupyter_server_config.d"
        for path in sorted(conf_d.glob("*.json")) if conf_d.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, AttributeError):
                data = json.loads(path.read_text(encoding="utf-8"))
                names.update(data.get("ServerApp", {}).get("jpserver_extensions", {}))
    return sorted(names)


def read_secrets(path: str) -> tuple[str, str]:
    """(token, proof key) from the token file; runs in the server, from its config file.

    Anything wrong (no file, not JSON, a key missing or empty) raises: the config's guard
    then ends the server (a server must never start without them)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    token, key = data["token"], data["proof_key"]
    if not (isinstance(token, str) and token and isinstance(key, str) and len(key) >= 32):
        raise ValueError(f"{path} does not hold a token and a proof key")
    return token, key


_CONFIG_GUARD = """\
except BaseException as _error:  # traitlets would log it and start with its defaults
    import os as _os, sys as _sys  # nothing of ours: the failure may be an import of ours
    print(f"[jupyter-exec gateway] the generated config did not load "
          f"({{type(_error).__name__}}: {{_error}}): the server does not start",
          file=_sys.stderr, flush=True)
    _os._exit({status})
"""


def server_config(config: GatewayConfig, dirs: PrivateDirs) -> str:
    """The server's config file (Python, as traitlets reads it): fail closed.

    The token and the proof key are read from the token file. Everything runs inside one
    ``try``: any failure (no token file, an unreadable one, the response port held by
    another process) ends the server with :data:`~jupyter_exec.cluster.proof.CONFIG_FAILED`
    and its reason, where traitlets would log the error and start the server with its
    defaults (Kernel Gateway's: no token, port 8888, every kernelspec of the machine).
    """
    common: dict[str, Any] = {
        "KernelSpecManager.ensure_native_kernel": False,
        "KernelSpecManager.allowed_kernelspecs": [SPEC_NAME],
        "KernelManager.autorestart": True,
        "KernelManager.transport_encryption": config.transport_encryption,
        "KernelRestarter.time_to_dead": TIME_TO_DEAD,
        "KernelRestarter.restart_limit": 5,
        "AsyncIOLoopKernelManager.restarter_class": f"{_MANAGERS}.ClusterRestarter",
    }
    if config.server == "kernel-gateway":
        app = "KernelGatewayApp"
        specific: dict[str, Any] = {
            "KernelGatewayApp.ip": config.ip,
            "KernelGatewayApp.port": config.port,
            "KernelGatewayApp.port_retries": 0,
            "KernelGatewayApp.default_kernel_name": SPEC_NAME,
            "KernelGatewayApp.api": PROOF_MODULE,
            "KernelGatewayApp.kernel_spec_manager_class": f"{_MANAGERS}.ClusterKernelSpecManager",
            "KernelGatewayApp.kernel_manager_class": f"{_MANAGERS}.GatewayKernelManager",
            "KernelGatewayApp.kernel_websocket_connection_class": (
                f"{_MANAGERS}.ClusterWebsocketConnection"
            ),
            "JupyterWebsocketPersonality.list_kernels": True,
        }
        token_trait = "KernelGatewayApp.auth_token"
    elif config.server == "jupyter-server":
        app = "ServerApp"
        specific = {
            "ServerApp.ip": config.ip,
            "ServerApp.port": config.port,
            "ServerApp.port_retries": 0,
            "ServerApp.open_browser": False,
            "ServerApp.allow_root": True,
            "ServerApp.root_dir": str(dirs.server_root),
            "ServerApp.terminals_enabled": False,
            "ServerApp.kernel_spec_manager_class": f"{_MANAGERS}.ClusterKernelSpecManager",
            "ServerApp.kernel_manager_class": f"{_MANAGERS}.ServerKernelManager",
            "ServerApp.kernel_websocket_connection_class": (
                f"{_MANAGERS}.ClusterWebsocketConnection"
            ),
            "ServerApp.jpserver_extensions": {
                **{name: False for name in _extension_names()},
                PROOF_MODULE: True,
            },
            "MappingKernelManager.default_kernel_name": SPEC_NAME,
        }
        token_trait = "IdentityProvider.token"
    else:
        raise InvalidArgument(
            f"--server must be one of {', '.join(SERVERS)}, not {config.server!r}"
        )
    lines = [
        f'"""{app} configuration written by jupyter-exec gateway (private to one run)."""',
        "try:",
        "    from jupyter_exec.cluster.gateway import keep_token_out_of_logs, read_secrets",
        "    from jupyter_exec.cluster.responses import BoundedResponseManager",
        "    c = get_config()  # noqa: F821",
        f"    _token, c.GatewayProof.key = read_secrets({str(dirs.token_file)!r})",
        f"    c.{token_trait} = keep_token_out_of_logs(_token)",
    ]
    for key, value in {**common, **specific}.items():
        lines.append(f"    c.{key} = {value!r}")
    # The response port, bound now: a port another process holds stops the start.
    lines.append("    BoundedResponseManager.instance()")
    return "\n".join(lines) + "\n" + _CONFIG_GUARD.format(status=CONFIG_FAILED)


def keep_token_out_of_logs(token: str) -> str:
    """From now on, no log record of this process carries ``token``; returns it.

    Runs in the server, from its config file. Clients may send the token as
    ``?token=`` (the websocket of a browser cannot send a header) and both
    servers log every request's URI: a record factory rewrites any record
    whose text holds the token, whichever logger and handler it goes to.
    """
    if not token:
        return token
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        with contextlib.suppress(Exception):  # a record that cannot be formatted stays as is
            text = record.getMessage()
            if token in text:
                record.msg, record.args = text.replace(token, "[token]"), ()
        return record

    logging.setLogRecordFactory(factory)
    return token


PROOF_PATH = "/jupyter-exec/proof"
"""The server's proof route (``proof.PROOF_PATH``, repeated for the same reason)."""

_MANAGERS = "jupyter_exec.cluster.managers"
"""The server-side classes (imported by the server only: they need Kernel Gateway's package)."""

PROOF_MODULE = "jupyter_exec.cluster.proof"
"""The server's proof route: Kernel Gateway's API module, Jupyter Server's extension."""

CONFIG_FAILED = 78
"""The server's exit status when its config did not load (``proof.CONFIG_FAILED``; that
module needs the servers' packages, so the value is repeated here and pinned by a test)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM (and shuts its kernels down) if this process dies."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class GatewayProcess:
    """The server as a child process: written config, start, wait until it proves it is ours.

    Fail closed: the port must be free before the start (else nothing is started), the
    server must prove it read our config (:mod:`jupyter_exec.cluster.proof`) before the token
    is sent to it, and a server whose config did not load exits instead of serving.
    """

    def __init__(self, config: GatewayConfig, dirs: PrivateDirs, python: str | None = None):
        self.config = config
        self.dirs = dirs
        self.python = python or sys.executable
        self.process: subprocess.Popen[bytes] | None = None
        self._proof_key = secrets.token_hex(32)  # new for every start, in the token file only

    def argv(self) -> list[str]:
        config = f"--config={self.dirs.config_file}"
        if self.config.server == "kernel-gateway":
            # Also here, not only in the config: a Kernel Gateway whose config never loaded
            # runs this API module without a proof key, and exits.
            return [self.python, "-m", "kernel_gateway", f"--KernelGatewayApp.api={PROOF_MODULE}",
                    config]  # fmt: skip
        return [self.python, "-m", "jupyter_server", config]

    def start(self, env: Mapping[str, str]) -> None:
        """Check the port is free, write the config and the token file, start the server."""
        refuse_taken_port(self.config.local_ip, self.config.port, f"the {self.config.server}'s")
        self.dirs.config_file.write_text(server_config(self.config, self.dirs), encoding="utf-8")
        fd = os.open(self.dirs.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"token": self.config.token, "proof_key": self._proof_key}, out)
        self.process = subprocess.Popen(
            self.argv(),
            env=dict(env),
            cwd=self.dirs.server_root,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the server proves it is ours, then until it serves our kernelspec with
        the token; remove the token file either way.

        Until the proof, nothing is sent but a random challenge. Any answer on the port that
        is not the proof is another process (a server that could not bind the port exits):
        a :class:`BackendError` naming the port, and the token is never sent.
        """
        assert self.process is not None
        deadline = time.monotonic() + timeout
        try:
            self._wait(self._proven, deadline, timeout)
            self._wait(self._serves_our_kernelspec, deadline, timeout)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.dirs.token_file.unlink()

    def _wait(self, check: Callable[[], bool], deadline: float, timeout: float) -> None:
        assert self.process is not None
        while True:
            status = self.process.poll()
            if status is not None:
                raise BackendError(self._exit_reason(status))
            if check():
                return
            if time.monotonic() > deadline:
                raise BackendError(
                    f"the {self.config.server} did not answer on {self.config.local_url} "
                    f"within {timeout:g} s (its log is above)"
                )
            time.sleep(0.1)

    def _exit_reason(self, status: int) -> str:
        where = f"{self.config.local_ip}:{self.config.port}"
        if status == CONFIG_FAILED:
            return (
                f"the {self.config.server} refused to start: its generated config did not "
                "load (the reason is above)"
            )
        if port_is_taken(self.config.local_ip, self.config.port):
            return (
                f"port {where} is held by another process: the {self.config.server} could not "
                "listen there and exited (nothing was sent to that process)"
            )
        return f"the {self.config.server} exited with status {status} while starting (log above)"

    def _proven(self) -> bool:
        """True once the port answers with the proof; False while nothing listens there."""
        challenge = secrets.token_hex(16)
        url = f"{self.config.local_url}{PROOF_PATH}?challenge={challenge}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read(256).decode("ascii", "replace").strip()
        except urllib.error.HTTPError as exc:  # an answer, not ours
            exc.close()
            text = ""
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ConnectionRefusedError):
                return False  # nothing listens yet: the server is still starting
            text = ""
        expected = hmac.new(self._proof_key.encode(), challenge.encode(), hashlib.sha256)
        if hmac.compare_digest(text, expected.hexdigest()):
            return True
        raise BackendError(
            f"port {self.config.local_ip}:{self.config.port} is answered by another process "
            f"(it could not prove it is this {self.config.server}): refusing to send it the "
            "token; stop that process or choose another --port"
        )

    def _serves_our_kernelspec(self) -> bool:
        request = urllib.request.Request(
            f"{self.config.local_url}/api/kernelspecs",
            headers={"Authorization": f"token {self.config.token}"},
        )
        with (
            contextlib.suppress(urllib.error.URLError, OSError, ValueError),
            urllib.request.urlopen(request, timeout=5) as response,
        ):
            return SPEC_NAME in json.load(response).get("kernelspecs", {})
        return False

    def poll(self) -> int | None:
        """The server's exit status, or None while it runs."""
        assert self.process is not None
        return self.process.poll()

    def stop(self, grace: float = STOP_GRACE) -> bool:
        """SIGTERM (the server shuts every kernel down), SIGKILL after ``grace``; True if clean."""
        process = self.process
        if process is None or process.poll() is not None:
            return True
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
            return True
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
            return False
