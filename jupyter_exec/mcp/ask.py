"""Asking a person, through the MCP client, about a host the network policy leaves undecided.

``jupyter-exec mcp --ask-person`` gives the server's network policy an ``ask``
callback (:class:`ElicitingAsk`). The proxy calls it while a cell runs, from
its own connection task, so it cannot see which MCP request started the cell:
``execute_code`` therefore registers its request's context under the
session's name for as long as the code runs (:meth:`ElicitingAsk.running`),
and the callback sends an MCP *elicitation* on that request. The person's
answer is final for the session (the proxy remembers it per host and port: a yes
for ``host:443`` does not open ``host:22``, which is asked about on its own); every way
of not getting a yes (declined, cancelled, no client support, no answer in
time, no call running) is a denial whose reason the model reads.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

from jupyter_exec.network.policy import Decision, NetworkRequest

__all__ = ["DEFAULT_ASK_TIMEOUT", "ElicitingAsk"]

log = logging.getLogger("jupyter_exec.mcp")

DEFAULT_ASK_TIMEOUT = 120.0
"""Seconds a person has to answer before the host is denied."""


@functools.cache
def _approval_form() -> Any:
    """The form the person sees: one yes/no field, ticked by default.

    Made on first use: pydantic comes with the ``mcp`` extra, and the command line imports
    this module without it.
    """
    from pydantic import BaseModel, Field

    class Approval(BaseModel):
        allow: bool = Field(default=True, description="Allow the code to connect to this host")

    return Approval


class ElicitingAsk:
    """A ``NetworkPolicy`` ``ask`` callback that puts the question to the MCP client's user.

    One per server; it knows the context of each session's running
    ``execute_code`` call (set by :meth:`running`), which is how the
    elicitation reaches the client that asked for the code to run.
    """

    def __init__(self, timeout: float = DEFAULT_ASK_TIMEOUT) -> None:
        self.timeout = timeout
        self._calls: dict[str, list[Any]] = {}

    def __repr__(self) -> str:  # part of the policy's repr and pool key: stable, no id
        return f"ElicitingAsk(timeout={self.timeout})"

    @contextlib.contextmanager
    def running(self, session: str, context: Any) -> Iterator[None]:
        """While the body runs, questions about ``session``'s connections go to ``context``.

        Calls to one session queue (its cells run one at a time), so the oldest call still
        registered is the one whose code is running.
        """
        calls = self._calls.setdefault(session, [])
        calls.append(context)
        try:
            yield
        finally:
            calls.remove(context)
            if not calls:
                self._calls.pop(session, None)

    async def __call__(self, request: NetworkRequest) -> Decision:
        calls = self._calls.get(request.session)
        context = calls[0] if calls else None
        if context is None:
            return Decision(False, "no tool call was running to ask a person through")
        if not _can_elicit(context):
            return Decision(False, "the MCP client cannot ask a person (no elicitation support)")
        where = f"{request.host}:{request.port}"
        message = (
            f"Code running in session {request.session!r} wants to connect to {where}, "
            "which the network policy neither allows nor denies. Allow it for this session?"
        )
        import asyncio  # here: `jupyter-exec mcp --help` reads this module's default only

        try:
            answer = await asyncio.wait_for(context.elicit(message, _approval_form()), self.timeout)
        except asyncio.TimeoutError:
            return Decision(False, f"the person did not answer within {self.timeout:g} s")
        except Exception as exc:  # the client refused the request or went away
            log.info("elicitation about %s failed: %r", where, exc)
            return Decision(False, "the MCP client cannot ask a person (the request failed)")
        if answer.action == "accept" and getattr(answer.data, "allow", False):
            return Decision(True, "allowed by the person")
        if answer.action == "cancel":
            return Decision(False, "the person cancelled the question")
        return Decision(False, "the person declined")


def _can_elicit(context: Any) -> bool:
    """Whether the client said it can answer elicitations, on a channel that can carry one."""
    session = context.request_context.session
    if getattr(session, "can_send_request", True) is False:
        return False
    capabilities = getattr(session, "client_capabilities", None)
    if capabilities is None:
        params = getattr(session, "client_params", None)
        capabilities = getattr(params, "capabilities", None)
    return getattr(capabilities, "elicitation", None) is not None
