"""Attacks on the MCP server's tasks: another credential's task, forged and swapped records.

The attacker holds another bearer token for a server on the same root (the token
was rotated, or another user's server shares the folder), or runs code in a
session of the server: a local kernel can write the root's
``.jupyter_exec/mcp-tasks/`` and ``mcp-task-results/``. A task of another
credential answers as an unknown id does, and is not listed; a record the host
did not sign, or signed under another id, is never loaded; a result file swapped
under its record is never served. Each time the victim's task and its result are
as they were.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("mcp")
from mcp.shared.exceptions import MCPError

from jupyter_exec.manager.saved import registry_folder
from jupyter_exec.mcp.tasks import KIND, RESULTS_KIND
from tests.mcp_tasks_helpers import (
    cancel_task,
    connect,
    get_task,
    list_tasks,
    mcp_http,
    start_task,
    task_result,
    texts,
    until_ended,
)

pytestmark = pytest.mark.timeout(300)

VICTIM, ATTACKER = "token-of-the-task-owner", "token-of-somebody-else"
SECRET = "print('the owner' + 's secret: 4242')"


async def test_a_task_of_another_credential_is_refused(tmp_path: Path) -> None:
    with mcp_http(tmp_path, VICTIM) as server:
        async with connect(server) as owner:
            task_id = (await start_task(owner, SECRET, "owned")).task.task_id
            assert (await until_ended(owner, task_id)).status == "completed"
    record = tmp_path / registry_folder(KIND) / f"{task_id}.json"
    before = record.read_bytes()

    with mcp_http(tmp_path, ATTACKER) as server:
        async with connect(server) as attacker:
            refusals = []
            for ask in (get_task, task_result, cancel_task):
                with pytest.raises(MCPError) as refused:
                    await ask(attacker, task_id)
                refusals.append((refused.value.error.code, refused.value.error.message))
            with pytest.raises(MCPError) as unknown:
                await get_task(attacker, "f" * 32)
            # The same answer as an id that does not exist: nothing tells the id is real.
            assert set(refusals) == {(-32602, unknown.value.error.message)}
            assert (await list_tasks(attacker)).tasks == []
    assert record.read_bytes() == before  # neither read into nor rewritten

    with mcp_http(tmp_path, VICTIM) as server:
        async with connect(server) as owner:
            assert (await get_task(owner, task_id)).status == "completed"
            assert "the owners secret: 4242" in texts(await task_result(owner, task_id))


async def test_forged_and_swapped_task_records_are_refused(tmp_path: Path) -> None:
    records = tmp_path / registry_folder(KIND)
    results = tmp_path / registry_folder(RESULTS_KIND)
    with mcp_http(tmp_path, VICTIM) as server:
        async with connect(server) as owner:
            genuine = (await start_task(owner, "print('genuine output')", "victim")).task.task_id
            assert (await until_ended(owner, genuine)).status == "completed"
            kept_record = (records / f"{genuine}.json").read_bytes()
            kept_result = (results / f"{genuine}.json").read_bytes()

            # The attacker's cell, in a session of the same server, writes beside the registry.
            forged_id, copied_id = "a" * 32, "b" * 32
            payload = json.dumps(
                {"content": [{"type": "text", "text": "forged output"}], "isError": False}
            )
            attack = f"""
import json, pathlib
records = pathlib.Path({str(records)!r}); results = pathlib.Path({str(results)!r})
genuine = json.loads((records / '{genuine}.json').read_text())
entry = dict(genuine['entry'], task_id='{forged_id}',
             result_sha256={hashlib.sha256(payload.encode()).hexdigest()!r})
(results / '{forged_id}.json').write_text({payload!r})
(records / '{forged_id}.json').write_text(json.dumps({{'v': 1, 'entry': entry, 'mac': '0' * 64}}))
(records / '{copied_id}.json').write_text((records / '{genuine}.json').read_text())
(results / '{genuine}.json').write_text({payload!r})
print('planted')
"""
            planted = await owner.call_tool("execute_code", {"code": attack, "session": "attacker"})
            assert texts(planted).strip() == "planted", texts(planted)

            # The genuine record now names a result file that is not its own: refused.
            with pytest.raises(MCPError) as swapped:
                await task_result(owner, genuine)
            assert swapped.value.error.code == -32603
            assert "not the one its record names" in swapped.value.error.message
            (results / f"{genuine}.json").write_bytes(kept_result)  # the owner puts it back

    with mcp_http(tmp_path, VICTIM) as server:
        async with connect(server) as owner:
            for planted_id in (forged_id, copied_id):  # neither signed for its name: never loaded
                with pytest.raises(MCPError) as refused:
                    await task_result(owner, planted_id)
                assert refused.value.error.code == -32602
            listed = [t.task_id for t in (await list_tasks(owner)).tasks]
            assert listed == [genuine]
            result = await task_result(owner, genuine)
            assert "genuine output" in texts(result)
            assert "forged output" not in texts(result)
    assert (records / f"{genuine}.json").read_bytes() == kept_record
