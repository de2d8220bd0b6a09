"""Running a model's code blocks in a session and telling the model what happened, written once.

Every agent front end (AG2 0.x's ``CodeExecutor``, AG2 1.x's
``CodeEnvironment``, the MCP server, and the adapters still to come) hands
its blocks to :func:`run_blocks` and turns the :class:`AgentResult` into its
framework's type. The rules therefore hold the same everywhere:

* **What runs.** Python and shell blocks run in the kernel (shell as
  ``%%bash``, so it shares the kernel's environment); IPython ``!cmd`` lines
  in a shell block run as the commands they name; ``!pip install`` /
  ``%pip install`` lines are made quiet (errors still show), as AG2's
  executors do, so an install does not flood the model's context. A block
  whose first line names a file (``# filename: app.py``, ``# app.py``,
  ``<!-- filename: index.html -->``, ``// filename: main.js``) is saved there
  first; a block in a language the kernel cannot run (HTML, CSS, JavaScript,
  ...) is only saved, and refused with a notice when it names no file.
* **What the model reads.** :func:`jupyter_exec.llm.render`: outputs in order,
  rich outputs (plots, HTML, DataFrames' HTML) named by the file they were
  saved to, a short traceback, the budget; then, after a failing block, how
  many blocks were not run.
* **The exit code.** 0 when every block ran cleanly, 124 for a timeout, a
  failed shell block's own status, 1 for anything else.
* **Files and images.** Every file a block produced (saved rich outputs and
  files the code wrote), and the images worth showing a multimodal model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_exec.codeblocks import CodeBlock, cell_source, save_block
from jupyter_exec.exceptions import InvalidArgument, WorkDirError
from jupyter_exec.llm import DEFAULT_LLM_CHARS, exit_code, render
from jupyter_exec.models import Execution
from jupyter_exec.session import AsyncSession
from jupyter_exec.sources import check_text

__all__ = [
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "AgentResult",
    "BlockResult",
    "images_for_model",
    "kernel_source",
    "not_run_notice",
    "run_block",
    "run_blocks",
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


@dataclass(frozen=True)
class AgentResult:
    """Blocks run in order up to the first failure, and what to tell the model about them."""

    blocks: tuple[BlockResult, ...] = ()
    not_run: int = 0
    text: str = ""
    exit_code: int = 0
    files: tuple[Path, ...] = field(default=())
    images: tuple[tuple[bytes, str], ...] = field(default=())

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
        return path.relative_to(work_dir.resolve()).as_posix()
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
    return BlockResult(f"[saved {_relative(path, work_dir)}]", 0, (path,))


async def run_block(
    session: AsyncSession,
    block: CodeBlock,
    *,
    timeout: float | None = None,
    max_output_chars: int = DEFAULT_LLM_CHARS,
) -> BlockResult:
    """Run (or only save) one block in ``session``; never raises for the block's own faults."""
    work_dir = session.work_dir
    try:
        check_text(block.code, "the code")
    except InvalidArgument as exc:
        return BlockResult(f"[not run: {exc}]", 1)
    if not block.runnable:
        return _save_only(block, work_dir)
    try:
        save_block(block, work_dir)
    except WorkDirError as exc:
        return BlockResult(f"[not run: {exc}]", 1)
    execution = await session.execute(kernel_source(block), timeout=timeout)
    text = render(
        execution, work_dir=work_dir, max_chars=max_output_chars, save_dir=session.files_dir
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
) -> AgentResult:
    """Run ``blocks`` in order in ``session``, stopping at the first that fails."""
    todo: Sequence[CodeBlock] = list(blocks)
    done: list[BlockResult] = []
    for block in todo:
        result = await run_block(session, block, timeout=timeout, max_output_chars=max_output_chars)
        done.append(result)
        if result.exit_code != 0:
            break
    left = len(todo) - len(done)
    texts = [r.text for r in done if r.text]
    if left and done:
        texts.append(not_run_notice(left))
    files = list(dict.fromkeys(p for r in done for p in r.files))
    images = [image for r in done for image in r.images][:MAX_IMAGES]
    return AgentResult(
        blocks=tuple(done),
        not_run=left,
        text="\n".join(texts),
        exit_code=done[-1].exit_code if done else 0,
        files=tuple(files),
        images=tuple(images),
    )
