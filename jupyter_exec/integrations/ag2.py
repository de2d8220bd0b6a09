"""An AG2 0.x ``CodeExecutor`` backed by one stateful jupyter-exec session.

Drop-in for ``autogen.coding``'s executors::

    from autogen import ConversableAgent
    from jupyter_exec.integrations.ag2 import SessionCodeExecutor

    executor = SessionCodeExecutor(work_dir="analysis", timeout=60)
    agent = ConversableAgent("runner", llm_config=False,
                             code_execution_config={"executor": executor})

A thin adapter: the blocks are run by :mod:`jupyter_exec.agents.agent` (what runs,
what the model reads, the exit code, the files), shared with every other
front end; this module only speaks AG2's types. As AG2's own executors do, a
``work_dir`` that does not exist and a ``kernel_name`` that is not installed
are refused when the executor is made. What it does beyond them: no kernel
gateway is needed; a block past its timeout is interrupted (the kernel is
restarted only if the interrupt does not take); the output names every file
the code produced; and every block is a cell of the session's notebook.

AG2 is imported when an executor is made, not when this module is imported;
without it, :class:`~jupyter_exec.integrations.MissingDependency` names the
extra to install (``jupyter-exec[ag2]``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from jupyter_exec.agents.agent import SCRIPT_POLICY, run_blocks, run_script_blocks
from jupyter_exec.agents.codeblocks import CodeBlock, extract_code_blocks, normalise_language
from jupyter_exec.agents.kernels import LanguageKernels
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS
from jupyter_exec.engine.environments import Environment, parse_environment
from jupyter_exec.engine.loop_thread import run_blocking
from jupyter_exec.exceptions import InvalidArgument, WorkDirNotFound
from jupyter_exec.integrations import adapter_options, require
from jupyter_exec.network import NetworkPolicy
from jupyter_exec.sync import Session

__all__ = ["MarkdownBlockExtractor", "SessionCodeExecutor", "SessionCommandLineExecutor"]


def _coding() -> ModuleType:
    return require("autogen.coding.base", "ag2", "the AG2 executor")


def to_code_block(block: Any) -> CodeBlock:
    """Our :class:`CodeBlock` for an AG2 ``CodeBlock`` (or anything with ``code``/``language``)."""
    if isinstance(block, CodeBlock):
        return block
    code = str(block.code)
    language = normalise_language(str(getattr(block, "language", "") or ""), code)
    return CodeBlock.from_code(code, language)


def check_kernel_name(kernel_name: str) -> None:
    """Refuse a kernelspec that is not installed, as AG2's executors do (a ``ValueError``)."""
    from jupyter_client.kernelspec import KernelSpecManager

    installed = KernelSpecManager().find_kernel_specs()
    if kernel_name not in installed:
        raise InvalidArgument(
            f"Kernel {kernel_name!r} is not installed (installed: "
            f"{', '.join(sorted(installed)) or 'none'}); see jupyter kernelspec list"
        )


def make_work_dir(path: Path) -> None:
    """Make ``path`` (not its parents), as AG2's command-line executors do."""
    try:
        path.mkdir()
    except FileNotFoundError:
        raise WorkDirNotFound(
            f"cannot make the work dir {path}: its parent {path.parent} does not exist"
        ) from None


def check_work_dir(work_dir: str | os.PathLike[str] | None) -> Path | None:
    """An existing folder, or ``None``; a missing one is refused (a ``ValueError``), not made."""
    if work_dir is None:
        return None
    path = Path(work_dir).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise InvalidArgument(
            f"Output directory {path} {what}; create it first, or pass work_dir=None "
            "for a new temporary one"
        )
    return path


class MarkdownBlockExtractor:
    """AG2 ``CodeExtractor``: fenced blocks of a message (text or content parts), in order.

    Unlike AG2's extractor it accepts ``~~~`` fences, longer fences and fences
    indented inside list items, infers untagged shell blocks, and strips ``$ ``
    prompts from console blocks.
    """

    def extract_code_blocks(self, message: str | Iterable[Any] | None) -> list[Any]:
        coding = _coding()
        return [
            coding.CodeBlock(code=b.code, language=b.language) for b in extract_code_blocks(message)
        ]


class SessionCodeExecutor(contextlib.AbstractContextManager["SessionCodeExecutor"]):
    """Runs an agent's code blocks in one stateful Jupyter session (local or Docker).

    Parameters
    ----------
    work_dir:
        The kernel's working directory, which must exist (default: a new
        temporary directory); files the code writes, saved plots and HTML,
        and the session notebook go there. ``output_dir`` is accepted as
        AG2's name for it.
    environment:
        Where the kernel runs: an :class:`~jupyter_exec.engine.environments.Environment`
        or its string form (``"local"``, ``"venv:.venv"``, ``"docker"``, ...).
    kernel_name:
        A kernelspec to run instead (``"python3"``, ``"ir"``, ...); it must be
        installed. Not together with ``environment``.
    timeout:
        Seconds per code block before it is interrupted (``None``: no limit).
    max_output_chars:
        The text budget of ``CodeResult.output`` per block.
    network:
        A :class:`~jupyter_exec.NetworkPolicy` (or its mapping form,
        ``{"allow": ["pypi.org"]}``) for a Docker ``environment``: the
        hosts the kernel may reach. Refused at once for any other environment.
        A refused connection is named in ``CodeResult.output``.
    rich_output:
        Word ``CodeResult.output`` for a model, as every other jupyter-exec
        front end does (``[image/png saved to plot.png]`` relative to the
        work dir, ``(no output)``, a DataFrame's text beside its saved
        table). The default, ``False``, words it as AG2's own executor does
        (``Image data saved to <absolute path>``, ``HTML data saved to
        <absolute path>``, an empty string when there is no output), so
        code that reads AG2's wording keeps working.
    session_options:
        Anything else :class:`~jupyter_exec.Session` takes (``name``,
        ``notebook``, ``env``, ...).

    As AG2's executor does, it keeps ``timeout``, ``kernel_name`` and
    ``output_dir`` as given (also as ``_timeout``, ``_kernel_name`` and
    ``_output_dir``, the names AG2's tests read); ``work_dir`` is the folder
    as given too, or the temporary one made on first use.

    The session starts on first use and lives until :meth:`close` (or the end
    of a ``with`` block, or interpreter exit). ``restart()`` (called by AG2 when
    an agent is reset) restarts the kernel, clearing its state.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        kernel_name: str | None = None,
        timeout: float | None = 60.0,
        max_output_chars: int = DEFAULT_LLM_CHARS,
        output_dir: str | os.PathLike[str] | None = None,
        network: NetworkPolicy | Mapping[str, Any] | None = None,
        rich_output: bool = False,
        **session_options: Any,
    ) -> None:
        coding = _coding()  # fail now, with the install hint, rather than mid-conversation
        self._result_class: Any = coding.IPythonCodeResult
        if output_dir is not None and work_dir is not None:
            raise InvalidArgument("give work_dir or output_dir (its AG2 name), not both")
        if kernel_name is not None and (environment is not None or network is not None):
            raise InvalidArgument(
                "give environment (and network) or kernel_name, not both: a kernelspec says "
                "where it runs"
            )
        given = work_dir if work_dir is not None else output_dir
        self._work_dir = self._check_dir(given)
        self._given_dir = Path(given) if given is not None else None
        if kernel_name is not None:
            check_kernel_name(kernel_name)
        self.kernel_name = kernel_name
        self.rich_output = rich_output
        self.output_dir = given
        self._output_dir = self._given_dir
        self._timeout = timeout
        self._kernel_name = kernel_name if kernel_name is not None else "python3"
        self.environment = (
            None if kernel_name is not None else parse_environment(environment, network=network)
        )
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self._session_options = session_options
        self._session: Session | None = None
        self._kernels: LanguageKernels | None = None
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
        every block run; ``output_files`` the absolute paths of rich outputs
        saved (plots, HTML, ...) and files written.
        """
        live = self.session.async_session
        if self._kernels is None or self._kernels.session is not live:
            self._kernels = LanguageKernels(live)
        blocks = [to_code_block(b) for b in code_blocks]
        style: Literal["model", "ag2"] = "model" if self.rich_output else "ag2"
        result = run_blocking(
            run_blocks(
                live,
                blocks,
                timeout=self.timeout,
                max_output_chars=self.max_output_chars,
                style=style,
                kernels=self._kernels,
            ),
            on_interrupt=live.interrupt(),
        )
        return self._result_class(
            exit_code=result.exit_code,
            output=result.text,
            output_files=[str(p) for p in result.files],
        )

    def restart(self) -> None:
        """Restart the kernels (Python's, and R's or Deno's if started): state goes, files stay."""
        if self._session is not None:
            self._session.restart()
        if self._kernels is not None:
            run_blocking(self._kernels.restart())

    # -- the session ------------------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The executor's session, started on first use."""
        if self._session is None:
            found = (
                {"kernel_name": self.kernel_name}
                if self.environment is None
                else self.environment.session_options()
            )
            options = adapter_options(found, self._session_options, self.timeout)
            self._session = Session(self._work_dir, **options)
        return self._session

    @property
    def work_dir(self) -> Path:
        """The work dir as given (AG2 keeps it so), else the temporary one the session made."""
        return self._given_dir if self._given_dir is not None else self.session.work_dir

    @staticmethod
    def _check_dir(work_dir: str | os.PathLike[str] | None) -> Path | None:
        return check_work_dir(work_dir)

    def close(self) -> None:
        """Stop the kernels (the work dir and notebooks stay). Idempotent."""
        kernels, self._kernels = self._kernels, None
        if kernels is not None:
            run_blocking(kernels.close())
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SessionCommandLineExecutor(SessionCodeExecutor):
    """Stateless, as AG2's ``LocalCommandLineCodeExecutor`` / ``DockerCommandLineCodeExecutor``.

    Each block is saved in the work dir, under its ``# filename:`` or a name
    derived from its content, and run as a new process in the session's
    environment (this machine, a venv, or the hardened container of
    ``environment="docker"``); nothing stays in memory between blocks. Blocks
    in languages that ``execution_policies`` does not allow (by default all
    but Python and shell) are saved only. Every run is still recorded in the
    session's notebook. Returns AG2's ``CommandLineCodeResult`` (with
    ``code_file``). Switching from AG2's executor is one line::

        executor = SessionCommandLineExecutor(work_dir="out", environment="docker")
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        execution_policies: Mapping[str, bool] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(work_dir, **options)
        self._cli_result_class: Any = _coding().CommandLineCodeResult
        policy = dict(SCRIPT_POLICY)
        for language, allowed in (execution_policies or {}).items():
            policy[normalise_language(language)] = bool(allowed)
        self.execution_policies = policy

    def execute_code_blocks(self, code_blocks: Sequence[Any]) -> Any:
        """Save and run each block as its own process; stop at the first that fails."""
        live = self.session.async_session
        blocks = [to_code_block(b) for b in code_blocks]
        result = run_blocking(
            run_script_blocks(
                live,
                blocks,
                timeout=self.timeout,
                policy=self.execution_policies,
                max_output_chars=self.max_output_chars,
            )
        )
        return self._cli_result_class(
            exit_code=result.exit_code,
            output=result.text,
            code_file=str(result.code_file) if result.code_file is not None else None,
        )

    @staticmethod
    def _check_dir(work_dir: str | os.PathLike[str] | None) -> Path | None:
        """As AG2's command-line executor: a missing folder is made (its parent must exist)."""
        if work_dir is not None and not Path(work_dir).expanduser().exists():
            make_work_dir(Path(work_dir).expanduser())
        return check_work_dir(work_dir)

    def restart(self) -> None:
        """Nothing to restart: every block already runs in a new process (warns, as AG2 does)."""
        warnings.warn(
            "SessionCommandLineExecutor.restart(): each block runs as a new process, so "
            "there is no state to clear. No action is taken.",
            UserWarning,
            stacklevel=2,
        )
