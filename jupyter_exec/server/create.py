"""Creating the extension's sessions: a server kernel, a recording session, a bound notebook.

Creating a session, step by step::

    work dir (API path) ──► ServerRoot.resolve: inside the server root, or WorkDirError
    kernel_manager.start_kernel(kernel_name, path)   the server's own kernel: /api/kernels,
                                                     JupyterLab's running panel, culling, gateway
    AsyncSession(kernel_manager=km)                  connects, records <work_dir>/<name>.ipynb
    session_manager.create_session(path, kernel_id)  a Jupyter session binds the notebook to the
                                                     kernel: opening it in JupyterLab joins it

Every request is checked before anything starts: the backends this server
serves and its kernelspecs here, every option by the engine's own
:class:`~jupyter_exec.options.SessionOptions` (made once from the body, its
refusal a 400 through :func:`request_options`); and the manager's limits refuse
a session before its kernel starts, so a refused request leaves no kernel, proxy
or notebook behind. A Docker session's network policy has its proxy started by
the engine's one owner of proxies (:func:`~jupyter_exec.session.launch.network_proxy`),
before the kernel, and it ends with the session. Kept apart from
:mod:`~jupyter_exec.server.sessions` because this is the one path with many steps,
each undone if a later one fails; the registry there only looks sessions up and
releases them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jupyter_core.utils import ensure_async
from tornado.web import HTTPError

from jupyter_exec.boundary.folders import claim as claim_folder
from jupyter_exec.boundary.folders import refuse_if_lent, trust_of
from jupyter_exec.boundary.naming import default_session_name
from jupyter_exec.boundary.paths import Folder
from jupyter_exec.engine.languages import (
    install_hint,
    is_default_language,
    language_of_kernel,
    language_record,
)
from jupyter_exec.engine.safepath import is_ipykernel, safe_python
from jupyter_exec.exceptions import (
    InvalidArgument,
    JupyterExecError,
    KernelStartError,
    SessionConflict,
    SessionLimitError,
    StorageError,
    WorkDirError,
)
from jupyter_exec.options import SessionOptions
from jupyter_exec.server import borrow, live
from jupyter_exec.server.bodies import InvalidRequest
from jupyter_exec.server.entry import ServerAsyncSession, ServerSession
from jupyter_exec.server.network import checked_policy
from jupyter_exec.session.backends import language_kernelspec
from jupyter_exec.session.launch import network_proxy
from jupyter_exec.session.session import AsyncSession, Backend

if TYPE_CHECKING:
    from jupyter_exec.manager import AsyncSessionManager
    from jupyter_exec.network import NetworkPolicy
    from jupyter_exec.network.proxy import NetworkProxy
    from jupyter_exec.server.approvals import Approvals
    from jupyter_exec.server.origins import ReplayOrigins
    from jupyter_exec.server.paths import ServerRoot
    from jupyter_exec.server.saved import SavedSession, SessionRegistry
    from jupyter_exec.server.sessions import ServerSessions

__all__ = ["Creation", "SessionLimitReached", "request_options"]

log = logging.getLogger("jupyter_exec.server")


def request_options(**given: Any) -> SessionOptions:
    """The session options a request asks for, checked by the engine's own rules.

    The one seam between a REST body and the engine's options: a refusal is the
    client's mistake, :class:`~jupyter_exec.server.bodies.InvalidRequest` (a 400),
    with the engine's message.
    """
    try:
        return SessionOptions(**given)
    except InvalidRequest:
        raise
    except InvalidArgument as exc:
        raise InvalidRequest(str(exc)) from None


class SessionLimitReached(SessionLimitError):
    """The session manager's limit is reached (``max_sessions``, ``max_sessions_per_backend``).

    A subclass of the manager's error under its own name, which REST clients
    see in the error body (``"error": "SessionLimitReached"``) as before.
    """


class Creation:
    """Creating sessions for :class:`~jupyter_exec.server.sessions.ServerSessions`.

    Also what other operations share with creating: starting a server kernel and
    checking a kernelspec exists (a replay does both), and the limit error (a fork
    can reach the limit too).
    """

    serverapp: Any
    manager: AsyncSessionManager
    root: ServerRoot
    approvals: Approvals
    default_work_dir: str
    kernel_names: dict[str, str]
    timeout: float | None
    startup_timeout: float
    _sessions: dict[str, ServerSession]
    _reserved: set[Path]
    _borrowing: set[str]
    replay_origins: ReplayOrigins
    saved: SessionRegistry

    # Provided by ServerSessions.
    async def start(self) -> None:
        raise NotImplementedError

    def _current(self) -> dict[str, ServerSession]:
        raise NotImplementedError

    async def _release(self, entry: ServerSession) -> None:
        raise NotImplementedError

    async def _shutdown_kernel(self, kernel_id: str) -> None:
        raise NotImplementedError

    if TYPE_CHECKING:  # provided by Sleeping (declared only: a stub here would shadow it)

        def policy_for_wake(self, session_id: str) -> NetworkPolicy | None: ...

        async def sleep(self, session_id: str) -> dict[str, str]: ...

    async def create(
        self,
        *,
        work_dir: str | None = None,
        name: str | None = None,
        backend: Backend | None = None,
        kernel_name: str | None = None,
        timeout: float | None = None,
        undo_steps: int = 0,
        network: Any = None,
        kernel_id: str | None = None,
        language: str | None = None,
    ) -> ServerSession:
        """Start a kernel on the server, attach a recording session, bind its notebook.

        ``network`` (the body's policy object) is checked before anything starts; for
        a Docker session it starts the proxy that is the kernel's only way out.
        ``kernel_id``: attach to that running server kernel instead (a person's, see
        :mod:`~jupyter_exec.server.borrow`); the kernel decides the backend and kernelspec.
        """
        await self.start()
        if language is not None:
            kernel_name = self._language_kernel(language, backend, kernel_name, undo_steps)
        borrowed = None
        if kernel_id is not None:  # no await from this check to the kernel's reservation below
            borrowed = borrow.check(
                cast("ServerSessions", self), kernel_id, backend, kernel_name, undo_steps, network
            )
            backend, kernel_name = borrowed.backend, borrowed.kernel_name
        backend = backend or "local"
        if backend not in self.kernel_names:  # what this server serves, not an option's rule
            raise InvalidRequest(
                f"unknown backend {backend!r}: use one of {', '.join(sorted(self.kernel_names))}"
            )
        session_id = uuid.uuid4().hex
        options = request_options(
            name=name,
            backend=backend,
            kernel_name=kernel_name or self.kernel_names[backend],
            timeout=self.timeout if timeout is None else timeout,
            undo_steps=undo_steps,
            network=None
            if network is None
            else checked_policy(network, self.approvals.asker(session_id)),
        )
        if borrowed is None:
            await self._check_kernelspec(options.kernel_name)
        made = work_dir is None  # a folder this request made goes again if it starts nothing
        if work_dir is None:  # a folder of its own, never one another session used
            folder, name = self._own_folder(name)
        else:
            folder = self.root.resolve(work_dir)
            made = not os.path.lexists(folder)
            self._refuse_registry(folder)
            if backend == "local":  # never a folder a Docker kernel had: what it left stays
                refuse_if_lent(folder, f"session {name or '(new)'!r} ({backend})")
            self._make_folder(folder)
        name = self._reserve(folder, name)
        notebook = folder / f"{name}.ipynb"
        if kernel_id is not None:
            self._borrowing.add(kernel_id)
        try:
            entry = await self._add(session_id, folder, name, options, borrowed=kernel_id)
        except BaseException:
            self._drop_own_folder(folder, own=made)
            raise
        finally:
            self._reserved.discard(notebook)
            self._borrowing.discard(kernel_id or "")
        self._remember(entry)
        return entry

    async def _add(
        self,
        session_id: str,
        folder: Path,
        name: str,
        options: SessionOptions,
        *,
        borrowed: str | None = None,
        resumed_from: str | None = None,
    ) -> ServerSession:
        """Start the session under the manager, and hold it.

        The manager checks its limits before the start runs: no kernel for a refused
        session, whose error names the settings to change (:class:`SessionLimitReached`).
        Then ``folder`` is claimed (:mod:`jupyter_exec.boundary.folders`): no kernel starts
        in a folder that crosses a trust line.

        ``options``: as checked (:func:`request_options`); what only the server has
        besides: ``borrowed``, the id of a running server kernel to attach to instead
        of starting one, and ``resumed_from``, the created time of a session from
        before a restart, whose notebook is resumed.
        """
        started: list[ServerSession] = []

        async def start() -> AsyncSession:
            # Held from before the kernel starts; the session holds its own claim once started.
            who = f"session {name!r} ({options.backend})"
            claim = claim_folder(folder, trust_of(options.backend), who)
            try:
                entry = await self._start(session_id, folder, name, options, borrowed, resumed_from)
            finally:
                claim.release()
            started.append(entry)
            return entry.session

        try:
            await self.manager.add(session_id, start, backend=options.backend)
        except SessionLimitError as exc:
            raise self._limit_reached(exc) from None
        entry = started[0]
        self._sessions[entry.id] = entry
        self.replay_origins.remember(entry)
        return entry

    def _remember(self, entry: ServerSession) -> None:
        """Keep ``entry`` in the registry, so it comes back after a restart.

        Not a session on a person's kernel (that kernel ends with the server,
        and with it what the person had): it is theirs to start again.
        """
        if entry.borrowed is not None:
            return
        self.saved.save(self._saved_of(entry))

    def _saved_of(self, entry: ServerSession) -> SavedSession:
        """What the registry keeps of ``entry``."""
        from jupyter_exec.server.saved import SavedSession

        return SavedSession(
            id=entry.id,
            name=entry.name,
            backend=entry.backend,
            kernel_name=entry.kernel_name,
            work_dir=self.root.api_path(entry.work_dir),
            notebook=self.root.api_path(entry.notebook),
            created=entry.created,
            timeout=entry.session.timeout,
            undo_steps=entry.session.options.undo_steps,
        )

    async def _resume_saved(self, saved: SavedSession) -> ServerSession:
        """Bring back a session from before the restart under its id: a new server kernel,
        the state rebuilt from its notebook (:meth:`AsyncSession.resume`), the notebook bound.

        The work dir is resolved again now (a link planted since is refused), the
        kernelspec must still exist, and the manager's limits apply as to a new session.
        """
        await self.start()
        folder = self.saved.notebook_path(saved).parent
        await self._check_kernelspec(saved.kernel_name)
        backend = cast("Backend", saved.backend)
        if backend == "local":
            refuse_if_lent(folder, f"session {saved.name!r} ({backend})")
        options = SessionOptions(  # as the server checked them, when it saved them
            backend=backend,
            kernel_name=saved.kernel_name,
            timeout=self.timeout if saved.timeout is None else saved.timeout,
            undo_steps=saved.undo_steps,
            # a policy is never written (its secrets): only a session this run put to
            # sleep comes back with one, kept in memory (server.sleeping)
            network=self.policy_for_wake(saved.id),
        )
        entry = await self._add(saved.id, folder, saved.name, options, resumed_from=saved.created)
        log.info("jupyter-exec session %s: back after the restart", entry.id)
        return entry

    def _limit_reached(self, exc: SessionLimitError) -> SessionLimitError:
        return SessionLimitReached(
            f"{exc} (c.AsyncSessionManager.max_sessions / max_sessions_per_backend, or "
            "JupyterExecApp.max_sessions); delete a session first"
        )

    def _refuse_registry(self, folder: Path) -> None:
        """No kernel works in the registry of saved sessions (reachable when hidden folders
        are allowed): its entries are the server's alone."""
        registry = self.root.root / self.saved.store.folder.split("/")[0]
        if folder == registry or registry in folder.parents:
            raise InvalidRequest(
                f"work_dir {self.root.api_path(folder)!r} is where the server keeps its "
                "sessions across restarts; choose another folder"
            )

    def _own_folder(self, name: str | None) -> tuple[Path, str]:
        """A new, empty folder ``<work_dir>/<name>`` for a session created without a work dir,
        and its name (``name``, or a fresh default).

        Made here, with no await between the check and the ``mkdir``, and never an existing
        one: a folder another session used (a Docker kernel could have planted
        ``ipykernel_launcher.py`` or ``pandas.py`` there, or rewritten a notebook) is
        never handed to the next session, whatever either's backend.
        """
        parent = self.root.resolve(self.default_work_dir)
        self._refuse_registry(parent)
        self._make_folder(parent)
        if name is None:
            name = default_session_name(
                parent, taken=lambda n: os.path.lexists(parent / n) or self._taken(parent / n)
            )
        shown = self.root.api_path(parent / name)
        try:
            with Folder.open(self.root.root, self.root.api_path(parent)) as where:
                os.mkdir(name, 0o755, dir_fd=where.fd)
        except FileExistsError:
            raise SessionConflict(
                f"{shown!r} exists already, and a session created without a work_dir gets a "
                "new folder of its own; choose another name, or give work_dir"
            ) from None
        except OSError as exc:
            raise WorkDirError(
                f"cannot create work_dir {shown!r}: {exc.strerror}; choose another folder"
            ) from exc
        return parent / name, name

    def _drop_own_folder(self, folder: Path, *, own: bool) -> None:
        """Remove the folder this request made (:meth:`_own_folder`, or a work dir that was not
        there) for a session that did not start, if nothing was written there (what a kernel
        wrote stays, to be looked at)."""
        if not own:
            return
        with (
            contextlib.suppress(OSError),
            Folder.open(self.root.root, self.root.api_path(folder.parent)) as where,
        ):
            os.rmdir(folder.name, dir_fd=where.fd)

    def _taken(self, folder: Path) -> bool:
        """Whether a live or starting session works in ``folder``."""
        notebooks = {e.notebook for e in self._current().values()} | self._reserved
        return any(n.parent == folder for n in notebooks)

    def _make_folder(self, folder: Path) -> None:
        """Create the work dir (an existing one is fine); a path that cannot be one is refused."""
        shown = self.root.api_path(folder)
        if folder.exists() and not folder.is_dir():
            raise InvalidRequest(f"work_dir {shown!r} is a file, not a folder; name a folder")
        try:  # made from the root down, no link followed (a planted one: StorageError, 400)
            Folder.open(self.root.root, shown, create=True).close()
        except StorageError:
            raise
        except OSError as exc:
            raise WorkDirError(
                f"cannot create work_dir {shown!r}: {exc.strerror}; choose another folder"
            ) from exc

    async def _start(
        self,
        session_id: str,
        folder: Path,
        name: str,
        options: SessionOptions,
        borrowed: str | None,
        resumed_from: str | None,
    ) -> ServerSession:
        """Start the session's kernel (or attach to ``borrowed``) and its recording in the
        claimed ``folder``, and bind its notebook; whatever was made is undone if a step fails."""
        notebook = folder / f"{name}.ipynb"
        notebook_api = self.root.api_path(notebook)
        env = {**os.environ, "JPY_SESSION_NAME": str(notebook)}
        async with network_proxy(options.network, name) as proxy:
            kernel_id: str | None = None
            session: ServerAsyncSession | None = None
            try:  # whatever was made is undone, newest first, if a later step fails
                kernel_id = borrowed or await self._start_server_kernel(
                    options.kernel_name, folder, env, network_proxy=proxy
                )
                session = self._server_session(
                    notebook, options, kernel_id, resumed=resumed_from is not None
                )
                session.network_proxy = proxy
                await session.start()
                live.attach(session, self.serverapp, notebook_api)
                model = await self.serverapp.session_manager.create_session(
                    path=notebook_api, name=notebook.name, type="notebook", kernel_id=kernel_id
                )
            except BaseException:
                if session is not None:
                    await session.close()
                if kernel_id is not None and borrowed is None:  # a person's kernel stays theirs
                    await self._shutdown_kernel(kernel_id)
                raise  # the proxy closes too
        entry = ServerSession(
            id=session_id,
            session=session,
            backend=options.backend,
            kernel_name=options.kernel_name,
            kernel_id=kernel_id,
            work_dir=folder,
            created=resumed_from or datetime.now(timezone.utc).isoformat(),
            jupyter_session_id=model.get("id"),
            policy=options.network,
            proxy=proxy,
            borrowed=borrowed,
        )
        session.on_close = lambda: self._release(entry)
        session.on_sleep = lambda: self.sleep(entry.id)
        log.info("jupyter-exec session %s: kernel %s, notebook %s", entry.id, kernel_id, notebook)
        return entry

    def _server_session(
        self, notebook: Path, options: SessionOptions, kernel_id: str, *, resumed: bool
    ) -> ServerAsyncSession:
        """The engine's session on the server kernel ``kernel_id``, recording ``notebook``
        (continued, for a session from before a restart)."""
        kwargs: dict[str, Any] = {
            "kernel_name": options.kernel_name,
            "backend": options.backend,
            "timeout": options.timeout,
            "startup_timeout": self.startup_timeout,
            "undo_steps": options.undo_steps,
            "kernel_manager": self.serverapp.kernel_manager.get_kernel(kernel_id),
        }  # no network=: the server started the kernel behind its proxy
        folder, name = notebook.parent, notebook.stem
        if resumed:
            return ServerAsyncSession.resume(notebook, work_dir=folder, name=name, **kwargs)
        return ServerAsyncSession(work_dir=folder, name=name, **kwargs)

    async def _start_server_kernel(
        self,
        kernel_name: str,
        folder: Path,
        env: dict[str, str] | None = None,
        *,
        network_proxy: NetworkProxy | None = None,
    ) -> str:
        """A kernel from the server's own kernel manager (so JupyterLab lists it); its id.

        ``network_proxy``: the Docker provisioner mounts it as the kernel's only way out.
        """
        kwargs: dict[str, Any] = {"kernel_name": kernel_name, "path": self.root.api_path(folder)}
        if await self._starts_on_this_host(kernel_name):  # its cwd never searched first
            env = dict(os.environ if env is None else env)
            kwargs["extra_arguments"] = safe_python(env)
        if env is not None:
            kwargs["env"] = env
        if network_proxy is not None:
            kwargs["network_proxy"] = str(network_proxy.folder)
        try:
            return str(await ensure_async(self.serverapp.kernel_manager.start_kernel(**kwargs)))
        except JupyterExecError:
            raise
        except HTTPError as exc:  # our refusal, made a 4xx for Jupyter's own routes: ours again
            if isinstance(exc.__cause__, JupyterExecError):
                raise exc.__cause__ from None
            raise KernelStartError(f"could not start kernel {kernel_name!r}: {exc}") from exc
        except Exception as exc:  # jupyter_client, provisioners and gateways raise assorted types
            raise KernelStartError(f"could not start kernel {kernel_name!r}: {exc}") from exc

    async def _starts_on_this_host(self, kernel_name: str) -> bool:
        """Whether ``kernel_name`` is an IPython kernel this server starts as a process of
        its own (no provisioner of ours or anyone's, no gateway): one that imports from
        its working directory unless told not to (:mod:`jupyter_exec.engine.safepath`)."""
        gateway = getattr(self.serverapp, "gateway_config", None)
        if gateway is not None and getattr(gateway, "gateway_enabled", False):
            return False
        try:
            spec = await ensure_async(
                self.serverapp.kernel_spec_manager.get_kernel_spec(kernel_name)
            )
        except Exception:  # unknown here: the start reports it
            return False
        metadata = getattr(spec, "metadata", None) or {}
        return "kernel_provisioner" not in metadata and is_ipykernel(getattr(spec, "argv", []))

    def _language_kernel(
        self, language: str, backend: Backend | None, kernel_name: str | None, undo_steps: int
    ) -> str:
        """The kernelspec of ``language`` on ``backend`` (``ir``, ``bash-docker``...); a
        ``kernel_name`` that says otherwise, or undo for a language without it, is a 400."""
        try:
            record = language_record(language)
        except InvalidArgument as exc:
            raise InvalidRequest(str(exc)) from None
        where = backend or "local"
        wanted = language_kernelspec(record.name, where)
        if record.default:  # the server's own choice of Python kernelspec
            wanted = self.kernel_names.get(where, wanted)
        if kernel_name is not None and kernel_name != wanted:
            raise InvalidRequest(
                f"'language' {language!r} runs the kernelspec {wanted!r}, but 'kernel_name' "
                f"{kernel_name!r} was given too: give one of them"
            )
        if undo_steps and not record.undo:
            raise InvalidRequest(
                f"'undo_steps' needs a Python kernel; {language!r} has no undo: drop it"
            )
        return wanted

    async def _check_kernelspec(self, kernel_name: str) -> None:
        specs = await ensure_async(self.serverapp.kernel_spec_manager.get_all_specs())
        if kernel_name not in specs:
            language = language_of_kernel(kernel_name.removesuffix("-docker"))
            hint = ""
            if kernel_name == self.kernel_names.get("docker") or kernel_name.endswith("-docker"):
                hint = "; install jupyter-exec's kernelspecs with `jupyter-exec kernels install`"
            elif language is not None and not is_default_language(language):
                hint = f"; install it with `{install_hint(language)}`"
            raise InvalidRequest(
                f"no kernelspec named {kernel_name!r} on this server "
                f"(available: {', '.join(sorted(specs)) or 'none'}){hint}"
            )

    def _reserve(self, folder: Path, name: str | None) -> str:
        """A session name whose notebook does not exist yet, reserved until the session starts."""
        taken = {e.notebook for e in self._current().values()} | self._reserved

        def free(candidate: str) -> bool:
            path = folder / f"{candidate}.ipynb"
            return path not in taken and not path.exists()

        if name is not None:
            if not free(name):
                raise SessionConflict(
                    f"{self.root.api_path(folder / f'{name}.ipynb')!r} exists already; "
                    "choose another name or work_dir"
                )
        else:
            name = default_session_name(folder, taken=lambda n: not free(n))
        self._reserved.add(folder / f"{name}.ipynb")
        return name
