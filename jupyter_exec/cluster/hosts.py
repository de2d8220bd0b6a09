"""Checking the hosts a gateway will place kernels on, over SSH, and installing the launcher there.

gateway_provisioners only finds out that a host cannot run a kernel when a
client asks for one, and then says so as a bare 500 after its launch timeout.
This module asks first, the way the gateway itself will connect (paramiko, the
user's own ``~/.ssh`` keys and ``known_hosts``, unknown host keys rejected, the
host's IPv4 address as the name the host key is looked up under), and turns
every failure into one sentence that says what to do:

* which hosts are refused by rule (:func:`resolve_hosts`): a host that
  gateway_provisioners would start kernels on *without* SSH (127.0.0.1,
  ``localhost``, this machine's public addresses: as the gateway's own user,
  outside the launcher) is always refused; any other address of this machine
  (127.0.0.2, ...) only without ``allow_this_machine``;
* what each host has (:func:`check_host`): SSH reachable, the interpreter and
  its version, ipykernel, jupyter_client, pyzmq and a crypto library;
* the launcher, copied by SFTP to a content-addressed path under the remote
  dir, mode 0700 (:func:`install_launcher`).

A host's answers are its word: read up to :data:`MAX_ANSWER_BYTES`, and whatever of
them a person sees (its interpreter, package versions, error lines, home folder) goes
through :func:`jupyter_exec.boundary.replies.printable` first, so an answer cannot
drive the terminal (retitle it, erase a line, forge "ok").

Errors: :class:`~jupyter_exec.exceptions.InvalidArgument` for a host the
arguments should not have named, :class:`~jupyter_exec.exceptions.BackendError`
for a host that cannot be used as it is; paramiko's and the socket layer's
exceptions are translated once, in :func:`_ssh_errors`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import posixpath
import shlex
import socket
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_exec.boundary.replies import printable
from jupyter_exec.cluster.settings import launcher_name
from jupyter_exec.exceptions import BackendError, InvalidArgument, MissingDependency

if TYPE_CHECKING:
    import paramiko

__all__ = [
    "MIN_PYTHON",
    "HostReport",
    "SSHTarget",
    "absolute_remote_dir",
    "check_host",
    "connect",
    "install_launcher",
    "launcher_name",
    "launcher_source",
    "remote_home",
    "require_paramiko",
    "resolve_hosts",
    "run_command",
]

MIN_PYTHON = (3, 9)
"""The oldest interpreter the launcher and a current ipykernel run on."""

MAX_ANSWER_BYTES = 64 << 10
"""What the probe may print, on stdout and on stderr each (it prints about 300 bytes)."""

CONNECT_TIMEOUT = 10.0
"""Seconds for the TCP connection, the SSH banner and the authentication, each."""

COMMAND_TIMEOUT = 60.0
"""Seconds the probe may take on a host (a cold interpreter importing ipykernel)."""

_PROBE = r"""
import json, sys
found = {}
for module, dist in (("ipykernel", "ipykernel"), ("jupyter_client", "jupyter_client"),
                     ("zmq", "pyzmq"), ("Cryptodome", "pycryptodomex"),
                     ("cryptography", "cryptography")):
    try:
        mod = __import__(module)
        found[dist] = str(getattr(mod, "__version__", "?"))
    except Exception:
        pass
print(json.dumps({"version": list(sys.version_info[:3]), "executable": sys.executable,
                  "found": found}))
"""
"""Runs on the host with its own interpreter: what it is and which of our needs it can import."""

_REQUIRED = ("ipykernel", "jupyter_client", "pyzmq")
_CRYPTO = ("pycryptodomex", "cryptography")
_ASKED = frozenset((*_REQUIRED, *_CRYPTO))


@dataclass(frozen=True)
class SSHTarget:
    """How to reach one host: its name as given, its IPv4 address, the SSH port and user."""

    name: str
    address: str
    port: int
    user: str

    def __str__(self) -> str:
        shown = self.name if self.name == self.address else f"{self.name} ({self.address})"
        return f"{shown}:{self.port}"


@dataclass(frozen=True)
class HostReport:
    """What :func:`check_host` found and :func:`install_launcher` did on one host."""

    target: SSHTarget
    python: str
    version: tuple[int, int, int]
    packages: dict[str, str]
    launcher: str = ""

    def line(self) -> str:
        """One line for a person: the host, its interpreter, the packages, the launcher."""
        version = ".".join(map(str, self.version))
        packages = ", ".join(
            f"{printable(name, 60)} {printable(v, 60)}" for name, v in sorted(self.packages.items())
        )
        where = f"; launcher {printable(self.launcher)}" if self.launcher else ""
        shown = printable(self.python)
        return f"{printable(self.target)}  ok  Python {version} ({shown}), {packages}{where}"


# -- which hosts ------------------------------------------------------------------------------


def _this_machine_reason(address: str) -> tuple[bool, str]:
    """(always refused?, why) when ``address`` is this machine; (False, "") when it is not.

    gateway_provisioners' own test (``ip_is_local``: jupyter_client's local or
    public addresses) decides when it skips SSH; the rest of 127.0.0.0/8 and
    this machine's other interface addresses are reached over SSH but are
    still this machine.
    """
    from jupyter_client import localinterfaces

    if localinterfaces.is_local_ip(address) or localinterfaces.is_public_ip(address):
        return True, (
            f"gateway_provisioners starts kernels for {address} without SSH, as the "
            "gateway's own user and outside the launcher (no work dir, no reaping, no host "
            "check); to run kernels on this machine through SSH, let sshd listen on another "
            "loopback address (e.g. 127.0.0.2) and name that"
        )
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified:
        return False, f"{address} is a loopback address: kernels would run on this machine"
    return False, ""


def resolve_hosts(
    names: Sequence[str], *, port: int, user: str, allow_this_machine: bool = False
) -> list[SSHTarget]:
    """The hosts to use, each resolved to the IPv4 address the gateway will connect to.

    Refuses (:class:`InvalidArgument`) an empty list, a duplicate, a name that
    does not resolve, a host gateway_provisioners would launch on without SSH
    (always), and any other address of this machine unless
    ``allow_this_machine`` (a kernel there shares the gateway's machine, its
    SSH key and its token's reach: fine for a test cluster, a surprise in a
    typo'd host list).
    """
    if not names:
        raise InvalidArgument("name at least one host: --hosts h1,h2")
    if not 0 < port < 65536:
        raise InvalidArgument(f"--ssh-port must be 1..65535, not {port}")
    targets: list[SSHTarget] = []
    for raw in names:
        name = raw.strip()
        if not name or name != shlex.quote(name):
            raise InvalidArgument(f"not a host name: {raw!r}")
        try:
            address = socket.gethostbyname(name)
        except OSError as exc:
            raise InvalidArgument(f"host {name!r} does not resolve: {exc}") from exc
        if any(t.address == address for t in targets):
            raise InvalidArgument(f"host {name!r} ({address}) is named twice")
        always, why = _this_machine_reason(address)
        if always:
            raise InvalidArgument(f"host {name!r} ({address}) is refused: {why}")
        local = bool(why) or _is_local_interface(address)
        if local and not allow_this_machine:
            reason = why or f"{address} is an address of this machine"
            raise InvalidArgument(
                f"host {name!r} is refused: {reason} (next to the gateway, its SSH key and "
                "its token); pass --allow-this-machine if that is what you want, e.g. for a "
                "test cluster of sshd on 127.0.0.2 and 127.0.0.3"
            )
        targets.append(SSHTarget(name, address, port, user))
    return targets


def _is_local_interface(address: str) -> bool:
    """Whether ``address`` belongs to one of this machine's network interfaces."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


# -- SSH --------------------------------------------------------------------------------------


def require_paramiko() -> None:
    """Refuse clearly when the ``[cluster]`` extra (which brings paramiko) is not installed."""
    try:
        import paramiko  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the [cluster] extra brings it
        raise MissingDependency(
            "the gateway needs paramiko: pip install 'jupyter-exec[cluster]'"
        ) from exc


@contextlib.contextmanager
def _ssh_errors(target: SSHTarget) -> Iterator[None]:
    """paramiko's and the socket layer's exceptions as our own, each saying what to do."""
    import paramiko

    known_hosts = Path("~/.ssh/known_hosts").expanduser()
    entry = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
    try:
        yield
    except (BackendError, InvalidArgument):
        raise
    except paramiko.BadHostKeyException as exc:
        raise BackendError(
            f"{target}: the host key does not match the one in {known_hosts} for {entry}; "
            "someone may be impersonating the host, or its key changed: check it with the "
            "host's administrator before you replace the entry"
        ) from exc
    except paramiko.AuthenticationException as exc:
        raise BackendError(
            f"{target}: SSH refused user {target.user!r} with the keys in ~/.ssh (and the "
            f"agent): add your public key to that user's authorized_keys on the host ({exc})"
        ) from exc
    except paramiko.SSHException as exc:
        raise BackendError(f"{target}: SSH failed: {exc}") from exc
    except TimeoutError as exc:
        raise BackendError(
            f"{target}: no answer within {CONNECT_TIMEOUT:g} s: is the host up and sshd "
            "listening on that port?"
        ) from exc
    except OSError as exc:
        raise BackendError(
            f"{target}: cannot reach SSH ({exc.strerror or exc}): is sshd running there, "
            "and is --ssh-port right?"
        ) from exc


def _refuse_unknown_host_key(target: SSHTarget) -> paramiko.MissingHostKeyPolicy:
    """paramiko's RejectPolicy, refusing with our error: what the key is and how to add it."""
    import paramiko

    class RefuseUnknown(paramiko.RejectPolicy):  # type: ignore[misc]
        def missing_host_key(self, client: object, hostname: str, key: paramiko.PKey) -> None:
            known_hosts = Path("~/.ssh/known_hosts").expanduser()
            raise BackendError(
                f"{target}: the host key is unknown (no entry {hostname} in {known_hosts}), so "
                f"the connection is refused. The host offered {key.get_name()} "
                f"{key.fingerprint}: check it with the host's administrator, then add it: "
                f"ssh-keyscan -p {target.port} {target.address} >> {known_hosts}"
            )

    return RefuseUnknown()


@contextlib.contextmanager
def connect(target: SSHTarget) -> Iterator[paramiko.SSHClient]:
    """An SSH client to ``target`` set up as gateway_provisioners sets up its own."""
    require_paramiko()
    import paramiko

    client = paramiko.SSHClient()
    try:
        with _ssh_errors(target):
            client.load_system_host_keys()
            client.set_missing_host_key_policy(_refuse_unknown_host_key(target))
            client.connect(
                target.address,
                port=target.port,
                username=target.user,
                timeout=CONNECT_TIMEOUT,
                banner_timeout=CONNECT_TIMEOUT,
                auth_timeout=CONNECT_TIMEOUT,
            )
        yield client
    finally:
        client.close()


def run_command(
    client: paramiko.SSHClient, target: SSHTarget, command: str
) -> tuple[int, str, str]:
    """Run ``command`` on the host: (exit status, stdout, stderr), each bounded."""
    with _ssh_errors(target):
        _stdin, stdout, stderr = client.exec_command(command, timeout=COMMAND_TIMEOUT)
        raw_out = stdout.read(MAX_ANSWER_BYTES + 1)
        raw_err = stderr.read(MAX_ANSWER_BYTES + 1)
        if len(raw_out) > MAX_ANSWER_BYTES or len(raw_err) > MAX_ANSWER_BYTES:
            stdout.channel.close()  # the rest is never read (nor waited for)
            raise BackendError(
                f"{target}: the command printed more than {MAX_ANSWER_BYTES} bytes; "
                "is --python a Python interpreter?"
            )
        status = stdout.channel.recv_exit_status()
        return status, raw_out.decode("utf-8", "replace"), raw_err.decode("utf-8", "replace")


# -- the checks -------------------------------------------------------------------------------


def check_host(client: paramiko.SSHClient, target: SSHTarget, python: str) -> HostReport:
    """Run the probe with ``python`` on the host; refuse the host if the launcher lacks anything."""
    if not python or python != shlex.quote(python):
        raise InvalidArgument(f"--python must be a plain path or command name, not {python!r}")
    status, out, err = run_command(client, target, f"{python} -c {shlex.quote(_PROBE)}")
    detail = [printable(line) for line in (err.strip() or out.strip()).splitlines()[-3:]]
    if status != 0:
        raise BackendError(
            f"{target}: the interpreter {python!r} did not run (exit status {status})"
            + (f": {' / '.join(detail)}" if detail else "")
            + "; point --python at a Python 3 with ipykernel on that host"
        )
    try:
        found = json.loads(out.strip().splitlines()[-1])
        version = tuple(int(v) for v in found["version"])
        packages = {  # only what was asked: a host cannot add lines of its own
            str(k): str(v)[:60] for k, v in dict(found["found"]).items() if k in _ASKED
        }
        executable = str(found["executable"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BackendError(
            f"{target}: {python!r} is not a Python interpreter jupyter-exec can use "
            f"(it printed {printable(out, 200)})"
        ) from exc
    if version[:2] < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        raise BackendError(
            f"{target}: {python} is Python {'.'.join(map(str, version))}; the launcher needs "
            f"{wanted} or later (point --python at another interpreter)"
        )
    missing = [name for name in _REQUIRED if name not in packages]
    if not any(name in packages for name in _CRYPTO):
        missing.append("cryptography (or pycryptodomex)")
    if missing:
        raise BackendError(
            f"{target}: {python} ({printable(executable)}) has no {', '.join(missing)}; install "
            f"{'them' if len(missing) > 1 else 'it'} there: {python} -m pip install "
            + " ".join(m.split(" ")[0] for m in missing)
        )
    return HostReport(target, executable, (version[0], version[1], version[2]), packages)


def launcher_source() -> bytes:
    """The launcher's bytes, as they are copied to every host."""
    return (Path(__file__).parent / "launcher.py").read_bytes()


def remote_home(client: paramiko.SSHClient, target: SSHTarget) -> str:
    """The absolute directory the SSH user logs in to (where relative remote paths start)."""
    with _ssh_errors(target):
        sftp = _open_sftp(client, target)
        try:
            return str(sftp.normalize("."))
        finally:
            sftp.close()


def _open_sftp(client: paramiko.SSHClient, target: SSHTarget) -> paramiko.SFTPClient:
    """An SFTP session on the host; a host whose sshd offers none is told so in one sentence
    (paramiko only says "Channel closed.", the sshd's refusal of the subsystem)."""
    import paramiko

    try:
        return client.open_sftp()
    except paramiko.SSHException as exc:
        raise BackendError(
            f"{target}: the host's sshd offers no SFTP, which installs the launcher there: "
            "enable it in the host's sshd_config (Subsystem sftp internal-sftp, or the "
            f"sftp-server path of its OpenSSH) and reload sshd ({exc})"
        ) from exc


def absolute_remote_dir(remote_dir: str, home: str) -> str:
    """``remote_dir`` on the host: ``~`` and relative paths start at the login directory."""
    if remote_dir.startswith("~/"):
        remote_dir = remote_dir[2:]
    elif remote_dir == "~":
        remote_dir = ""
    return posixpath.normpath(posixpath.join(home, remote_dir))


def install_launcher(
    client: paramiko.SSHClient, target: SSHTarget, remote_dir: str, source: bytes
) -> str:
    """Copy the launcher to ``remote_dir/launcher-<sha256>.py`` (0700) unless it is there intact.

    The remote dir and its ``kernels`` and ``logs`` folders are made 0700 (the
    kernels' work dirs and logs live there). Returns the launcher's path.
    """
    path = posixpath.join(remote_dir, launcher_name(source))
    with _ssh_errors(target):
        sftp = _open_sftp(client, target)
        try:
            _make_private_dir(sftp, remote_dir, target, chmod_existing=False)
            for sub in ("kernels", "logs"):
                _make_private_dir(sftp, posixpath.join(remote_dir, sub), target)
            with contextlib.suppress(OSError), sftp.open(path, "rb") as existing:
                if existing.read(len(source) + 1) == source:
                    sftp.chmod(path, 0o700)
                    return path
            partial = f"{path}.partial"
            with sftp.open(partial, "wb") as out:
                out.write(source)
            sftp.chmod(partial, 0o700)
            sftp.posix_rename(partial, path)
        finally:
            sftp.close()
    return path


def _make_private_dir(
    sftp: paramiko.SFTPClient, folder: str, target: SSHTarget, *, chmod_existing: bool = True
) -> None:
    """Make ``folder`` (and missing parents) 0700; an existing one of ours is made 0700 again."""
    try:
        mode = sftp.stat(folder).st_mode
    except OSError:
        parent = posixpath.dirname(folder)
        if parent and parent != folder:
            try:
                sftp.stat(parent)
            except OSError:
                _make_private_dir(sftp, parent, target, chmod_existing=False)
        sftp.mkdir(folder, 0o700)
        sftp.chmod(folder, 0o700)
        return
    if mode is None or not stat.S_ISDIR(mode):
        raise BackendError(f"{target}: {printable(folder)} exists and is not a directory")
    if chmod_existing:
        sftp.chmod(folder, 0o700)
