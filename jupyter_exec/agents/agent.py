"""Running a model's code blocks in a session and telling the model what happened, written once.

Every agent front end (AG2 0.x's ``CodeExecutor``, AG2 1.x's
``CodeEnvironment``, the MCP server, and the adapters still to come) hands
its blocks to :func:`run_blocks` and turns the :class:`AgentResult` into its
framework's type. The rules therefore hold the same everywhere:

* **What runs.** Python and shell blocks run in the kernel (shell as
  ``%%bash``, so it shares the kernel's environment); given the session's
  :class:`~jupyter_exec.agents.kernels.LanguageKernels`, ``r``, ``js`` and
  ``ts`` blocks run in a stateful kernel of their language beside it; IPython ``!cmd`` lines
  in a shell block run as the commands they name; ``!pip install`` /
  ``%pip install`` lines are made quiet (errors still show), as AG2's
  executors do, so an install does not flood the model's context. A block
  whose first line names a file (``# filename: app.py``, ``# app.py``,
  ``<!-- filename: index.html -->``, ``// filename: main.js``) is saved there
  first; a block in a language the kernel cannot run (HTML, CSS, JavaScript,
  ...) is only saved, and refused with a notice when it names no file.
* **What the model reads.** :func:`jupyter_exec.agents.llm.render`: outputs in order,
  rich outputs (plots, HTML, DataFrames' HTML) named by the file they were
  saved to, a short traceback, the budget, the connections the session's
  network policy refused (once per host, with the policy's rules); then,
  after a failing block, how many blocks were not run.
* **The exit code.** 0 when every block ran cleanly, 124 for a timeout, a
  failed shell block's own status, 1 for anything else.
* **Files and images.** Every file a block produced (saved rich outputs and
  files the code wrote), and the images worth showing a multimodal model.

:func:`run_script_blocks` is the stateless twin, for users of command-line
executors: each block is saved (under its ``# filename:`` or a name derived
from its content) and run as a new process in the session's environment
(:meth:`AsyncSession.run_script`), each run recorded in the notebook as a
``!python <file>`` cell with its output; languages a policy does not allow
are only saved. :func:`run_command` runs one shell command that way for
sandbox backends (Deep Agents, AG2's ``Sandbox``), recorded as a ``%%bash``
cell, its output returned whole for the framework to parse.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from jupyter_exec.agents.codeblocks import CodeBlock, cell_source, save_block
from jupyter_exec.agents.kernels import KERNEL_LANGUAGES, LanguageKernels
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS, denied_connections, exit_code, render
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.engine.languages import language_record
from jupyter_exec.engine.outputs import strip_ansi
from jupyter_exec.engine.scripts import SCRIPT_LANGUAGES, script_of
from jupyter_exec.engine.sources import check_text
from jupyter_exec.exceptions import InvalidArgument, KernelStartError, WorkDirError
from jupyter_exec.models import Execution, ScriptResult
from jupyter_exec.network import Connection
from jupyter_exec.session.cancel import execute_to_the_end
from jupyter_exec.session.session import AsyncSession

__all__ = [
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "SCRIPT_POLICY",
    "AgentResult",
    "BlockResult",
    "images_for_model",
    "kernel_source",
    "not_run_notice",
    "run_block",
    "run_blocks",
    "run_command",
    "run_script_blocks",
]

MAX_IMAGES = 4
"""Images returned per call: the model's context is the limit, and the files stay on disk."""
MAX_IMAGE_BYTES = 4 * 1024 * 1024
"""Images larger than this are named, not sent."""

_IMAGE_SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}
_PIP_INSTALL_RE = re.compile(r"^(?P<lead>\s*(?:!|%)\s*pip3?\s+install)(?P<rest>\s.*)?$")
_BANG_RE = re.compile(r"^(?P<indent>\s*)!(?P<command>.*)$")


@dataclass(frozen=True)
class BlockResult:
    """One block: the model's text, its exit code, the files it produced, its images."""

    text: str
    exit_code: int
    files: tuple[Path, ...] = ()
    images: tuple[tuple[bytes, str], ...] = ()
    execution: Execution | None = None
    """The cell, when the block ran in the kernel (not for a block only saved or refused)."""
    code_file: Path | None = None
    """Where the block was saved, if it was."""


@dataclass(frozen=True)
class AgentResult:
    """Blocks run in order up to the first failure, and what to tell the model about them."""

    blocks: tuple[BlockResult, ...] = ()
    not_run: int = 0
    text: str = ""
    exit_code: int = 0
    files: tuple[Path, ...] = field(default=())
    images: tuple[tuple[bytes, str], ...] = field(default=())
    code_file: Path | None = None
    """The file the last block was saved to (stateless mode, and blocks only saved)."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _quiet_pip(line: str) -> str:
    match = _PIP_INSTALL_RE.match(line)
    if match is None or " -q" in line or "--quiet" in line:
        return line
    return f"{match.group('lead')} -qq{match.group('rest') or ''}"


def kernel_source(block: CodeBlock) -> str:
    """The cell to send to the kernel for a runnable block (Python, or shell as ``%%bash``).

    Shell lines written the IPython way (``!ls``) run as the command they
    name; ``pip install`` run through ``!`` or ``%pip`` is made quiet.
    """
    lines = [_quiet_pip(line) for line in block.code.split("\n")]
    if block.language == "sh":
        lines = [
            m.group("indent") + m.group("command") if (m := _BANG_RE.match(line)) else line
            for line in lines
        ]
        lines = [_quiet_pip_shell(line) for line in lines]
    return cell_source(CodeBlock(code="\n".join(lines), language=block.language))


def _quiet_pip_shell(line: str) -> str:
    return _quiet_pip("!" + line.lstrip())[1:] if line.lstrip().startswith("pip") else line


def not_run_notice(left: int) -> str:
    """What the model is told about blocks skipped after a failure."""
    were = "s were" if left > 1 else " was"
    return f"[{left} later code block{were} not run because this one failed]"


def _relative(path: Path, work_dir: Path) -> str:
    try:
        return path.relative_to(work_dir.absolute()).as_posix()
    except ValueError:
        return str(path)


def produced_files(execution: Execution) -> list[Path]:
    """Rich outputs as saved (plots, HTML, ...) then the files the code wrote, each once."""
    saved = [path for result in execution.results for path in result.files.values()]
    spilled = set(execution.spilled)
    written = [p for p in execution.files if p not in saved and p not in spilled]
    return list(dict.fromkeys([*saved, *written]))


def images_for_model(execution: Execution) -> list[tuple[bytes, str]]:
    """Images to show a multimodal model: displayed ones, then image files the code wrote."""
    found: list[tuple[bytes, str]] = []
    shown: set[Path] = set()
    for result in execution.results:
        for mime in ("image/png", "image/jpeg", "image/gif"):
            if mime in result.data:
                found.append((result.data_bytes(mime), mime.split("/")[1]))
                shown.update(result.files.values())
                break
    for path in execution.files:
        fmt = _IMAGE_SUFFIXES.get(path.suffix.lower())
        if fmt and path not in shown and path.is_file() and path.stat().st_size <= MAX_IMAGE_BYTES:
            found.append((path.read_bytes(), fmt))
    return [(data, fmt) for data, fmt in found if len(data) <= MAX_IMAGE_BYTES][:MAX_IMAGES]


def _save_only(block: CodeBlock, work_dir: Path) -> BlockResult:
    """A block the kernel cannot run: saved under the name it gives, or refused."""
    if block.filename is None:
        return BlockResult(
            f"[a {block.language or 'untagged'} block cannot be run: python and shell blocks "
            "run; start a block with '# filename: <name>' to save it as a file instead]",
            1,
        )
    try:
        path = save_block(block, work_dir)
    except WorkDirError as exc:
        return BlockResult(f"[not saved: {exc}]", 1)
    assert path is not None
    return BlockResult(f"[saved {_relative(path, work_dir)}]", 0, (path,), code_file=path)


def _refused(block: CodeBlock) -> BlockResult | None:
    """The "not run" notice for code no kernel could receive (a lone surrogate), else None."""
    try:
        check_text(block.code, "the code")
    except InvalidArgument as exc:
        return BlockResult(f"[not run: {exc}]", 1)
    return None


async def run_block(
    session: AsyncSession,
    block: CodeBlock,
    *,
    timeout: float | None = None,
    max_output_chars: int = DEFAULT_LLM_CHARS,
    style: Literal["model", "ag2"] = "model",
    kernels: LanguageKernels | None = None,
) -> BlockResult:
    """Run (or only save) one block in ``session``; never raises for the block's own faults.

    ``style``: how the outputs are worded (:func:`~jupyter_exec.agents.llm.render`).
    ``kernels``: the session's kernels of other languages; with them an ``r``,
    ``js`` or ``ts`` block runs in its language's kernel, without them it is saved only."""
    work_dir = session.work_dir
    refused = _refused(block)
    if refused is not None:
        return refused
    runner = session
    if kernels is not None and kernels.runs(block.language):
        try:
            runner = await kernels.kernel(block.language)
        except (InvalidArgument, KernelStartError) as exc:  # no such kernel here: saved only
            saved = _save_only(block, work_dir)
            if saved.exit_code != 0:
                return BlockResult(f"[a {block.language} block cannot run here: {exc}]", 1)
            return dataclasses.replace(saved, text=f"{saved.text} (not run: {exc})")
    elif not block.runnable:
        return _save_only(block, work_dir)
    try:
        save_block(block, work_dir)
    except WorkDirError as exc:
        return BlockResult(f"[not run: {exc}]", 1)
    source = kernel_source(block) if runner is session else block.code
    execution = await execute_to_the_end(runner, source, timeout)
    text = render(
        execution,
        work_dir=work_dir,
        max_chars=max_output_chars,
        save_dir=session.files_dir,
        network=session.options.network,
        style=style,
    )
    return BlockResult(
        text.text,
        exit_code(execution),
        tuple(produced_files(execution)),
        tuple(images_for_model(execution)),
        execution,
    )


async def run_blocks(
    session: AsyncSession,
    blocks: Iterable[CodeBlock],
    *,
    timeout: float | None = None,
    max_output_chars: int = DEFAULT_LLM_CHARS,
    style: Literal["model", "ag2"] = "model",
    kernels: LanguageKernels | None = None,
) -> AgentResult:
    """Run ``blocks`` in order in ``session``, stopping at the first that fails."""
    todo: Sequence[CodeBlock] = list(blocks)
    done: list[BlockResult] = []
    for block in todo:
        result = await run_block(
            session,
            block,
            timeout=timeout,
            max_output_chars=max_output_chars,
            style=style,
            kernels=kernels,
        )
        done.append(result)
        if result.exit_code != 0:
            break
    return _combine(done, len(todo))


def _combine(done: Sequence[BlockResult], total: int) -> AgentResult:
    left = total - len(done)
    texts = [r.text for r in done if r.text]
    if left and done:
        texts.append(not_run_notice(left))
    files = list(dict.fromkeys(p for r in done for p in r.files))
    images = [image for r in done for image in r.images][:MAX_IMAGES]
    saved = [r.code_file for r in done if r.code_file is not None]
    return AgentResult(
        blocks=tuple(done),
        not_run=left,
        text="\n".join(texts),
        exit_code=done[-1].exit_code if done else 0,
        files=tuple(files),
        images=tuple(images),
        code_file=saved[-1] if saved else None,
    )


# -- stateless: each block its own process ----------------------------------------------------

SCRIPT_POLICY: Mapping[str, bool] = dict.fromkeys(SCRIPT_LANGUAGES, True)
"""Languages run as processes by default (those whose records have a ``script``: python,
sh); every other block is saved only."""

_SUFFIXES = {
    **{record.tag: record.suffix for record in LANGUAGE_RECORDS.values()},
    **{name: language_record(name).suffix for name in KERNEL_LANGUAGES},
}
"""A saved block's file suffix by its language (others: ``.<language>``)."""


def _script_name(block: CodeBlock) -> str:
    """The file a block goes to: its own ``# filename:``, else a name from its content."""
    if block.filename is not None:
        return block.filename
    digest = hashlib.sha256(block.code.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    suffix = _SUFFIXES.get(block.language, f".{block.language or 'txt'}")
    return f"tmp_code_{digest}{suffix}"


def _refusals(session: AsyncSession, connections: Sequence[Connection]) -> list[str]:
    """The network policy's refusals while a process ran, as the model reads them."""
    return [f"[{line}]" for line in denied_connections(connections, session.options.network)]


def _script_text(
    result: ScriptResult, timeout: float | None, work_dir: Path, limit: int, refused: list[str]
) -> str:
    text = strip_ansi(result.output)
    if len(text) > limit:
        head = limit * 3 // 5
        cut = len(text) - limit
        text = (
            f"{text[:head]}\n[... {cut:,} characters of output cut ...]\n{text[-(limit - head) :]}"
        )
    notes = []
    if result.timed_out:
        notes.append(f"[Timeout: the script ran past {timeout or 0:g} s and was killed]")
    elif result.exit_code:
        notes.append(f"[exit code {result.exit_code}]")
    if result.files:
        listed = ", ".join(_relative(p, work_dir) for p in result.files[:30])
        notes.append(f"Files written (relative to the work dir): {listed}")
    notes += refused
    return "\n".join(part.rstrip("\n") for part in (text, *notes) if part.strip())


def _record_script(session: AsyncSession, block: CodeBlock, result: ScriptResult) -> None:
    """The run as a notebook cell that runs the same file again: ``!python <file>``."""
    program = script_of(block.language).program
    _record_process(session, f"!{program} {_relative(result.path, session.work_dir)}", result)


def _record_process(session: AsyncSession, source: str, result: ScriptResult) -> None:
    """A process run beside the kernel, as a notebook cell that would run it again."""
    outputs = [{"output_type": "stream", "name": "stdout", "text": result.output}]
    session.record_cell(
        {
            "cell_type": "code",
            "source": source,
            "metadata": {"jupyter_exec": {"script": True, "exit_code": result.exit_code}},
            "outputs": outputs if result.output else [],
            "execution_count": None,
        }
    )


async def run_script_block(
    session: AsyncSession,
    block: CodeBlock,
    *,
    timeout: float | None = None,
    policy: Mapping[str, bool] = SCRIPT_POLICY,
    max_output_chars: int = DEFAULT_LLM_CHARS,
) -> BlockResult:
    """Save ``block``; run it as its own process if ``policy`` allows its language."""
    work_dir = session.work_dir
    refused = _refused(block)
    if refused is not None:
        return refused
    named = dataclasses.replace(block, filename=_script_name(block))
    if not (block.runnable and policy.get(block.language, False)):
        saved = _save_only(named, work_dir)
        if saved.exit_code == 0 and block.runnable:
            text = f"{saved.text} (not run: {block.language} is not allowed to run here)"
            return dataclasses.replace(saved, text=text)
        return saved
    code = block.code
    if block.language == "sh":  # quiet installs, as AG2's command-line executors make them
        code = "\n".join(_quiet_pip_shell(line) for line in code.split("\n"))
    try:
        result = await session.run_script(code, block.language, named.filename, timeout=timeout)
    except WorkDirError as exc:  # AG2's words first: agents are prompted with them
        return BlockResult(f"[not run: Filename is not in the workspace: {exc}]", 1)
    _record_script(session, block, result)
    limit = timeout if timeout is not None else session.timeout
    return BlockResult(
        _script_text(
            result, limit, work_dir, max_output_chars, _refusals(session, result.connections)
        ),
        result.exit_code,
        result.files,
        code_file=result.path,
    )


async def run_command(
    session: AsyncSession, command: str, *, timeout: float | None = None
) -> ScriptResult:
    """Run ``command`` with bash as a new process in the session's environment, and record it.

    The work dir is its current directory; past ``timeout`` (default: the
    session's) it is killed and exits 124. The notebook gets a ``%%bash``
    cell holding the command and its output (the temporary script file is
    removed: the cell is the record). The output is returned whole: sandbox
    protocols parse it, and their frameworks cut it for the model. Connections the
    session's network policy refused meanwhile are named after it, one line per host
    (the notebook keeps the output as the process wrote it).
    """
    result = await session.run_script(command, "sh", timeout=timeout)
    result.path.unlink(missing_ok=True)
    _record_process(session, f"%%bash\n{command}", result)
    refused = _refusals(session, result.connections)
    if refused:
        output = result.output
        if output and not output.endswith("\n"):
            output += "\n"
        result = dataclasses.replace(result, output=output + "\n".join(refused) + "\n")
    return result


async def run_script_blocks(
    session: AsyncSession,
    blocks: Iterable[CodeBlock],
    *,
    timeout: float | None = None,
    policy: Mapping[str, bool] = SCRIPT_POLICY,
    max_output_chars: int = DEFAULT_LLM_CHARS,
) -> AgentResult:
    """Each block a new process (or saved only), in order, stopping at the first failure."""
    todo = list(blocks)
    done: list[BlockResult] = []
    for block in todo:
        result = await run_script_block(
            session, block, timeout=timeout, policy=policy, max_output_chars=max_output_chars
        )
        done.append(result)
        if result.exit_code != 0:
            break
    return _combine(done, len(todo))
