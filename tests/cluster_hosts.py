"""A loopback cluster for tests: one real OpenSSH server answering as two hosts.

Debian's ``sshd`` listens on 127.0.0.2 and 127.0.0.3 (both loopback on Linux) at one free,
non-default port, with host keys, an ``authorized_keys`` and a config of its own in a temporary
directory: ``/etc/ssh`` and ``/root/.ssh`` are never read or written. The gateway side gets a
``HOME`` of its own holding the client key and a ``known_hosts`` that names both addresses, so
paramiko connects with ``RejectPolicy`` exactly as it would to real hosts.

``sshd`` runs under a small subreaper (this file run as a script): launchers that
gateway_provisioners starts with ``nohup ... &`` outlive their SSH session and are re-parented
to it, so they are reaped, can be listed (``Cluster.kernel_processes``), and are killed when the
cluster stops, even if a test forgot one. Each pytest-xdist worker starts a cluster of its own.

Run ``scripts/provision-cluster`` first (openssh-server from Debian, ``/run/sshd``).
"""

from __future__ import annotations

import contextlib
import ctypes
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

try:
    from tests.ports import free_port
except ModuleNotFoundError:  # run as a script (the subreaper, ``--reap``): tests/ is the path
    from ports import free_port  # type: ignore[no-redef]

SSHD = os.environ.get("JX_TEST_SSHD", "/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
HOSTS = ("127.0.0.2", "127.0.0.3")
RESPONSE_IP = "127.0.0.1"
"""Where the hosts reach the gateway: loopback hosts reach this machine on 127.0.0.1."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class ClusterUnavailable(RuntimeError):
    """The loopback cluster cannot run here (no sshd, no /run/sshd, no free port)."""


@dataclass
class Cluster:
    """Two SSH hosts on loopback, and what a gateway needs to reach them.

    ``hosts``: the addresses sshd answers on. ``port``: its port (free, never 22). ``user``: the
    SSH user (the user running the tests). ``home``: a ``HOME`` for the gateway, with
    ``.ssh/id_ed25519`` and ``.ssh/known_hosts``. ``remote_dir``: a directory on the "hosts" for
    the launcher and ``--work-root``. ``python``: the interpreter the hosts run kernels with.
    """

    hosts: tuple[str, ...]
    port: int
    user: str
    home: Path
    remote_dir: Path
    python: str = sys.executable
    base: Path = field(default_factory=Path, repr=False)
    _reaper: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def key_path(self) -> Path:
        """The gateway's private key (``<home>/.ssh/id_ed25519``)."""
        return self.home / ".ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """The gateway's ``known_hosts``: both hosts at ``port``, nothing else."""
        return self.home / ".ssh" / "known_hosts"

    @property
    def log_dir(self) -> Path:
        """Where gateway_provisioners sends each kernel's stdout/stderr (``GP_KERNEL_LOG_DIR``)."""
        return self.remote_dir / "logs"

    @property
    def sshd_log(self) -> Path:
        """sshd's own log (``-e``): the first place to look when an SSH connection is refused."""
        return self.base / "sshd.log"

    @property
    def reaper_pid(self) -> int:
        """The subreaper that owns sshd and every orphaned launcher."""
        if self._reaper is None:
            raise ClusterUnavailable("the cluster is not running")
        return self._reaper.pid

    def gateway_env(self) -> dict[str, str]:
        """The environment a gateway process needs (merge into ``os.environ``).

        gateway_provisioners reads most of it at import time, so set it before importing, or
        give it to a subprocess. ``GP_RESPONSE_PORT`` is a fresh free port on each call.
        """
        return {
            "HOME": str(self.home),
            "GP_SSH_PORT": str(self.port),
            "GP_REMOTE_USER": self.user,
            "GP_RESPONSE_IP": RESPONSE_IP,
            "GP_RESPONSE_PORT": str(free_port(RESPONSE_IP)),
            "GP_KERNEL_LOG_DIR": str(self.log_dir),
            # gateway_provisioners' ResponseManager polls its port with a blocking accept of
            # this many seconds inside the gateway's event loop (default 0.01, every 0.1 ms):
            # each message through the gateway waited up to 10 ms. 0 = a plain awaited accept.
            "GP_SOCKET_TIMEOUT": "0",
            # The user policy: the test user may run kernels (root is refused by default).
            "GP_AUTHORIZED_USERS": self.user,
            "GP_UNAUTHORIZED_USERS": "" if self.user == "root" else "root",
        }

    def kernel_process(self, kernel_id: str) -> psutil.Process:
        """The kernel itself (ipykernel under our launcher), not the launcher: exactly one."""
        found = [
            p
            for p in self.kernel_processes(kernel_id)
            if "ipykernel_launcher" in " ".join(p.cmdline())
        ]
        assert len(found) == 1, found
        return found[0]

    def kernel_processes(self, kernel_id: str | None = None) -> list[psutil.Process]:
        """Live processes of kernels started on the hosts (all kernels, or one kernel id).

        A kernel's processes are the launcher, the kernel and anything they started: every
        descendant of the subreaper whose environment carries ``KERNEL_ID`` (exported by the
        gateway's startup command) or ``JUPYTER_EXEC_KERNEL_DIR`` (set by our launcher), or whose
        command line names the kernel id. Zombies are not counted: they have already exited
        and the subreaper collects them.
        """
        found: list[psutil.Process] = []
        try:
            reaper = psutil.Process(self.reaper_pid)
            descendants = reaper.children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for proc in descendants:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE or proc.name() == "sshd":
                    continue
                env = proc.environ()
                cmdline = " ".join(proc.cmdline())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            ours = env.get("KERNEL_ID") or env.get("JUPYTER_EXEC_KERNEL_DIR")
            if kernel_id is None:
                if ours:
                    found.append(proc)
            elif (
                env.get("KERNEL_ID") == kernel_id
                or kernel_id in cmdline
                or (kernel_id in env.get("JUPYTER_EXEC_KERNEL_DIR", ""))
            ):
                found.append(proc)
        return found

    def wait_no_kernel_processes(
        self, kernel_id: str | None = None, timeout: float = 2.0
    ) -> list[psutil.Process]:
        """Poll until no process of the kernel(s) is left; return what is left at ``timeout``."""
        deadline = time.monotonic() + timeout
        left = self.kernel_processes(kernel_id)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.kernel_processes(kernel_id)
        return left

    def stop(self) -> None:
        """Stop sshd and kill every process left on the hosts; remove the cluster's files."""
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.poll() is None:
            reaper.terminate()
            try:
                reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                reaper.kill()
                reaper.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)


@dataclass
class ExtraHost:
    """One more host of a cluster, with an sshd (and a subreaper) of its own, so a test can
    take that host down: :meth:`down` stops its sshd and kills everything running there, as
    a machine that loses power."""

    address: str
    cluster: Cluster
    _reaper: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def down(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.poll() is None:
            reaper.terminate()
            try:
                reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                reaper.kill()
                reaper.wait(timeout=10)

    def processes(self) -> list[psutil.Process]:
        """Live processes on this host (below its subreaper), sshd left out."""
        if self._reaper is None:
            return []
        found = []
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in psutil.Process(self._reaper.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if proc.status() != psutil.STATUS_ZOMBIE and proc.name() != "sshd":
                        found.append(proc)
        return found


def start_extra_host(cluster: Cluster, address: str) -> ExtraHost:
    """An sshd on ``address`` at the cluster's port, with its keys and users (known to the
    gateway's ``known_hosts``), under a subreaper of its own."""
    if not _port_free_on_all(cluster.port, [address]):
        raise ClusterUnavailable(f"{address}:{cluster.port} is taken")
    text = (cluster.base / "sshd_config").read_text(encoding="ascii")
    lines = [line for line in text.splitlines() if not line.startswith("ListenAddress ")]
    config = cluster.base / f"sshd_config-{address}"
    config.write_text(
        f"ListenAddress {address}:{cluster.port}\n" + "\n".join(lines) + "\n", encoding="ascii"
    )
    host_pub = (cluster.base / "ssh_host_ed25519_key.pub").read_text(encoding="ascii").split()
    with cluster.known_hosts.open("a", encoding="ascii") as known:
        known.write(f"[{address}]:{cluster.port} {host_pub[0]} {host_pub[1]}\n")
    log = (cluster.base / f"sshd-{address}.log").open("ab")
    reaper = subprocess.Popen(
        [sys.executable, __file__, "--reap", SSHD, "-D", "-e", "-f", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()
    host = ExtraHost(address, cluster, reaper)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and reaper.poll() is None:
        if _listening([address], cluster.port):
            return host
        time.sleep(0.05)
    host.down()
    raise ClusterUnavailable(f"sshd did not listen on {address}:{cluster.port}")


def _port_free_on_all(port: int, hosts: Sequence[str]) -> bool:
    for host in hosts:
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def _keygen(path: Path, comment: str) -> str:
    """Make an ed25519 key pair at ``path``; return the public key line."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_suffix(".pub").read_text(encoding="ascii").strip()


def _sshd_config(
    base: Path, hosts: Sequence[str], port: int, user: str, host_home: Path, sftp: bool = True
) -> str:
    listen = "".join(f"ListenAddress {host}:{port}\n" for host in hosts)
    return (
        listen + f"HostKey {base / 'ssh_host_ed25519_key'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\n"
        "PidFile none\n"
        "AuthenticationMethods publickey\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "PermitRootLogin prohibit-password\n"
        f"AllowUsers {user}\n"
        "X11Forwarding no\n"
        "PermitTunnel no\n"
        "AllowAgentForwarding no\n"
        "MaxStartups 200:30:400\n"
        "MaxSessions 100\n"
        "LogLevel VERBOSE\n"
        # The hosts' HOME: kernels' IPython history and Jupyter runtime files stay in the cluster.
        f"SetEnv HOME={host_home}\n" + ("Subsystem sftp internal-sftp\n" if sftp else "")
    )


def _listening(hosts: Sequence[str], port: int) -> bool:
    for host in hosts:
        try:
            with socket.create_connection((host, port), timeout=0.5) as sock:
                if not sock.recv(4).startswith(b"SSH-"):
                    return False
        except OSError:
            return False
    return True


def start_cluster(
    base: Path, hosts: Sequence[str] = HOSTS, attempts: int = 5, *, sftp: bool = True
) -> Cluster:
    """Start sshd on ``hosts`` under a subreaper, with everything it needs in ``base``
    (``sftp=False``: an sshd offering no SFTP subsystem, as some hardened hosts do)."""
    if not os.access(SSHD, os.X_OK):
        raise ClusterUnavailable(f"{SSHD} is missing: run scripts/provision-cluster")
    if not Path("/run/sshd").is_dir():
        raise ClusterUnavailable("/run/sshd is missing: run scripts/provision-cluster")
    user = getpass.getuser()
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o700)
    home = base / "gateway-home"
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o700)
    remote_dir = base / "remote"
    host_home = remote_dir / "home"
    for path in (remote_dir, host_home, remote_dir / "logs"):
        path.mkdir(mode=0o700, exist_ok=True)
    client_pub = _keygen(ssh_dir / "id_ed25519", "jupyter-exec-test-gateway")
    (base / "authorized_keys").write_text(client_pub + "\n", encoding="ascii")
    host_pub = _keygen(base / "ssh_host_ed25519_key", "jupyter-exec-test-host")
    key_type, key_data = host_pub.split()[:2]

    last_error = ""
    for _ in range(attempts):
        port = free_port(hosts[0])
        if port == 22 or not _port_free_on_all(port, hosts):
            continue
        config = base / "sshd_config"
        config.write_text(_sshd_config(base, hosts, port, user, host_home, sftp), encoding="ascii")
        known = "".join(f"[{host}]:{port} {key_type} {key_data}\n" for host in hosts)
        (ssh_dir / "known_hosts").write_text(known, encoding="ascii")
        check = subprocess.run(
            [SSHD, "-t", "-f", str(config)], capture_output=True, text=True, check=False
        )
        if check.returncode != 0:
            raise ClusterUnavailable(f"sshd refused its test config: {check.stderr.strip()}")
        log = (base / "sshd.log").open("ab")
        reaper = subprocess.Popen(
            [sys.executable, __file__, "--reap", SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        cluster = Cluster(
            hosts=tuple(hosts),
            port=port,
            user=user,
            home=home,
            remote_dir=remote_dir,
            base=base,
            _reaper=reaper,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and reaper.poll() is None:
            if _listening(hosts, port):
                return cluster
            time.sleep(0.05)
        last_error = (base / "sshd.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        cluster._reaper = None
        if reaper.poll() is None:
            reaper.terminate()
            reaper.wait(timeout=10)
    raise ClusterUnavailable(f"sshd did not listen on {', '.join(hosts)}: {last_error}")


# --- the subreaper (this file run as a script) --------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo += _children(child)
    return out


def _reap_main(argv: list[str]) -> int:
    """Run ``argv`` (sshd) as a child, adopt and reap every orphan below it; on SIGTERM, or when
    the test process dies, stop sshd and SIGKILL whatever is left below us."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    main = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    stopping = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(main.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    main_done = False
    while True:
        if main_done or stopping:
            for pid in _descendants(os.getpid()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:
            pid, _status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == main.pid:
            main_done = True


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--reap":
    sys.exit(_reap_main(sys.argv[2:]))
