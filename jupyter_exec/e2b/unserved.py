"""What the E2B server does not serve, said plainly: E2B's routes it lacks (501), any other (404).

The SDK calls routes this server has no answer for yet: ``get_metrics()``,
templates, volumes, secrets... A 404
there would read, to the SDK, as "sandbox not found"; so each of E2B's own
routes that is not served is listed in :data:`NOT_SERVED`, and answers 501
with what it is and that this server does not serve it. Any other path
answers 404 with the routes that are served. Both are :class:`E2BHandler`\\ s:
the credential is checked first (a request with neither the API key nor a
sandbox's token gets 401, whatever the path), and the answer is given from
the headers alone (:meth:`E2BHandler.refusal`), so no body is ever read.

When a feature here is served, its route moves from :data:`NOT_SERVED` to
:data:`jupyter_exec.e2b.app.ROUTES` (a test checks that no path is in both).
"""

from __future__ import annotations

import re

from tornado.web import HTTPError

from jupyter_exec.e2b.auth import API_KEY, SANDBOX_TOKEN, RouteAuth
from jupyter_exec.e2b.errors import NotServed
from jupyter_exec.e2b.web import E2BHandler

__all__ = [
    "NOT_SERVED",
    "UNSERVED_AUTH",
    "NotFoundHandler",
    "NotServedHandler",
    "pattern_of",
    "shown",
]

NOT_SERVED: tuple[tuple[str, str], ...] = (
    ("/sandboxes/{sandbox_id}/refreshes", "refreshing a sandbox's life"),
    ("/sandboxes/{sandbox_id}/network", "changing a sandbox's network rules"),
    ("/[v2/]sandboxes/{sandbox_id}/logs", "a sandbox's logs"),
    ("/[v2/|v3/]templates[/...]", "templates (E2B's cloud builds them)"),
    ("/default-templates", "templates (E2B's cloud builds them)"),
    ("/secrets[/...]", "secrets"),
    ("/volumes[/...]", "volumes"),
)
"""E2B's API routes this server does not serve (yet), as written in messages, and what each is
for. ``{name}`` is one path segment, ``[a/|b/]`` an optional prefix, ``[/...]`` any sub-path."""

UNSERVED_AUTH = RouteAuth(frozenset({API_KEY, SANDBOX_TOKEN}), 0)
"""What opens a route that is not served: the API key or a sandbox's token. No body is taken."""

_SEGMENT = r"[A-Za-z0-9._-]+"


def pattern_of(written: str) -> str:
    """The URL pattern of a route as :data:`NOT_SERVED` writes it."""
    pattern = re.escape(written)
    pattern = re.sub(r"\\\{(\w+)\\\}", rf"(?P<\1>{_SEGMENT})", pattern)
    pattern = pattern.replace(r"\[/\.\.\.\]", r"(?:/.*)?")
    return re.sub(
        r"\\\[(.*?)\\\]",
        lambda m: "(?:" + m.group(1).replace(r"\|", "|") + ")?",
        pattern,
    )


def shown(pattern: str) -> str:
    """A route's URL pattern as a person reads it: ``/sandboxes/{sandbox_id}/connect``."""
    text = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)
    text = re.sub(r"\(\?:([^)]*)\)\?", r"[\1]", text)
    return text.replace("\\", "")


class NotServedHandler(E2BHandler):
    """One of E2B's routes this server does not serve: 501 with what it is, its body unread."""

    def refusal(self) -> Exception:
        what = next(
            (what for written, what in NOT_SERVED if re.fullmatch(pattern_of(written),
                                                                  self.request.path)),
            "this route",
        )  # fmt: skip
        return NotServed(
            f"{what}: {self.request.method} {self.request.path} is E2B's, and is not supported "
            "by this server (jupyter-exec e2b) yet"
        )


class NotFoundHandler(E2BHandler):
    """Any other path: 404 naming the routes that are served, its body unread."""

    def refusal(self) -> Exception:
        served = ", ".join(self.server.routes_served())
        return HTTPError(
            404,
            f"no such route: {self.request.method} {self.request.path} is not served here; "
            f"this server serves {served}",
        )
