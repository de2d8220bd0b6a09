"""The MCP server's tools over a session's state: fork, undo, checkpoint, restore, checkpoints.

Thin over the session API (:meth:`~jupyter_exec.AsyncSession.fork`, ``undo``,
``checkpoint``, ``restore``, ``checkpoints``; see docs/howto/state.md): this
module only names things for a model and keeps the server's books. A fork is a
new session of the server, so it is registered with the server's session
manager under its own name (limits, listing, idle culling and shutdown apply
to it as to any session) and the model addresses it with ``session=<name>`` in
``execute_code``. Failures are the engine's own errors, which the server's tool
wrapper turns into results marked ``isError``.

Tools::

    fork_session(session, n=1, name=None)  n new sessions from this one's live state
    undo(session, n=1)                     the state from before the last n cells
    checkpoint(session, name=None)         remember the state under a name
    restore_checkpoint(session, checkpoint)   go back to a named checkpoint
    list_checkpoints(session)              a session's checkpoints, oldest first
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from jupyter_exec.exceptions import InvalidArgument, SessionLimitError

if TYPE_CHECKING:
    from jupyter_exec.mcp.sessions import SessionRegistry
    from jupyter_exec.session.session import AsyncSession

__all__ = ["fork_into", "register_state_tools"]

Register = Callable[[Callable[..., Awaitable[Any]]], None]


async def fork_into(
    registry: SessionRegistry, session: str, n: int, name: str | None
) -> list[AsyncSession]:
    """Fork ``session`` into ``n`` sessions of the server, each registered under its name.

    All or nothing: when one fork cannot be registered (its name is already an
    open session, or the server is full), every fork made is closed again and
    the parent is left as it was.
    """
    parent = registry.existing(session)
    limit = registry.max_sessions
    open_now = len(registry.manager)
    if limit and isinstance(n, int) and open_now + n > limit:
        raise SessionLimitError(
            f"cannot fork {session!r} into {n} session(s): this server allows {limit} open "
            f"session(s) at once (--max-sessions) and {open_now} are open; close some first"
        )
    backend = next(i.backend for i in registry.manager.list() if i.name == session)
    children = await parent.fork(n, name)
    registered: list[str] = []
    try:
        taken = [c.name for c in children if c.name in registry.manager]
        if taken:
            raise InvalidArgument(
                f"a session named {taken[0]!r} is already open on this server; "
                "give the fork another name (name=...)"
            )
        for child in children:
            await registry.manager.add(child.name, _made(child), backend=backend)
            registered.append(child.name)
            registry.remember(child, backend)  # a fork comes back after a restart too
    except BaseException:
        for child in children:
            with contextlib.suppress(Exception):
                if child.name in registered:
                    await registry.manager.close_session(child.name)
                else:
                    await child.close()
        raise
    return children


def _made(session: AsyncSession) -> Callable[[], Awaitable[AsyncSession]]:
    async def made() -> AsyncSession:
        return session

    return made


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


async def _checkpoints(live: AsyncSession) -> list[Any]:
    found: Any = live.checkpoints()
    if inspect.isawaitable(found):  # a store on disk may answer asynchronously
        found = await found
    return list(found)


def register_state_tools(tool: Register, registry: SessionRegistry) -> None:
    """Add the state tools to a server whose tool decorator is ``tool``."""

    @tool
    async def fork_session(session: str = "default", n: int = 1, name: str | None = None) -> str:
        """Copy a session's live state (variables, imports, loaded data) into n new sessions.

        Use it to try several approaches from the same point: each new session has its own
        kernel and notebook and shares the parent's work dir; the parent goes on unchanged.
        name: the new session's name (with n > 1: name-1, name-2, ...); default <session>-fork-K.
        Returns the new sessions' names: pass one as session= to execute_code.
        """
        children = await fork_into(registry, session, n, name)
        names = [child.name for child in children]
        return (
            f"forked session {session!r} into {len(names)} new session(s): {_listed(names)}\n"
            f"Each starts with the variables and imports of {session!r} and goes its own way; "
            f"run code in one with execute_code(session=...). {session!r} is unchanged."
        )

    @tool
    async def undo(session: str = "default", n: int = 1) -> str:
        """Take back the last n cells of a session: its variables return to what they were
        before them (the cells stay in the notebook, marked undone)."""
        live = registry.existing(session)
        if live.options.undo_steps <= 0:
            raise InvalidArgument(
                f"undo is off for session {session!r}: start the MCP server with --undo-steps N "
                "to be able to undo a session's last N cells (checkpoint and restore_checkpoint "
                "work without it)"
            )
        await live.undo(n)
        return (
            f"session {session!r}: the last {n} cell(s) undone; its state is as it was before "
            "them (they stay in the notebook, marked undone)"
        )

    @tool
    async def checkpoint(session: str = "default", name: str | None = None) -> str:
        """Remember a session's current state (variables, imports, data) under a name, to go
        back to it later with restore_checkpoint; default name checkpoint-K."""
        made = await registry.existing(session).checkpoint(name)
        return (
            f"session {session!r}: checkpoint {made.name!r} taken after {made.cell_index} "
            f"cell(s); restore_checkpoint(session={session!r}, checkpoint={made.name!r}) "
            "brings this state back"
        )

    @tool
    async def restore_checkpoint(checkpoint: str, session: str = "default") -> str:
        """Bring back the state a session had at a named checkpoint; cells run since are
        marked undone in its notebook. list_checkpoints shows the names."""
        await registry.existing(session).restore(checkpoint)
        return (
            f"session {session!r}: checkpoint {checkpoint!r} restored; variables and imports "
            "are as they were when it was taken"
        )

    @tool
    async def list_checkpoints(session: str = "default") -> str:
        """A session's checkpoints, oldest first: name, cells run before it, when taken."""
        found = await _checkpoints(registry.existing(session))
        if not found:
            return f"session {session!r} has no checkpoints yet (checkpoint takes one)"
        return "\n".join(
            f"{c.name}: after {c.cell_index} cell(s), taken {c.created:%Y-%m-%d %H:%M:%S} UTC"
            for c in found
        )
