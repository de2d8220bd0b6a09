"""Code that runs inside an IPython kernel: copy-on-write forks and snapshots of its process.

The host sends this module's source in a silent ``execute_request``
(:func:`fork_code`), with the connection file it prepared for the child. In
the kernel's main thread, between two statements of that request:

* the **parent** calls ``os.fork()``, starts a thread that reaps the child
  when it ends (so it never lingers as a zombie), and returns the child's pid
  to the host (``user_expressions``);
* the **child** keeps the parent's memory, copy-on-write: every module, the
  user's namespace, the IPython shell with its history, display hooks and
  extensions. Only the thread that called ``fork()`` exists in it, so none of
  the parent's ZeroMQ machinery (IO threads, channel threads, heartbeat) is
  alive, and none of it may be touched. The child therefore silences the old
  kernel (its ``Session`` sends nothing), points its stdout/stderr file
  descriptors back at the originals (they were pipes read by the parent's
  threads), leaves the old event loop untouched (its epoll instance is shared
  with the parent: a change there would change the parent's), and starts a
  fresh ``IPKernelApp`` on a new event loop, new ZeroMQ contexts and the new
  connection file. The new kernel adopts the old shell, so
  ``execution_count``, ``In``/``Out``, magics, event hooks (matplotlib's inline
  flush) and loaded extensions carry over. The new app runs *nested* under the
  frames of the request that forked it, which never resume; when it shuts
  down, the process ends with ``os._exit`` (no parent-owned finaliser runs).

A **snapshot** (:func:`snapshot`) is the same fork stopped half way: the
child drops the old kernel but serves no client; it waits on a Unix socket
and forks again, on request, into a kernel as above, so one frozen state can
start any number of kernels (undo).

A child starts its own session (``setsid``), so signals the host sends to the
parent's process group (interrupt, kill) do not reach it, and it exits at once
if the host process that asked for it goes away (``host_pid``, watched through
a pidfd). It needs only the standard library, IPython and ipykernel >= 6.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import stat
import sys
import threading
import time
import warnings
from typing import Any

MODULE = "_jupyter_exec_fork"
"""The name this code is registered under in the kernel's ``sys.modules``."""

last_pid = 0
"""The pid of the child the last fork made (read by the host through ``user_expressions``)."""

_abandoned: list[Any] = []
"""In a child: the parent's kernel objects, kept alive so no finaliser ever runs on them."""


def fork(connection_file: str, host_pid: int, deadline: float) -> int:
    """Fork this kernel; in the parent return the child's pid, in the child never return.

    ``deadline`` is a wall-clock time after which the request is refused
    unforked: a request that waited in the queue behind a long cell, and whose
    host has given up, must not leave a child nobody connects to.
    """
    old_app = _forkable_app(deadline)
    if not os.path.isfile(connection_file):
        raise FileNotFoundError(f"jupyter-exec: no connection file at {connection_file}")
    return _fork_then(lambda: _become_kernel(old_app, connection_file, host_pid))


def snapshot(control_path: str, host_pid: int, deadline: float) -> int:
    """Fork a frozen copy of this kernel that serves no client; return its pid (in the parent).

    The copy waits on a Unix socket at ``control_path`` (bound here, before the
    fork, so the host can connect as soon as this returns). Each request there,
    one JSON line ``{"connection_file": ..., "host_pid": ...}``, forks the copy
    again into a kernel serving that connection file, and is answered with
    ``{"pid": ...}`` or ``{"error": ...}``. The copy itself never changes: it
    can start any number of kernels, each from the state it froze.
    """
    old_app = _forkable_app(deadline)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(control_path)
        os.chmod(control_path, 0o600)
        listener.listen(8)
        return _fork_then(lambda: _serve_snapshot(old_app, listener, host_pid))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(control_path)
        raise
    finally:
        listener.close()  # the parent's copy: the snapshot keeps its own


def _forkable_app(deadline: float) -> Any:
    if time.time() > deadline:
        raise TimeoutError("jupyter-exec: the fork request expired before the kernel reached it")
    from ipykernel.kernelapp import IPKernelApp

    if not IPKernelApp.initialized():
        raise RuntimeError("jupyter-exec: fork needs an IPython kernel started by IPKernelApp")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("jupyter-exec: fork must run in the kernel's main thread")
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
        raise RuntimeError(
            "jupyter-exec: this kernel has initialised CUDA, which a forked process cannot use; "
            "save the state you need (a checkpoint) and start a new session instead"
        )
    return IPKernelApp.instance()


def _fork_then(child_main: Any, *, reap_in_thread: bool = True) -> int:
    """``os.fork()``; the child runs ``child_main`` and exits, the parent gets the pid."""
    global last_pid
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()"
        pid = os.fork()
    if pid:
        last_pid = pid
        if reap_in_thread:
            threading.Thread(
                target=_reap, args=(pid,), name="jupyter-exec reaper", daemon=True
            ).start()
        return pid
    code = 0
    try:
        child_main()
    except BaseException:
        code = 70
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc(file=sys.__stderr__)
    os._exit(code)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _detach(old_app: Any) -> None:
    """In a child: a session of its own, and nothing of the parent's kernel left in use."""
    with contextlib.suppress(OSError):
        os.setsid()  # the parent's group gets the host's interrupts and kills, not us
    _abandoned.append(old_app)
    _mute(old_app)
    _close_kernel_sockets(old_app)
    _restore_std_fds()
    signal.set_wakeup_fd(-1)  # it may name the old loop's self-pipe, shared with the parent
    _leave_cell(old_app.shell, old_app.kernel)


def _serve_snapshot(old_app: Any, listener: socket.socket, host_pid: int) -> None:
    """The snapshot's life: start kernels on request, until the host ends or it is killed."""
    _detach(old_app)
    try:
        host = os.pidfd_open(host_pid) if host_pid > 0 else None
    except (AttributeError, OSError):
        host = None
    while True:
        watched: list[Any] = [listener] if host is None else [listener, host]
        ready, _, _ = select.select(watched, [], [], 1.0)
        _reap_finished()
        if host is not None and host in ready:
            return
        if host is None and host_pid > 0 and not _exists(host_pid):
            return
        if listener in ready:
            connection, _ = listener.accept()
            with connection:
                _answer(connection, old_app, listener, host)


def _answer(connection: socket.socket, old_app: Any, listener: socket.socket, host: Any) -> None:
    connection.settimeout(30.0)
    try:
        request = json.loads(connection.makefile("rb").readline())
        connection_file, host_pid = str(request["connection_file"]), int(request["host_pid"])
        if not os.path.isfile(connection_file):
            raise FileNotFoundError(f"no connection file at {connection_file}")

        def become() -> None:
            listener.close()
            if host is not None:
                os.close(host)
            _become_kernel(old_app, connection_file, host_pid)

        reply: dict[str, Any] = {"pid": _fork_then(become, reap_in_thread=False)}
    except Exception as exc:
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(reply).encode() + b"\n")


def _reap_finished() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _become_kernel(old_app: Any, connection_file: str, host_pid: int) -> None:
    """In the child: drop the parent's kernel and serve ``connection_file`` with its shell."""
    _detach(old_app)
    with contextlib.suppress(Exception):
        asyncio.events._set_running_loop(None)
    with contextlib.suppress(Exception):
        _abandoned.append(asyncio.get_event_loop())
    asyncio.set_event_loop(asyncio.new_event_loop())

    from ipykernel.kernelapp import IPKernelApp

    shell = old_app.shell
    kernel = old_app.kernel
    _abandoned.extend((kernel, shell))
    kernel_class = type(kernel)
    type(old_app).clear_instance()
    IPKernelApp.clear_instance()
    kernel_class.clear_instance()
    base = getattr(type(old_app), "_jupyter_exec_base", type(old_app))  # a fork of a fork
    app_class = _forked_app_class(base, shell, host_pid)
    app = app_class.instance()
    app.initialize(_argv_for(list(getattr(old_app, "argv", []) or []), connection_file))
    try:
        app.start()
    finally:
        with contextlib.suppress(Exception):
            app.close()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]


def _leave_cell(shell: Any, kernel: Any) -> None:
    """Put the shell back in its between-cells state: the fork happened inside a cell.

    The new kernel's cells would otherwise run "nested" in it: IPython would
    keep the displayhook the old request installed (and show no results).
    """
    for trap, undo in ((shell.display_trap, "unset"), (shell.builtin_trap, "deactivate")):
        if getattr(trap, "_nested_level", 0):
            with contextlib.suppress(Exception):
                getattr(trap, undo)()
            trap._nested_level = 0
    restore_input = getattr(kernel, "_restore_input", None)
    if restore_input is not None:
        with contextlib.suppress(Exception):
            restore_input()


def _mute(old_app: Any) -> None:
    """The old kernel sends nothing more: its sockets belong to the parent."""

    def send(*_args: Any, **_kwargs: Any) -> None:
        return None

    for owner in (old_app, getattr(old_app, "kernel", None)):
        session = getattr(owner, "session", None)
        if session is not None:
            session.send = send


def _close_kernel_sockets(old_app: Any) -> None:
    """Close this process's copies of the parent kernel's listening and connected sockets.

    They are the parent's: held open here, a TCP port would stay bound after the
    parent ended (its restart on the same ports would fail), and a client of the
    parent's would not see it go. Only the file descriptors are closed, never
    through ZeroMQ (whose threads are gone); the parent's copies are unaffected.
    """
    ports = {getattr(old_app, f"{name}_port", 0) for name in _CHANNELS} - {0}
    transport, ip = getattr(old_app, "transport", "tcp"), getattr(old_app, "ip", "")
    paths = {f"{ip}-{port}" for port in ports} if transport == "ipc" else set()
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return  # not Linux: the sockets stay open, as after any fork
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            probe = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            local = probe.getsockname()
        except OSError:
            local = None
        finally:
            probe.detach()
        if transport == "ipc":
            ours = local in paths
        else:
            ours = (
                isinstance(local, tuple)
                and len(local) >= 2
                and local[1] in ports
                and (local[0] == ip or ip in ("", "*", "0.0.0.0", "::"))
            )
        if ours:
            with contextlib.suppress(OSError):
                os.close(fd)


_CHANNELS = ("shell", "iopub", "stdin", "control", "hb")


def _restore_std_fds() -> None:
    """Point fds 1 and 2 back at the kernel's original files (not the parent's capture pipes)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        original = getattr(stream, "_original_stdstream_copy", None)
        if isinstance(original, int):
            with contextlib.suppress(OSError):
                os.dup2(original, fd)
        _abandoned.append(stream)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def _argv_for(argv: list[str], connection_file: str) -> list[str]:
    """The parent app's command line with its connection file replaced by ``connection_file``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("-f", "--f", "--connection-file", "--IPKernelApp.connection_file"):
            skip = True
            continue
        if arg.startswith(("-f=", "--f=", "--connection-file=", "--IPKernelApp.connection_file=")):
            continue
        out.append(arg)
    return [*out, "-f", connection_file]


class _HostWatcher(threading.Thread):
    """Ends this process when the host that asked for the fork ends (a pidfd, else polling)."""

    def __init__(self, host_pid: int) -> None:
        super().__init__(name="jupyter-exec host watcher", daemon=True)
        self.host_pid = host_pid

    def run(self) -> None:
        try:
            fd = os.pidfd_open(self.host_pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
            os._exit(1)
        while True:
            try:
                os.kill(self.host_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except OSError:
                pass
            time.sleep(1.0)


def _forked_app_class(base: type[Any], shell: Any, host_pid: int) -> type[Any]:
    """A subclass of the parent's app class that adopts ``shell`` instead of making one."""

    def init_poller(self: Any) -> None:
        self.poller = _HostWatcher(host_pid) if host_pid > 0 else None

    def init_kernel(self: Any) -> None:
        base.init_kernel(self)
        # IPythonKernel took the existing shell singleton; it still names the old kernel.
        shell.kernel = self.kernel
        _refresh_history(shell)

    def init_extensions(self: Any) -> None:
        return None  # loaded in the parent; their hooks live on the adopted shell

    def init_code(self: Any) -> None:
        return None  # no startup files or exec_lines again, and %who keeps the user's names

    def parse_command_line(self: Any, argv: Any = None) -> None:
        if argv is not None and len(argv) == 2 and argv[0] == "-f":
            self.connection_file = argv[1]  # the usual kernelspec: no parser to build (~25 ms)
            return
        base.parse_command_line(self, argv)

    return type(
        "ForkedKernelApp",
        (base,),
        {
            "init_poller": init_poller,
            "init_kernel": init_kernel,
            "init_extensions": init_extensions,
            "init_code": init_code,
            "parse_command_line": parse_command_line,
            "_jupyter_exec_base": base,
        },
    )


def _refresh_history(shell: Any) -> None:
    """A new database connection and session number: the parent's belong to the parent."""
    manager = getattr(shell, "history_manager", None)
    if manager is None or not getattr(manager, "enabled", False):
        return
    manager.db_input_cache_lock = threading.Lock()
    manager.db_output_cache_lock = threading.Lock()
    try:
        manager.save_thread = None
        manager.init_db()
        manager.new_session()
        restart = getattr(manager, "_restart_thread_if_stopped", None)
        if restart is not None:
            restart()
    except Exception:  # history is a convenience: the fork must not fail for it
        manager.enabled = False


def fork_code(connection_file: str, host_pid: int, deadline: float) -> str:
    """Code that, run in a kernel, forks it into a kernel serving ``connection_file``."""
    return _call_code("fork", connection_file, host_pid, deadline)


def snapshot_code(control_path: str, host_pid: int, deadline: float) -> str:
    """Code that, run in a kernel, forks a snapshot of it listening at ``control_path``."""
    return _call_code("snapshot", control_path, host_pid, deadline)


def _call_code(function: str, path: str, host_pid: int, deadline: float) -> str:
    """Code that registers this module once in the kernel and calls ``function``."""
    from jupyter_exec.inkernel import module_call_code  # on the host only: see the loader

    call = f"{function}({path!r}, {int(host_pid)}, {float(deadline)!r})"
    return module_call_code(__file__, MODULE, call, "fork", "call")


PID_EXPRESSION = f"__import__('sys').modules[{MODULE!r}].last_pid"
"""The ``user_expressions`` entry that reads the child's pid after :func:`fork` returned."""
