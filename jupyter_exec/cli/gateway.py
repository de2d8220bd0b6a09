"""``jupyter-exec gateway``: a Kernel Gateway (or Jupyter Server) placing kernels on hosts over SSH.

The command checks every host first (:mod:`jupyter_exec.cluster.hosts`),
installs the launcher there, writes the one kernelspec
(:mod:`jupyter_exec.cluster.spec`), then runs the server
(:mod:`jupyter_exec.cluster.gateway`) in the foreground: it prints the URL and
the token once, on stdout, and runs until SIGINT, SIGTERM or SIGHUP, on which
the server shuts every kernel down and the command exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import signal
import sys
import time
from typing import TYPE_CHECKING

from jupyter_exec.boundary.replies import printable
from jupyter_exec.cli.commands import Command
from jupyter_exec.cli.exits import EXIT_OK, EXIT_STATUS_HELP
from jupyter_exec.cli.options import non_negative_int
from jupyter_exec.exceptions import BackendError, InvalidArgument

if TYPE_CHECKING:
    from jupyter_exec.cluster.gateway import GatewayProcess
    from jupyter_exec.cluster.hosts import SSHTarget

__all__ = ["GATEWAY_COMMAND", "cmd_gateway"]

EPILOG = f"""\
examples:
  jupyter-exec gateway --hosts node1,node2
        kernels on node1 and node2 (SSH as you, port 22, your ~/.ssh keys and
        known_hosts), round-robin; the gateway on http://127.0.0.1:8888
  jupyter-exec gateway --hosts node1,node2 --check-only
        only check the hosts (SSH, Python, ipykernel, ...) and install the launcher
  jupyter-exec gateway --hosts 127.0.0.2,127.0.0.3 --ssh-port 2222 --allow-this-machine
        a test cluster: sshd on two loopback addresses of this machine
  JUPYTER_EXEC_GATEWAY_TOKEN=... jupyter-exec gateway --hosts gpu1 --python /opt/py/bin/python
        your own token, and the interpreter to run kernels with on the hosts
  jupyter-exec gateway --hosts node1,node2 --response-ip 10.0.0.1 \\
      --write enterprise-gateway,kubernetes,helm --out deploy/
        write Enterprise Gateway, Kubernetes and Helm files instead of starting a gateway

Then, from Python:
  Session(backend="remote", url="http://127.0.0.1:8888", token=TOKEN)
  Session(backend="remote", url=..., token=..., host="node2")   pinned to one host

Each host needs sshd, your public key in the SSH user's authorized_keys, its host key
in your ~/.ssh/known_hosts (an unknown key is refused), and a Python >= 3.9 with
ipykernel, jupyter_client, pyzmq and cryptography (or pycryptodomex). Kernels run
as the SSH user, in <remote dir>/kernels/<kernel id>/work, with their own temp dir.
The gateway listens on loopback unless --ip says otherwise; every request needs the
token. Stopping it (Ctrl-C, SIGTERM, SIGHUP) shuts every kernel down, then exits 0;
A kernel's folder and log go with it (--keep-logs DAYS keeps the logs); SIGKILL of the
command and its server leaves kernels running on the hosts: --clean removes them, their
folders and logs, and the command's private folder here.

{EXIT_STATUS_HELP}"""


def _hosts(text: str) -> list[str]:
    names = [h.strip() for h in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"hosts are comma-separated names: {text!r}")
    return names


def _port(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {value}")
    return value


def _users(text: str) -> list[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec gateway``."""
    from jupyter_exec.cluster.gateway import SERVERS, TOKEN_ENV

    hosts = parser.add_argument_group("hosts")
    hosts.add_argument("--hosts", type=_hosts, required=True, metavar="H1,H2",
                       help="the hosts kernels run on (names or addresses)")  # fmt: skip
    hosts.add_argument("--ssh-port", type=_port, default=22, metavar="N",
                       help="their SSH port (default 22)")  # fmt: skip
    hosts.add_argument("--ssh-user", default=None, metavar="USER",
                       help="the user to log in as, who runs kernels (default: you)")  # fmt: skip
    hosts.add_argument("--python", default="python3", metavar="PATH",
                       help="the interpreter on the hosts (default python3)")  # fmt: skip
    hosts.add_argument("--remote-dir", default="~/.jupyter-exec/cluster", metavar="DIR",
                       help="where the launcher, the kernels' work dirs and their logs go on "
                       "every host (default ~/.jupyter-exec/cluster)")  # fmt: skip
    hosts.add_argument("--allow-this-machine", action="store_true",
                       help="accept hosts that are this machine (e.g. sshd on 127.0.0.2); "
                       "127.0.0.1, localhost and this machine's public addresses are refused "
                       "whatever this says")  # fmt: skip
    hosts.add_argument("--check-only", action="store_true",
                       help="check the hosts and install the launcher, then exit")  # fmt: skip
    hosts.add_argument("--clean", action="store_true",
                       help="remove what a killed gateway left (its kernels, their folders and "
                       "logs on every host, its private folder here), then exit; refused "
                       "while a gateway with this remote dir runs")  # fmt: skip
    hosts.add_argument("--keep-logs", type=non_negative_int, default=0, metavar="DAYS",
                       help="keep each kernel's log on its host for DAYS days (default 0: a "
                       "log goes with its kernel; --clean removes older ones)",
                       )  # fmt: skip
    server = parser.add_argument_group("gateway")
    server.add_argument("--ip", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; anything else lets "
                        "other machines reach it, with the token)")  # fmt: skip
    server.add_argument("--port", type=_port, default=8888, metavar="N",
                        help="port to listen on (default 8888; 0: a free one)")  # fmt: skip
    server.add_argument("--server", choices=SERVERS, default=SERVERS[0],
                        help="the server to run (default kernel-gateway)")  # fmt: skip
    server.add_argument("--transport-encryption", choices=("required", "auto", "disabled"),
                        default=None,
                        help="CurveZMQ between the gateway and the kernels (default required; "
                        "with --write: auto, as Enterprise Gateway cannot encrypt)")  # fmt: skip
    server.add_argument("--users", type=_users, default=[], metavar="U1,U2",
                        help="KERNEL_USERNAMEs allowed besides you (default: none)")  # fmt: skip
    files = parser.add_argument_group(
        "files for the gateways you run (instead of starting one)",
        "With --write, nothing is checked or started: the Enterprise Gateway, Kubernetes and "
        "Helm files for these hosts are written into --out.",
    )
    files.add_argument("--write", metavar="TARGETS",
                       help="comma-separated: enterprise-gateway, kubernetes, helm")  # fmt: skip
    files.add_argument("--out", metavar="DIR", help="the folder to write them into")  # fmt: skip
    files.add_argument("--response-ip", metavar="IP",
                       help="the address the hosts reach the gateway on (needed for hosts "
                       "off loopback)")  # fmt: skip
    files.add_argument("--namespace", metavar="NS",
                       help="the Kubernetes namespace of the gateway and its kernel pods "
                       "(default jupyter-exec)")  # fmt: skip
    files.add_argument("--image", metavar="IMAGE",
                       help="the kernel pods' image (default jupyter-exec/kernel:latest)",
                       )  # fmt: skip
    files.add_argument("--force", action="store_true",
                       help="replace files in --out that this command did not write")  # fmt: skip
    parser.set_defaults(token_env=TOKEN_ENV)


def _write(args: argparse.Namespace) -> int:
    """``--write``: the deployment files for these hosts, written into ``--out``."""
    from pathlib import Path

    from jupyter_exec.cluster.deploy import DeploySettings, write_deployment

    if not args.out:
        raise InvalidArgument("--write needs --out DIR: the folder to write the files into")
    given = {
        "ssh_user": args.ssh_user,
        "response_ip": args.response_ip,
        "namespace": args.namespace,
        "image": args.image,
        "remote_dir": None if args.remote_dir.startswith("~") else args.remote_dir,
    }
    settings = DeploySettings(
        hosts=tuple(args.hosts),
        ssh_port=args.ssh_port,
        python=args.python,
        transport_encryption=args.transport_encryption or "auto",
        authorized_users=tuple(args.users),
        **{name: value for name, value in given.items() if value is not None},
    )
    for path in write_deployment(args.write, Path(args.out), settings, force=args.force):
        print(path, flush=True)
    return EXIT_OK


_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _serve(gateway: GatewayProcess) -> int | None:
    """Wait for the server to exit (its status) or for a stop signal (None).

    The signals only set a flag, checked between short sleeps: no exception is raised inside
    ``Popen.wait`` (which handles a KeyboardInterrupt in a way of its own), and a second
    signal during the shutdown changes nothing.
    """
    asked: list[int] = []

    def note(signum: int, frame: object) -> None:
        asked.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in _STOP_SIGNALS}
    try:
        while not asked:
            status = gateway.poll()
            if status is not None:
                return status
            time.sleep(0.1)
        for sig in _STOP_SIGNALS:  # the shutdown is under way: further signals wait for it
            signal.signal(sig, signal.SIG_IGN)
        return None
    finally:
        if not asked:
            for sig, old in previous.items():
                signal.signal(sig, old)


def _clean_one(args: argparse.Namespace, target: SSHTarget) -> tuple[str, list[str]]:
    """On ``target``: what a gateway of this remote dir left stopped and removed (refused
    while another gateway uses that dir); the remote dir and what was removed."""
    from jupyter_exec.cluster import hosts as hostlib
    from jupyter_exec.cluster.clean import clean_host, refuse_if_running

    with hostlib.connect(target) as client:
        remote_dir = hostlib.absolute_remote_dir(
            args.remote_dir, hostlib.remote_home(client, target)
        )
        refuse_if_running(remote_dir)
        return remote_dir, clean_host(client, target, args.python, remote_dir, args.keep_logs)


def _clean(args: argparse.Namespace, targets: list[SSHTarget]) -> int:
    """``--clean``: on every host, the kernels a killed gateway left, then its folder here."""
    from jupyter_exec.cluster.clean import clean_local

    cleaned: set[str] = set()
    for target in targets:
        remote_dir, removed = _clean_one(args, target)
        cleaned.add(remote_dir)
        shown = ", ".join(printable(item) for item in removed) or "nothing left"
        print(f"{printable(target)}  {printable(remote_dir)}: removed {shown}", flush=True)
    for folder in clean_local(cleaned):
        print(f"here: removed {folder}", flush=True)
    return EXIT_OK


def _end_what_the_server_left(args: argparse.Namespace, targets: list[SSHTarget]) -> bool:
    """After the server ended without shutting its kernels down (killed when its stop took
    longer than the grace, or dead by itself): stop on every host the kernels of this
    remote dir, as ``--clean`` does (:func:`_clean_one`). The command owns its kernels, so
    it does not leave that to a later ``--clean`` (under load, a server's one-by-one
    shutdown over SSH can outlast the grace). False if a host could not be cleaned (said
    on stderr)."""
    clean = True
    for target in targets:
        try:
            _, removed = _clean_one(args, target)
        except Exception as exc:  # a host down, another gateway on the dir: said, others go on
            _say(f"{printable(target)}: could not stop the kernels left there: {exc}")
            clean = False
            continue
        if removed:
            _say(f"{printable(target)}: stopped what the server left: {', '.join(removed)}")
    return clean


def _say(text: str) -> None:
    print(f"[jupyter-exec] {text}", file=sys.stderr, flush=True)


def cmd_gateway(args: argparse.Namespace) -> int:
    """Check the hosts; unless --check-only, run the gateway until a signal stops it
    (with --write: write the files for other gateways instead)."""
    import getpass

    if args.write:
        return _write(args)

    from jupyter_exec.cluster import hosts as hostlib
    from jupyter_exec.cluster.gateway import (
        GatewayConfig,
        GatewayProcess,
        free_port,
        gateway_env,
        is_loopback,
        private_dirs,
    )
    from jupyter_exec.cluster.spec import kernel_spec, write_kernel_spec

    hostlib.require_paramiko()
    user = args.ssh_user or getpass.getuser()
    targets = hostlib.resolve_hosts(
        args.hosts, port=args.ssh_port, user=user, allow_this_machine=args.allow_this_machine
    )
    if args.clean:
        return _clean(args, targets)
    source = hostlib.launcher_source()
    remote_dirs: set[str] = set()
    launchers: set[str] = set()
    for target in targets:
        with hostlib.connect(target) as client:
            report = hostlib.check_host(client, target, args.python)
            remote_dir = hostlib.absolute_remote_dir(
                args.remote_dir, hostlib.remote_home(client, target)
            )
            launcher = hostlib.install_launcher(client, target, remote_dir, source)
        remote_dirs.add(remote_dir)
        launchers.add(launcher)
        print(dataclasses.replace(report, launcher=launcher).line(), flush=True)
    if len(remote_dirs) > 1:
        raise InvalidArgument(
            f"--remote-dir {args.remote_dir} is a different directory on each host "
            f"({', '.join(printable(d) for d in sorted(remote_dirs))}): the kernelspec needs one "
            "path; give an "
            "absolute --remote-dir that exists (or can be made) on every host"
        )
    if args.check_only:
        print(f"{len(targets)} host(s) ready", flush=True)
        return EXIT_OK
    (remote_dir,) = remote_dirs
    (launcher,) = launchers

    token_env: str = args.token_env
    given = os.environ.get(token_env, "")
    token = given or secrets.token_urlsafe(32)
    if not is_loopback(args.ip):
        _say(
            f"WARNING: the gateway listens on {args.ip}, not loopback: anyone who can reach "
            f"this machine's port {args.port or '(free)'} and holds the token can run code on "
            f"{', '.join(args.hosts)} as {user}. Prefer 127.0.0.1 and an SSH tunnel."
        )
    port = args.port or free_port("127.0.0.1" if args.ip in ("0.0.0.0", "") else args.ip)
    config = GatewayConfig(
        hosts=tuple(t.name for t in targets),
        addresses=tuple(t.address for t in targets),
        ssh_port=args.ssh_port,
        ssh_user=user,
        remote_dir=remote_dir,
        ip=args.ip,
        port=port,
        server=args.server,
        transport_encryption=args.transport_encryption or "required",
        users=tuple(args.users),
        keep_logs=args.keep_logs,
        token=token,
    )
    with private_dirs(remote_dir) as dirs:
        spec = kernel_spec(
            config.hosts, python=args.python, launcher=launcher, work_root=f"{remote_dir}/kernels"
        )
        write_kernel_spec(dirs.kernels, spec)
        gateway = GatewayProcess(config, dirs)
        try:
            gateway.start(gateway_env(config, dirs))
            gateway.wait_ready()
            shown = f"${token_env}" if given else token  # a token you gave is not echoed
            print(f"{args.server} on {config.url} for {', '.join(config.hosts)}\n"
                  f"url:   {config.url}\ntoken: {shown}", flush=True)  # fmt: skip
            _say("stop with Ctrl-C or SIGTERM: every kernel is shut down first")
            status = _serve(gateway)
            if status is None:  # asked to stop
                _say("stopping: shutting every kernel down")
                if gateway.stop():
                    return EXIT_OK
                _say("the server did not stop in time and was killed: ending its kernels")
                if not _end_what_the_server_left(args, targets):
                    raise BackendError(
                        "the gateway did not stop in time and was killed, and kernels may be "
                        "left on the hosts named above: run `jupyter-exec gateway --clean`"
                    )
                return EXIT_OK
            _end_what_the_server_left(args, targets)
        except KeyboardInterrupt:  # a stop signal before serving began
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _say("stopping: shutting every kernel down")
            gateway.stop()
            return EXIT_OK
        finally:
            gateway.stop()
    raise BackendError(f"the {args.server} exited by itself with status {status} (log above)")


GATEWAY_COMMAND = Command(
    "gateway",
    help="run a kernel gateway that starts kernels on other hosts over SSH",
    description="Check the hosts, then run a Jupyter Kernel Gateway (or Jupyter Server) "
    "whose only kernel starts on those hosts over SSH (gateway_provisioners' "
    "DistributedProvisioner, round-robin, our launcher). Clients connect with "
    "Session(backend='remote', url=..., token=...). Needs jupyter-exec[cluster].",
    epilog=EPILOG,
    arguments=_arguments,
    run=cmd_gateway,
)
