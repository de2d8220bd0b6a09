"""The E2B API's snapshot and fork endpoints, over ``jupyter_exec.e2b.branching``.

The routes::

    POST   /sandboxes/{id}/fork       {"count", "timeout"}  201 [{"sandbox": ...} | {"error": ...}]
    POST   /sandboxes/{id}/snapshots  {"name", "memory"}    201 {"snapshotID", "names"}
    GET    /snapshots?sandboxID=&name=&limit=&nextToken=    200 [...], x-next-token
    DELETE /templates/{snapshot id}                          204 (404: not this key's)

Every route opens with the server's API key alone (:data:`jupyter_exec.e2b.app.ROUTES`); a
sandbox's token opens none of them. A snapshot another key took is not found, as one that
never was. ``/templates/...`` is E2B's template API: this server serves the deletion of a
snapshot there (what the SDK's ``delete_snapshot`` calls), and answers 501 for the rest.
"""

from __future__ import annotations

from typing import Any

from jupyter_exec.e2b.api import APIHandler, created, timeout_field
from jupyter_exec.e2b.errors import NotServed, api_body, status_of
from jupyter_exec.e2b.snapshots import check_name, is_snapshot_id
from jupyter_exec.exceptions import InvalidArgument

__all__ = ["MAX_FORKS", "ForkHandler", "SnapshotHandler", "SnapshotsHandler", "TemplateHandler"]

MAX_FORKS = 20
"""The most sandboxes one fork call makes (the SDK's own bound)."""
MAX_LISTED = 100


def _count(body: dict[str, Any]) -> int:
    count = body.get("count", 1)
    if count is None:
        count = 1
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
        raise InvalidArgument(f"'count' must be a whole number from 1 to {MAX_FORKS}")
    return count


class ForkHandler(APIHandler):
    """``POST /sandboxes/{id}/fork``: ``count`` sandboxes from its files and state."""

    async def post(self, sandbox_id: str) -> None:
        sandboxes = self.server.sandboxes
        sandbox = sandboxes.get(sandbox_id)
        body = self.json_body()
        count = _count(body)
        seconds = timeout_field(body, self.max_timeout)
        made = await sandboxes.fork(sandbox, count, timeout=seconds)
        answer: list[dict[str, Any]] = []
        for each in made:
            if isinstance(each, BaseException):
                if not isinstance(each, Exception):
                    raise each  # cancelled: not an answer
                answer.append({"error": api_body(status_of(each), each)})
            else:
                answer.append({"sandbox": created(each)})
        self.send_json(answer, status=201)


class SnapshotHandler(APIHandler):
    """``POST /sandboxes/{id}/snapshots``: a snapshot of it (``memory`` false: files only)."""

    async def post(self, sandbox_id: str) -> None:
        sandbox = self.server.sandboxes.get(sandbox_id)
        body = self.json_body()
        memory = body.get("memory", True)
        if memory is None:
            memory = True
        if not isinstance(memory, bool):
            raise InvalidArgument("'memory' must be true or false")
        name = check_name(body.get("name"))
        snapshot = await self.server.sandboxes.take_snapshot(sandbox, memory=memory, name=name)
        self.send_json(snapshot.describe(), status=201)


class SnapshotsHandler(APIHandler):
    """``GET /snapshots``: this key's snapshots, oldest first, a page at a time."""

    def get(self) -> None:
        sandboxes = self.server.sandboxes
        found = sandboxes.store().every(sandboxes.owner)
        source = self.get_query_argument("sandboxID", "")
        name = self.get_query_argument("name", "")
        found = [s for s in found if (not source or s.sandbox == source)]
        found = [s for s in found if (not name or s.known_as(name))]
        limit, start = self._page()
        page = found[start : start + limit]
        if start + limit < len(found):
            self.set_header("x-next-token", str(start + limit))
        self.send_json([s.describe() for s in page])

    def _page(self) -> tuple[int, int]:
        limit_text = self.get_query_argument("limit", str(MAX_LISTED))
        token = self.get_query_argument("nextToken", "0")
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LISTED:
            raise InvalidArgument(f"'limit' must be a whole number from 1 to {MAX_LISTED}")
        if not token.isdigit() or len(token) > 9:
            raise InvalidArgument("'nextToken' must be what the last page's x-next-token said")
        return int(limit_text), int(token)


class TemplateHandler(APIHandler):
    """``DELETE /templates/{id}``: delete this key's snapshot; other template calls: 501."""

    def refusal(self) -> Exception | None:
        if self.request.method == "DELETE":
            return None
        return NotServed(
            f"templates (E2B's cloud builds them): {self.request.method} {self.request.path} "
            "is E2B's, and is not supported by this server (jupyter-exec e2b) yet"
        )

    async def delete(self, template_id: str) -> None:
        bare = template_id.split(":", 1)[0]
        sandboxes = self.server.sandboxes
        if not is_snapshot_id(bare) and sandboxes.store().find(bare, sandboxes.owner) is None:
            raise NotServed(
                f"templates (E2B's cloud builds them): {template_id!r} is no snapshot of this "
                "server's, and templates are not supported by this server (jupyter-exec e2b)"
            )
        await sandboxes.delete_snapshot(template_id)
        self.set_status(204)
        self.finish()
