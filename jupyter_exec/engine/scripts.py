"""Stateless script mode: code written to a file in the work dir and run as a new process.

For parity with command-line executors (AG2's ``LocalCommandLineCodeExecutor``
and ``DockerCommandLineCodeExecutor``): each run is a fresh process in the
session's environment - the kernel's interpreter and environment on the host,
or ``docker exec`` in the session's own container - and nothing persists in
memory between runs. Output is stdout and stderr combined in order; a run past
its timeout is killed with its children and exits 124, as with ``timeout(1)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from jupyter_exec.boundary.naming import script_file_name
from jupyter_exec.boundary.paths import write_bytes
from jupyter_exec.engine.interpreters import kernel_interpreter
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS, Script, record_of_tag
from jupyter_exec.engine.provisioning import ContainerProvisioner
from jupyter_exec.engine.store import confined_path, writable_path
from jupyter_exec.exceptions import BackendError
from jupyter_exec.models import TIMEOUT_EXIT_CODE, ScriptResult

__all__ = ["SCRIPT_LANGUAGES", "TIMEOUT_EXIT_CODE", "run_script", "script_of", "script_path"]

SCRIPT_LANGUAGES = {
    record.tag: record.script.suffix
    for record in LANGUAGE_RECORDS.values()
    if record.script is not None
}
"""The code blocks' languages (``python``, ``sh``) that run as scripts -> their files' suffix."""


def script_of(language: str) -> Script:
    """How a script of ``language`` (a code block's tag, as ``normalise_language`` gives it)
    runs, from its language's record; ``ValueError`` for a language without scripts."""
    record = record_of_tag(language)
    if record is None or record.script is None:
        choices = " or ".join(repr(tag) for tag in SCRIPT_LANGUAGES)
        raise ValueError(f"unsupported script language {language!r}: use {choices}")
    return record.script


def script_path(
    work_dir: Path, folder: str, number: int, language: str, filename: str | None
) -> Path:
    """Where a script goes: ``filename`` (confined to the work dir), or a numbered default."""
    suffix = script_of(language).suffix
    relative = filename or f"{folder}/{script_file_name(number, suffix)}"
    return confined_path(work_dir, relative)


def _interpreter(script: Script, kernel_argv: list[str]) -> list[str]:
    if script.own_interpreter:
        return [str(kernel_interpreter(kernel_argv))]
    return [script.program]


async def _run_local(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float | None
) -> tuple[int, str, bool]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a timeout kills its children too
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
        return process.returncode or 0, out.decode("utf-8", "replace"), False
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, _ = await process.communicate()
        marker = f"\n[timed out after {timeout:g} s: killed]\n"
        return TIMEOUT_EXIT_CODE, out.decode("utf-8", "replace") + marker, True


async def run_script(
    path: Path,
    code: str,
    language: str,
    *,
    work_dir: Path,
    kernel_argv: list[str],
    kernel_env: dict[str, str],
    provisioner: object,
    timeout: float | None,
) -> ScriptResult:
    """Write ``code`` to ``path`` and run it in the session's environment (in the container of
    a :class:`~jupyter_exec.engine.provisioning.ContainerProvisioner`, else on this machine)."""
    path = writable_path(work_dir, path.relative_to(work_dir.absolute()))
    write_bytes(work_dir.absolute(), path.relative_to(work_dir.absolute()), code.encode("utf-8"))
    script = script_of(language)
    interpreter = _interpreter(script, kernel_argv)
    started = time.monotonic()
    if isinstance(provisioner, ContainerProvisioner):
        mount = str(provisioner.work_mount).rstrip("/")
        inside = f"{mount}/{path.relative_to(work_dir.absolute()).as_posix()}"
        argv = [script.program, inside]
        code_, output = await provisioner.run_command(argv, timeout=timeout)
        timed_out = code_ == TIMEOUT_EXIT_CODE  # the in-container watchdog says so itself
    else:
        env = {**os.environ, **kernel_env}
        try:
            code_, output, timed_out = await _run_local(
                [*interpreter, str(path)], work_dir, env, timeout
            )
        except OSError as exc:
            raise BackendError(f"could not run {interpreter[0]}: {exc.strerror or exc}") from exc
    return ScriptResult(code_, output, path, time.monotonic() - started, timed_out)
