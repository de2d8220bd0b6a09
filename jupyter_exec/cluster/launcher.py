"""The kernel launcher that runs on each cluster host, started over SSH by the gateway.

This file is copied to the hosts and run there with the host's own python, so it imports
nothing from jupyter_exec: only the standard library, pyzmq, and either pycryptodomex
(``Cryptodome``) or ``cryptography``, whichever the host has. ipykernel must be installed.

What it does, in order (the gateway side is gateway_provisioners' ``RemoteProvisionerBase``)::

    gateway ──ssh──> launcher ─┬─ binds 5 kernel ports + its listener on ONE address (the
                               │  address SSH reached this host on, or --ip; never 0.0.0.0)
                               ├─ starts ipykernel as a child in its own process group,
                               │  cwd <work-root>/<kernel id>/work, TMPDIR .../tmp (both 0700)
                               ├─ sends the connection info to --response-address, encrypted
                               │  for the gateway (an AES key wrapped with its RSA public key)
                               └─ serves the listener: {"signum": N} signals the kernel's group
                                  (0 = poll), {"shutdown": 1} stops it; only the gateway's own
                                  address (the SSH client, or --gateway-ip) is listened to, and
                                  only a request carrying the listener token (below)

The launch nonce: jupyter_exec's provisioner writes a one-time nonce to the SSH command's
stdin (never on a command line, which every user of the host can read), the startup command
exports it as ``JUPYTER_EXEC_LAUNCH_NONCE``, and the launcher returns it inside the encrypted
payload (and keeps it from the kernel). The gateway's public key is public, so anyone who can
reach the response port can encrypt a payload; only the real launcher knows the nonce. With a
nonce, the report starts with a line of its own, ``jupyter-exec-response/1 <kernel id> <tag>``
(:func:`response_tag`): jupyter_exec's gateway reads nothing from a connection before that line.

The listener token is ``HMAC-SHA256(kernel key, LISTENER_TOKEN_CONTEXT)``: the gateway has the
kernel's key from the connection info, so jupyter_exec's provisioner adds it to every request
and nothing new travels or is logged. It keeps out other users on the gateway's machine, who
share its address. Enterprise Gateway sends no token, so with EG's argument spellings
(``--RemoteProcessProxy.*``) or ``--listener-auth address`` only the address is checked.

When the kernel exits the launcher closes its listener and exits at once, so the gateway's next
poll (a connect to the listener) is refused and the death is seen. An explicit shutdown removes
``<work-root>/<kernel id>``; a crash or a restart (``{"shutdown": 1, "restart": true}``, sent by
jupyter_exec's provisioner) keeps it, so files survive a restart on the same host. A launch that
fails before its report removes the folder if it made it (a first start). Under Enterprise
Gateway, whose ``kill()`` is a ``{"signum": 15}`` (then 9 if the kernel outlives it) never
followed by a shutdown request the launcher could hear, either request counts as the shutdown.
An explicit shutdown also removes the launcher's own log (its stderr, ``kernel-<id>.log``)
unless the gateway keeps logs (``JUPYTER_EXEC_KEEP_LOGS``). Each folder holds a marker
(:data:`MARKER`: the kernel id, the launcher's pid, the kernel's process group) by which
``jupyter-exec gateway --clean`` and the gateway find what a killed launcher left.

Exit status: 0 after a shutdown or a kernel exit, 2 when the arguments are refused (with a
message on stderr), 1 when the launch failed (the gateway could not be told, or the kernel
could not start).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
"""The version of the connection-info payload gateway_provisioners' ResponseManager decodes."""

KERNEL_PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
ENCRYPTION_POLICIES = ("disabled", "auto", "required")
EXIT_REFUSED = 2
EXIT_FAILED = 1

GRACE_AFTER_CLEAN_EXIT = 0.5
"""How long a kernel that exited with status 0 keeps the listener open: a kernel asked to shut
down over its control channel often exits just before the gateway's listener request arrives,
and that request says whether to remove the work dir. A crash (non-zero status) exits at once."""

TERM_AFTER = 0.5
KILL_AFTER = 1.0
"""After a shutdown request the kernel gets TERM_AFTER s to exit on its own (it was asked over
its control channel too), then SIGTERM; at KILL_AFTER s, SIGKILL."""

MAX_REQUEST = 4096
LISTENER_TOKEN_CONTEXT = b"jupyter-exec launcher listener v1"
LISTENER_AUTH = ("token", "address")
NONCE_ENV = "JUPYTER_EXEC_LAUNCH_NONCE"
KEEP_LOGS_ENV = "JUPYTER_EXEC_KEEP_LOGS"
MARKER = ".jupyter-exec-kernel"
"""A file in every kernel folder the launcher makes (its pid and the kernel id, JSON): what
``jupyter-exec gateway --clean`` looks for before it removes a folder."""


class LaunchRefused(Exception):
    """The arguments or the host cannot give a safe launch; the message says why."""


@dataclass(frozen=True)
class Options:
    """The launcher's validated command line."""

    kernel_id: str
    response_host: str
    response_port: int
    public_key: str
    port_lower: int
    port_upper: int
    encryption: str
    work_root: Path
    ip: str | None
    gateway_ip: str | None
    listener_auth: str = "token"
    enterprise_gateway: bool = False
    """Started with Enterprise Gateway's argument spellings (``--RemoteProcessProxy.*``)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter-exec-launcher",
        description="Start one ipykernel for a kernel gateway (run on a cluster host over SSH).",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--kernel-id", "--RemoteProcessProxy.kernel-id", dest="kernel_id", required=True)
    add("--response-address", "--RemoteProcessProxy.response-address", dest="response_address")
    add("--public-key", "--RemoteProcessProxy.public-key", dest="public_key", required=True)
    add("--port-range", "--RemoteProcessProxy.port-range", dest="port_range", default="0..0")
    add("--transport-encryption", dest="transport_encryption", default="")
    add("--work-root", dest="work_root", required=True)
    add("--ip", dest="ip", default=None, help="the address to bind (default: SSH's server side)")
    add("--gateway-ip", dest="gateway_ip", default=None, help="who may use the listener")
    add("--listener-auth", dest="listener_auth", choices=LISTENER_AUTH, default=None)
    # Enterprise Gateway's kernelspecs pass these to every launcher; they mean nothing here.
    add("--RemoteProcessProxy.spark-context-initialization-mode", dest="_spark", default="none")
    add("--RemoteProcessProxy.cluster-type", dest="_cluster", default=None)
    return parser


def _address(value: str, what: str) -> str:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise LaunchRefused(f"{what} {value!r} is not an IP address") from None
    if address.is_unspecified:
        raise LaunchRefused(f"{what} {value} would listen on every interface; name one address")
    return str(address)


def is_kernel_id(value: str) -> bool:
    """Whether ``value`` is a UUID in its canonical form, as a kernel id must be: it becomes
    a directory name (the gateway's provisioner checks it before it sends it here)."""
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _kernel_id(value: str) -> str:
    if not is_kernel_id(value):
        raise LaunchRefused(f"--kernel-id must be a UUID like {uuid.UUID(int=0)}, not {value!r}")
    return value


def _port_range(value: str) -> tuple[int, int]:
    lower, sep, upper = value.partition("..")
    if not sep or not lower.isdigit() or not upper.isdigit():
        raise LaunchRefused(f"--port-range must look like 40000..41000 or 0..0, not {value!r}")
    low, high = int(lower), int(upper)
    if (low, high) != (0, 0) and not 1024 <= low < high <= 65535:
        raise LaunchRefused(f"--port-range {value} is not a range within 1024..65535")
    return low, high


def parse_args(argv: Sequence[str]) -> Options:
    """Validate the command line; raise LaunchRefused with a clear message for bad input."""
    args = _parser().parse_args(list(argv))
    if not args.response_address:
        raise LaunchRefused("--response-address HOST:PORT is required (the gateway's address)")
    host, sep, port = str(args.response_address).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchRefused(f"--response-address must be HOST:PORT, not {args.response_address!r}")
    encryption = str(args.transport_encryption or "disabled").lower()
    if encryption not in ENCRYPTION_POLICIES:
        raise LaunchRefused(
            f"--transport-encryption must be one of {', '.join(ENCRYPTION_POLICIES)},"
            f" not {args.transport_encryption!r}"
        )
    work_root = Path(args.work_root)
    if not work_root.is_absolute() or ".." in work_root.parts:
        raise LaunchRefused(f"--work-root must be an absolute path without '..': {work_root}")
    low, high = _port_range(str(args.port_range))
    _load_public_key(str(args.public_key))
    enterprise_gateway = any(str(arg).startswith("--RemoteProcessProxy.") for arg in argv)
    listener_auth = args.listener_auth or ("address" if enterprise_gateway else "token")
    return Options(
        kernel_id=_kernel_id(str(args.kernel_id)),
        response_host=_address(host.strip("[]"), "--response-address"),
        response_port=int(port),
        public_key=str(args.public_key),
        port_lower=low,
        port_upper=high,
        encryption=encryption,
        work_root=work_root,
        ip=_address(args.ip, "--ip") if args.ip else None,
        gateway_ip=_address(args.gateway_ip, "--gateway-ip") if args.gateway_ip else None,
        listener_auth=listener_auth,
        enterprise_gateway=enterprise_gateway,
    )


def addresses(opts: Options, environ: dict[str, str]) -> tuple[str, str]:
    """(the address to bind, the address allowed to use the listener).

    Both come from ``$SSH_CONNECTION`` (``client_ip client_port server_ip server_port``) unless
    given: the address SSH reached this host on is the one the gateway will connect to.
    """
    fields = environ.get("SSH_CONNECTION", "").split()
    bind = opts.ip or (_address(fields[2], "the SSH server address") if len(fields) == 4 else None)
    gateway = opts.gateway_ip or (
        _address(fields[0], "the SSH client address") if len(fields) == 4 else None
    )
    if bind is None:
        raise LaunchRefused("no address to bind: not started over SSH, and no --ip given")
    if gateway is None:
        raise LaunchRefused("cannot tell the gateway's address: not over SSH, no --gateway-ip")
    return bind, gateway


# --- the connection info, encrypted for the gateway ----------------------------------------


def _load_public_key(text: str) -> Any:
    """The gateway's RSA public key: base64 DER (a PEM body without its header lines)."""
    try:
        der = base64.b64decode(text, validate=True)
    except ValueError:
        raise LaunchRefused("--public-key is not base64") from None
    try:
        from Cryptodome.PublicKey import RSA

        return RSA.import_key(der)
    except ImportError:
        pass
    except ValueError:
        raise LaunchRefused("--public-key is not an RSA public key") from None
    try:
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.hazmat.primitives.serialization import load_der_public_key
    except ImportError:
        raise LaunchRefused("neither pycryptodomex nor cryptography is installed") from None
    try:
        key = load_der_public_key(der)
    except ValueError:
        raise LaunchRefused("--public-key is not an RSA public key") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise LaunchRefused("--public-key is not an RSA public key")
    return key


def encrypt_payload(info: dict[str, Any], public_key: str) -> bytes:
    """The version-1 payload: connection info under a fresh AES key, the key under RSA.

    AES in ECB mode with PKCS#7 padding and RSA with PKCS#1 v1.5 are what the gateway's
    ResponseManager decrypts; the key is random per launch and used for this one message.
    """
    key = _load_public_key(public_key)
    aes_key = secrets.token_bytes(16)
    plain = json.dumps(info).encode()
    if type(key).__module__.startswith("Cryptodome"):
        from Cryptodome.Cipher import AES, PKCS1_v1_5
        from Cryptodome.Util.Padding import pad

        wrapped = PKCS1_v1_5.new(key).encrypt(aes_key)
        body = AES.new(aes_key, AES.MODE_ECB).encrypt(pad(plain, 16))
    else:
        wrapped, body = _encrypt_with_cryptography(key, aes_key, plain)
    payload = {
        "version": PROTOCOL_VERSION,
        "key": base64.b64encode(wrapped).decode(),
        "conn_info": base64.b64encode(body).decode(),
    }
    return base64.b64encode(json.dumps(payload).encode())


def _encrypt_with_cryptography(key: Any, aes_key: bytes, plain: bytes) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    wrapped = bytes(key.encrypt(aes_key, PKCS1v15()))
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).encryptor()
    return wrapped, encryptor.update(padded) + encryptor.finalize()


def listener_token(kernel_key: bytes) -> str:
    """The token a listener request must carry, derived from the kernel's HMAC key."""
    return hmac.new(kernel_key, LISTENER_TOKEN_CONTEXT, hashlib.sha256).hexdigest()


RESPONSE_HEADER = "jupyter-exec-response/1"
"""The first word of a report to jupyter_exec's gateway (its response port reads nothing else
first): ``jupyter-exec-response/1 <kernel id> <tag>``, then the payload."""

RESPONSE_TAG_CONTEXT = b"jupyter-exec response tag v1\n"


def response_tag(nonce: str, kernel_id: str) -> str:
    """The launch's tag on the response port: ``HMAC-SHA256(nonce, context + kernel id)``.

    Sent in the clear, so it is derived from the nonce rather than the nonce itself: whoever
    sees it can be read by the gateway once, never forge the nonce inside the payload."""
    message = RESPONSE_TAG_CONTEXT + kernel_id.encode()
    return hmac.new(nonce.encode(), message, hashlib.sha256).hexdigest()


def send_payload(
    host: str, port: int, payload: bytes, timeout: float = 10.0, header: bytes = b""
) -> None:
    """Deliver the payload (after ``header``); the gateway reads until the connection closes."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(header + payload)
        sock.shutdown(socket.SHUT_WR)


# --- the host side: directories, ports, the kernel ------------------------------------------


def _private_dir(path: Path) -> Path:
    """Make ``path`` (0700) or reuse it; refuse a link or another user's directory there."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise LaunchRefused(f"{path} is not a directory of this user (a link or planted file?)")
    path.chmod(0o700)
    return path


@dataclass(frozen=True)
class KernelDirs:
    """``<work-root>/<kernel id>`` and what is in it."""

    root: Path
    work: Path
    tmp: Path
    connection_file: Path
    created: bool = False
    """This launch made ``root`` (a first start): a failed launch removes it. A restart's
    folder (kept with the kernel's files) is never removed by a failed launch."""

    @classmethod
    def make(cls, work_root: Path, kernel_id: str) -> KernelDirs:
        work_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not work_root.is_dir():
            raise LaunchRefused(f"--work-root {work_root} is not a directory")
        created = not os.path.lexists(work_root / kernel_id)
        root = _private_dir(work_root / kernel_id)
        marker = {"kernel_id": kernel_id, "pid": os.getpid()}
        _write_private(root / MARKER, json.dumps(marker))
        return cls(
            root=root,
            work=_private_dir(root / "work"),
            tmp=_private_dir(root / "tmp"),
            connection_file=root / "kernel.json",
            created=created,
        )

    def remove(self) -> None:
        # rmtree refuses a link at the top and never follows links below it.
        shutil.rmtree(self.root, ignore_errors=True)


def _bind(ip: str, lower: int, upper: int) -> socket.socket:
    """A TCP socket bound to ``ip`` on a free port (within the range, when one is given)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    candidates = [0] if (lower, upper) == (0, 0) else list(range(lower, upper + 1))
    if len(candidates) > 1:
        start = secrets.randbelow(len(candidates))
        candidates = candidates[start:] + candidates[:start]
    for port in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((ip, port))
        except OSError:
            sock.close()
            continue
        return sock
    raise LaunchRefused(f"no free port on {ip} in {lower}..{upper}")


def reserve_ports(ip: str, lower: int, upper: int) -> tuple[dict[str, int], socket.socket]:
    """Five distinct free ports for the kernel, and the listener socket (listening)."""
    held = [_bind(ip, lower, upper) for _ in KERNEL_PORTS]
    ports = {name: int(held[i].getsockname()[1]) for i, name in enumerate(KERNEL_PORTS)}
    listener = _bind(ip, lower, upper)
    for sock in held:
        sock.close()  # ipykernel binds them again, on the same address
    listener.listen(16)
    listener.setblocking(False)
    return ports, listener


def _curve_keys(policy: str) -> dict[str, str]:
    if policy == "disabled":
        return {}
    import zmq

    if not zmq.has("curve"):
        if policy == "required":
            raise LaunchRefused("transport encryption is required but libzmq has no CurveZMQ")
        return {}
    public, secret = zmq.curve_keypair()
    return {"curve_publickey": public.decode("ascii"), "curve_secretkey": secret.decode("ascii")}


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _log(kernel_id: str, message: str) -> None:
    """One line to stderr (the gateway's kernel log). Never given a key or a secret."""
    stamp = time.strftime("%H:%M:%S")
    print(f"[jupyter-exec launcher {stamp} {kernel_id}] {message}", file=sys.stderr, flush=True)


def _keep_logs() -> bool:
    """Whether the gateway asked to keep kernels' logs (``--keep-logs DAYS``, exported)."""
    return os.environ.get(KEEP_LOGS_ENV, "0").strip() not in ("", "0")


def _remove_own_log(kernel_id: str) -> None:
    """Remove this launcher's log, the file its stderr goes to (``.../kernel-<id>.log``, as
    the gateway's startup command names it): only a regular file of this user by that name,
    never through a link. Where /proc is missing, the gateway removes it."""
    with contextlib.suppress(OSError):
        path = Path(os.readlink("/proc/self/fd/2"))
        info = path.lstat()
        if (
            path.name == f"kernel-{kernel_id}.log"
            and stat.S_ISREG(info.st_mode)
            and info.st_uid == os.getuid()
        ):
            path.unlink()


# --- serving ---------------------------------------------------------------------------------


class Launcher:
    """One kernel's life on this host: start, serve the listener, stop, clean up."""

    def __init__(self, opts: Options, bind_ip: str, gateway_ip: str, dirs: KernelDirs) -> None:
        self.opts = opts
        self.bind_ip = bind_ip
        self.gateway_ip = gateway_ip
        self.dirs = dirs
        self.kernel: subprocess.Popen[bytes] | None = None
        self.listener: socket.socket | None = None
        self.kernel_status: int | None = None
        self.stop_at: float | None = None  # when a stop was asked for
        self.remove_dir = False
        self.sent_term = False
        self.grace_until: float | None = None
        self._stop_signals: list[int] = []
        self.token: str | None = None
        self._wake_r = self._wake_w = -1

    def log(self, message: str) -> None:
        _log(self.opts.kernel_id, message)

    def start(self) -> None:
        """Reserve ports, write the connection file, start ipykernel, tell the gateway."""
        opts = self.opts
        nonce = os.environ.pop(NONCE_ENV, "")  # for the gateway only, never the kernel's
        ports, self.listener = reserve_ports(self.bind_ip, opts.port_lower, opts.port_upper)
        curve = _curve_keys(opts.encryption)
        connection: dict[str, Any] = {
            **ports,
            "ip": self.bind_ip,
            "key": secrets.token_hex(32),
            "transport": "tcp",
            "signature_scheme": "hmac-sha256",
            "kernel_name": "",
            **curve,
        }
        _write_private(self.dirs.connection_file, json.dumps(connection))
        if opts.listener_auth == "token":
            self.token = listener_token(str(connection["key"]).encode())
        env = dict(os.environ)
        tmp = str(self.dirs.tmp)
        env.update(TMPDIR=tmp, TMP=tmp, TEMP=tmp, JUPYTER_EXEC_KERNEL_DIR=str(self.dirs.work))
        env["JUPYTER_EXEC_HOST"] = os.environ.get("JUPYTER_EXEC_HOST") or self.bind_ip
        cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", str(self.dirs.connection_file)]
        self.kernel = subprocess.Popen(
            cmd, cwd=self.dirs.work, env=env, stdin=subprocess.DEVNULL, start_new_session=True
        )
        # The kernel's group too: whoever finds this folder with its launcher gone (the
        # gateway after a launcher's death, ``--clean``) can end the kernel.
        marker = {"kernel_id": opts.kernel_id, "pid": os.getpid(), "kernel_pgid": self.kernel.pid}
        _write_private(self.dirs.root / MARKER, json.dumps(marker))
        comm_port = int(self.listener.getsockname()[1])
        info = {
            **connection,
            "pid": self.kernel.pid,
            "pgid": self.kernel.pid,
            "comm_port": comm_port,
            "kernel_id": opts.kernel_id,
            **({"launch_nonce": nonce} if nonce else {}),
        }
        # jupyter_exec's gateway reads a report only after its tag; Enterprise Gateway (no
        # nonce) reads the bare payload.
        header = (
            f"{RESPONSE_HEADER} {opts.kernel_id} {response_tag(nonce, opts.kernel_id)}\n".encode()
            if nonce
            else b""
        )
        payload = encrypt_payload(info, opts.public_key)
        send_payload(opts.response_host, opts.response_port, payload, header=header)
        self.log(
            f"kernel pid {self.kernel.pid} on {self.bind_ip} ports "
            f"{','.join(str(ports[name]) for name in KERNEL_PORTS)} listener {comm_port}, "
            f"encryption {'curve' if curve else 'off'}, listener auth {opts.listener_auth}, "
            f"work dir {self.dirs.work}"
        )

    def signal_kernel(self, signum: int) -> None:
        if self.kernel is None or self.kernel_status is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.kernel.pid, signum)

    def request_stop(self, remove_dir: bool, now: float, term_now: bool = False) -> None:
        if self.stop_at is None:
            self.stop_at = now - (TERM_AFTER if term_now else 0.0)
        self.remove_dir = self.remove_dir or remove_dir

    def handle_request(self, conn: socket.socket, peer: str, now: float) -> None:
        if peer != self.gateway_ip:
            self.log(f"ignored a listener request from {peer} (only {self.gateway_ip} may ask)")
            return
        conn.settimeout(0.5)
        data = b""
        with contextlib.suppress(OSError):
            while len(data) <= MAX_REQUEST:
                chunk = conn.recv(MAX_REQUEST)
                if not chunk:
                    break
                data += chunk
        try:
            request = json.loads(data or b"null")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            self.log(f"ignored a malformed listener request ({len(data)} bytes)")
            return
        if self.token is not None:
            given = request.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(given, self.token):
                self.log(f"ignored a listener request from {peer} without the listener token")
                return
        signum = request.get("signum")
        if type(signum) is int and signum in signal.valid_signals():
            self.log(f"signal {signum} to the kernel's process group")
            self.signal_kernel(signum)
            if signum in (signal.SIGTERM, signal.SIGKILL) and self.opts.enterprise_gateway:
                # Enterprise Gateway's kill(): the end of this kernel (a shutdown "now", as
                # at EG's own stop, or one whose graceful part failed; SIGTERM first, and
                # SIGKILL only if the kernel outlives it, so on a loaded host a SIGTERM is
                # often the last word). EG sends no shutdown request the launcher could still
                # hear, and restarts on a host of its choosing, so nothing here would use
                # the folder again.
                self.request_stop(remove_dir=True, now=now)
                self.remove_now()
        if request.get("shutdown") == 1:
            restart = request.get("restart") is True
            self.log("shutdown requested" + (" for a restart (work dir kept)" if restart else ""))
            self.request_stop(remove_dir=not restart, now=now)

    def remove_now(self) -> None:
        """The folder and the log removed at once, the kernel killed: EG kills this launcher
        too right after its ``{"signum": 9}`` (over SSH), and a launcher killed before it
        served out would leave them on the host. So they go before the killed kernel is
        even reaped (waiting for that first lost the race on a loaded host), and once more
        after it (a write the kernel had in flight when the SIGKILL came)."""
        self._leave(remove_dir=True)
        end = time.monotonic() + 2.0
        while self.kernel is not None and self.kernel_status is None and time.monotonic() < end:
            self._reap()  # the one place the kernel is waited for (it records the status)
            time.sleep(0.01)
        self._leave(remove_dir=True)

    def _leave(self, *, remove_dir: bool) -> None:
        """What a launcher leaves behind, removed: the connection file always; the kernel's
        folder and this launcher's log unless kept (a restart's folder, ``--keep-logs``)."""
        self.dirs.connection_file.unlink(missing_ok=True)
        if remove_dir:
            self.dirs.remove()
            if not _keep_logs():
                _remove_own_log(self.opts.kernel_id)

    def _accept(self, now: float) -> None:
        assert self.listener is not None
        while True:
            try:
                conn, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            with conn:
                self.handle_request(conn, str(peer[0]), now)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.kernel is not None and pid == self.kernel.pid:
                self.kernel_status = os.waitstatus_to_exitcode(status)
                self.kernel.returncode = self.kernel_status
                # Whatever the kernel started in its group goes with it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def _escalate(self, now: float) -> None:
        if self.stop_at is None or self.kernel_status is not None:
            return
        if now - self.stop_at >= KILL_AFTER:
            self.signal_kernel(signal.SIGKILL)
        elif now - self.stop_at >= TERM_AFTER and not self.sent_term:
            self.sent_term = True
            self.signal_kernel(signal.SIGTERM)

    def _finished(self, now: float) -> bool:
        if self.kernel_status is None:
            return False
        if self.stop_at is not None or self.kernel_status != 0:
            return True
        if self.grace_until is None:
            self.grace_until = now + GRACE_AFTER_CLEAN_EXIT
        return now >= self.grace_until

    def _timeout(self, now: float) -> float:
        if self.grace_until is not None:
            return max(0.0, self.grace_until - now)
        if self.stop_at is not None:
            return 0.05
        return 1.0

    def catch_signals(self) -> None:
        """SIGTERM/SIGINT ask for a stop and SIGCHLD wakes the loop (through a pipe), from
        before the kernel starts, so neither a stop nor a death can slip past."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda n, _f: self._stop_signals.append(n))
        signal.signal(signal.SIGCHLD, lambda _n, _f: None)

    def serve(self) -> int:
        """Serve the listener until the kernel is gone; then clean up and return."""
        assert self.listener is not None
        wake_r, wake_w = self._wake_r, self._wake_w
        stop_signals = self._stop_signals
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, "listener")
        selector.register(wake_r, selectors.EVENT_READ, "signal")
        try:
            while True:
                now = time.monotonic()
                self._reap()
                if stop_signals:
                    self.log(f"signal {stop_signals[-1]} to the launcher: stopping the kernel")
                    stop_signals.clear()
                    self.request_stop(remove_dir=False, now=now, term_now=True)
                self._escalate(now)
                if self._finished(now):
                    break
                for key, _events in selector.select(self._timeout(now)):
                    if key.data == "signal":
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 512)
                    else:
                        self._accept(time.monotonic())
        finally:
            selector.close()
            self.listener.close()  # from here the gateway's poll is refused: the kernel is gone
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
        self.log(
            f"kernel exited with status {self.kernel_status}; "
            + ("work dir removed" if self.remove_dir else "work dir kept")
        )
        self._leave(remove_dir=self.remove_dir)
        return 0

    def abort(self) -> None:
        """The launch failed half-way: stop what was started; remove the kernel's folder if
        this launch made it (a restart's folder, with the kernel's files, is kept)."""
        if self.kernel is not None and self.kernel.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.kernel.pid, signal.SIGKILL)
            self.kernel.wait()
        if self.listener is not None:
            self.listener.close()
        self.dirs.connection_file.unlink(missing_ok=True)
        if self.dirs.created:
            self.dirs.remove()


def main(argv: Sequence[str] | None = None) -> int:
    """Launch, serve, clean up; return the exit status (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
        bind_ip, gateway_ip = addresses(opts, dict(os.environ))
        dirs = KernelDirs.make(opts.work_root, opts.kernel_id)
    except LaunchRefused as exc:
        print(f"jupyter-exec-launcher: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    launcher = Launcher(opts, bind_ip, gateway_ip, dirs)
    launcher.catch_signals()
    try:
        launcher.start()
    except LaunchRefused as exc:
        launcher.abort()
        print(f"jupyter-exec-launcher: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    except OSError as exc:
        launcher.abort()
        _log(opts.kernel_id, f"launch failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    return launcher.serve()


if __name__ == "__main__":
    sys.exit(main())
