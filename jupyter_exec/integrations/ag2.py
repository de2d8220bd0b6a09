"""An AG2 0.x ``CodeExecutor`` backed by one stateful jupyter-exec session.

Drop-in for ``autogen.coding``'s executors::

    from autogen import ConversableAgent
    from jupyter_exec.integrations.ag2 import SessionCodeExecutor

    executor = SessionCodeExecutor(work_dir="analysis", timeout=60)
    agent = ConversableAgent("runner", llm_config=False,
                             code_execution_config={"executor": executor})

What it does that AG2's own Jupyter executors do not: it needs no kernel
gateway; a block past its timeout is interrupted (the kernel is restarted only
if the interrupt does not take), so nothing keeps running behind the model's
back; and since an agent forwards only ``CodeResult.output`` to the model, that
text names every file the code produced (relative to the work dir), says when
output was cut and which file holds all of it, and shows errors as a short
clean traceback (see :mod:`jupyter_exec.llm`). Every block is also a cell of
the session's notebook.

AG2 is imported when an executor is made, not when this module is imported;
without it, :class:`~jupyter_exec.integrations.MissingDependency` names the
extra to install (``jupyter-exec[ag2]``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from jupyter_exec.codeblocks import (
    CodeBlock,
    extract_code_blocks,
    normalise_language,
    prepare_block,
    save_block,
)
from jupyter_exec.environments import Environment, parse_environment
from jupyter_exec.exceptions import WorkDirError
from jupyter_exec.integrations import require
from jupyter_exec.llm import DEFAULT_LLM_CHARS, exit_code, render
from jupyter_exec.models import Execution
from jupyter_exec.sync import Session

__all__ = ["MarkdownBlockExtractor", "SessionCodeExecutor"]


def _coding() -> ModuleType:
    return require("autogen.coding.base", "ag2", "the AG2 executor")


def to_code_block(block: Any) -> CodeBlock:
    """Our :class:`CodeBlock` for an AG2 ``CodeBlock`` (or anything with ``code``/``language``)."""
    if isinstance(block, CodeBlock):
        return block
    code = str(block.code)
    language = normalise_language(str(getattr(block, "language", "") or ""), code)
    return CodeBlock.from_code(code, language)


class MarkdownBlockExtractor:
    """AG2 ``CodeExtractor``: fenced blocks of a message (text or content parts), in order.

    Unlike AG2's extractor it accepts ``~~~`` fences and longer fences, infers
    untagged shell blocks, and strips ``$ `` prompts from console blocks.
    """

    def extract_code_blocks(self, message: str | Iterable[Any] | None) -> list[Any]:
        coding = _coding()
        return [
            coding.CodeBlock(code=b.code, language=b.language) for b in extract_code_blocks(message)
        ]


class SessionCodeExecutor:
    """Runs an agent's code blocks in one stateful Jupyter session (local or Docker).

    Parameters
    ----------
    work_dir:
        The kernel's working directory (default: a new temporary directory);
        files the code writes, saved plots and the session notebook go there.
    environment:
        Where the kernel runs: an :class:`~jupyter_exec.environments.Environment`
        or its string form (``"local"``, ``"venv:.venv"``, ``"docker"``, ...).
    timeout:
        Seconds per code block before it is interrupted (``None``: no limit).
    max_output_chars:
        The text budget of ``CodeResult.output`` per block.
    session_options:
        Anything else :class:`~jupyter_exec.Session` takes (``name``,
        ``notebook``, ``env``, ...).

    The session starts on first use and lives until :meth:`close` (or the end
    of a ``with`` block, or interpreter exit). ``restart()`` (called by AG2 when
    an agent is reset) restarts the kernel, clearing its state.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        timeout: float | None = 60.0,
        max_output_chars: int = DEFAULT_LLM_CHARS,
        **session_options: Any,
    ) -> None:
        coding = _coding()  # fail now, with the install hint, rather than mid-conversation
        self._result_class: Any = coding.IPythonCodeResult
        self.environment = parse_environment(environment)
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self._work_dir = work_dir
        self._session_options = session_options
        self._session: Session | None = None
        self._extractor = MarkdownBlockExtractor()

    # -- the CodeExecutor protocol ----------------------------------------------------------

    @property
    def code_extractor(self) -> MarkdownBlockExtractor:
        """Finds the code blocks in a message (what AG2 asks of every executor)."""
        return self._extractor

    def execute_code_blocks(self, code_blocks: Sequence[Any]) -> Any:
        """Run ``code_blocks`` in order in the session; stop at the first that fails.

        Returns an AG2 ``IPythonCodeResult``: ``exit_code`` 0 when all ran,
        1 for an error (a shell block's own status for a failed shell
        command), 124 for a timeout; ``output`` is the model-facing text of
        every block run; ``output_files`` the absolute paths of images shown
        and files written.
        """
        session = self.session
        texts: list[str] = []
        files: list[str] = []
        status = 0
        blocks = [to_code_block(b) for b in code_blocks]
        for number, block in enumerate(blocks, start=1):
            text, code, produced = self._run_one(session, block)
            texts.append(text)
            files.extend(str(p) for p in produced if str(p) not in files)
            if code != 0:
                status = code
                left = len(blocks) - number
                if left:
                    texts.append(
                        f"[{left} later code block{'s were' if left > 1 else ' was'} not run "
                        "because this one failed]"
                    )
                break
        return self._result_class(
            exit_code=status, output="\n".join(t for t in texts if t), output_files=files
        )

    def restart(self) -> None:
        """Restart the kernel: variables and imports are gone, files stay."""
        if self._session is not None:
            self._session.restart()

    # -- the session ------------------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The executor's session, started on first use."""
        if self._session is None:
            options = {**self.environment.session_options(), **self._session_options}
            options.setdefault("timeout", self.timeout)
            self._session = Session(self._work_dir, **options)
        return self._session

    @property
    def work_dir(self) -> Path:
        return self.session.work_dir

    def close(self) -> None:
        """Stop the kernel (the work dir and notebook stay). Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __enter__(self) -> SessionCodeExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- one block --------------------------------------------------------------------------

    def _run_one(self, session: Session, block: CodeBlock) -> tuple[str, int, list[Path]]:
        """Run (or only save) one block: its model-facing text, exit code and files."""
        work_dir = session.work_dir
        if not block.runnable:
            if block.filename is None:
                return (
                    f"[a {block.language or 'untagged'} block cannot be run: this executor "
                    "runs python and sh blocks; start a block with '# filename: <name>' "
                    "to save it as a file instead]",
                    1,
                    [],
                )
            try:
                path = save_block(block, work_dir)
            except WorkDirError as exc:
                return f"[not saved: {exc}]", 1, []
            assert path is not None
            return f"[saved {_relative(path, work_dir)}]", 0, [path]
        try:
            source = prepare_block(block, work_dir)
        except WorkDirError as exc:
            return f"[not run: {exc}]", 1, []
        execution = session.execute(source, timeout=self.timeout)
        text = render(
            execution,
            work_dir=work_dir,
            max_chars=self.max_output_chars,
            save_dir=session.files_dir,
        )
        return text.text, exit_code(execution), _produced(execution)


def _relative(path: Path, work_dir: Path) -> str:
    try:
        return path.relative_to(work_dir.resolve()).as_posix()
    except ValueError:
        return str(path)


def _produced(execution: Execution) -> list[Path]:
    """Images the code showed (as saved) and files it wrote: what AG2 calls output files."""
    images = [
        path
        for result in execution.results
        for mime, path in result.files.items()
        if mime.startswith("image/")
    ]
    saved = {p for r in execution.results for p in r.files.values()}
    written = [p for p in execution.files if p not in saved]
    return images + written
