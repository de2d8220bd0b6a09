"""A smolagents code executor backed by one stateful jupyter-exec session.

smolagents' ``CodeAgent`` runs each code action through a ``PythonExecutor``;
its remote ones (E2B, Docker, Modal) subclass ``RemotePythonExecutor``, which
sends the agent's tools to the remote interpreter as source, patches
``final_answer`` to raise ``FinalAnswerException`` and asks the subclass only
to run code (``run_code_raise_errors``). :class:`JupyterExecutor` is that
subclass for a Jupyter kernel, local, in a venv or in the hardened container::

    from smolagents import CodeAgent
    from jupyter_exec.integrations.smolagents import JupyterExecutor

    executor = JupyterExecutor(work_dir="analysis", environment="docker")
    agent = CodeAgent(tools=[], model=model, executor=executor,
                      step_callbacks=[executor.show_images])

A thin adapter: every action is run by :func:`jupyter_exec.agents.agent.run_block`,
as for every other front end, so the model reads the same text (outputs in
order, plots named by the file they were saved to, a short traceback, the
timeout) and every action is a cell of the session's notebook. What is
smolagents' own: the answer (``final_answer(x)`` ends the run with ``x``), a
main result that is an image comes back as a ``PIL.Image`` (as
``E2BExecutor`` does), and an error or a timeout is raised as smolagents'
``AgentError``, which the agent shows the model on its next step.

smolagents is imported with this module; without it the module still imports
and making an executor raises
:class:`~jupyter_exec.integrations.MissingDependency` naming the extra
(``jupyter-exec[smolagents]``).
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Any

from jupyter_exec.agents.agent import BlockResult, run_block
from jupyter_exec.agents.codeblocks import CodeBlock
from jupyter_exec.agents.llm import DEFAULT_LLM_CHARS, render
from jupyter_exec.engine.environments import Environment, parse_environment
from jupyter_exec.engine.loop_thread import run_blocking
from jupyter_exec.exceptions import BackendError
from jupyter_exec.integrations import adapter_options, optional_base, require
from jupyter_exec.models import Execution
from jupyter_exec.sync import Session

__all__ = ["JupyterExecutor"]

FINAL_ANSWER = "FinalAnswerException"
"""The exception smolagents' patched ``final_answer`` raises in the kernel to end the run."""


def _remote_executor_base() -> type:
    return optional_base(
        "smolagents.remote_executors", "RemotePythonExecutor", "smolagents", "JupyterExecutor"
    )


def _quiet_logger() -> Any:
    monitoring = require("smolagents.monitoring", "smolagents", "JupyterExecutor")
    return monitoring.AgentLogger(level=monitoring.LogLevel.ERROR)


def _missing_modules(session: Session, names: list[str]) -> list[str]:
    """Those of ``names`` the kernel's interpreter has neither as a module nor as a distribution.

    smolagents names some requirements by distribution (it asks for ``pillow`` where the
    module is ``PIL``), so a name counts as present when it imports or when a distribution
    of that name is installed; either way no ``%pip install`` runs for it (pip's no-op still
    takes seconds, past a short action timeout). Asked of a separate process of that
    interpreter, so the probe is not a cell of the notebook; a remote kernel (no process of
    its own) is asked in a cell.
    """
    probe = (
        "import importlib.metadata as _m, importlib.util as _u\n"
        "def _has(n):\n"
        "    try:\n"
        "        return _u.find_spec(n) is not None or bool(_m.distribution(n))\n"
        "    except (ImportError, ValueError):\n"
        "        return False\n"
        f"print(','.join(n for n in {names!r} if not _has(n)))\n"
        "del _m, _u, _has"
    )
    try:
        script = session.run_script(probe, "python")
    except BackendError:
        execution = session.execute(probe)
        out, ok = execution.stdout, execution.ok
    else:
        script.path.unlink(missing_ok=True)
        out, ok = script.output, script.ok
    return [n for n in out.strip().split(",") if n] if ok else names


class JupyterExecutor(_remote_executor_base()):  # type: ignore[misc]
    """Runs a ``CodeAgent``'s actions in one stateful Jupyter session (a smolagents executor).

    Parameters
    ----------
    additional_imports:
        Modules the agent may import (``CodeAgent(additional_authorized_imports=...)``
        passes them when smolagents makes the executor). Those the kernel cannot
        import are installed with ``%pip install`` when the session starts, as
        smolagents' remote executors do; ``"*"`` and ``"x.*"`` entries are ignored.
    logger:
        A smolagents ``AgentLogger`` (default: one that logs errors only).
    work_dir, environment, timeout, max_output_chars, session_options:
        As for :class:`~jupyter_exec.integrations.ag2.SessionCodeExecutor`:
        the work dir (default: a new temporary one), where the kernel runs
        (``"local"``, ``"venv:.venv"``, ``"docker"``, ...), seconds per action
        before it is interrupted, the text budget per action, and any other
        :class:`~jupyter_exec.Session` option.

    The session starts when the executor is made and stops with
    :meth:`cleanup` (``CodeAgent.cleanup()`` and ``with CodeAgent(...)`` call it).
    """

    def __init__(
        self,
        additional_imports: list[str] | None = None,
        logger: Any = None,
        allow_pickle: bool = False,
        *,
        work_dir: str | os.PathLike[str] | None = None,
        environment: Environment | str | None = None,
        timeout: float | None = 60.0,
        max_output_chars: int = DEFAULT_LLM_CHARS,
        **session_options: Any,
    ) -> None:
        super().__init__(list(additional_imports or []), logger or _quiet_logger(), allow_pickle)
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.last_images: list[Any] = []
        """Images the last action showed or wrote, as ``PIL.Image`` (see :meth:`show_images`)."""
        options = adapter_options(
            parse_environment(environment).session_options(), session_options, timeout
        )
        self.session: Session = Session(work_dir, **options)
        self.installed_packages = self.install_packages(self.additional_imports)

    @property
    def work_dir(self) -> Path:
        return self.session.work_dir

    # -- what RemotePythonExecutor asks of a subclass ----------------------------------------

    def run_code_raise_errors(self, code: str) -> Any:
        """Run ``code`` in the kernel; a ``CodeOutput``, or ``AgentError`` for an error or timeout.

        ``logs`` is the text every jupyter-exec front end shows a model;
        ``output`` the value of the last expression (its ``text/plain``, or a
        ``PIL.Image`` when it is an image), or the value given to
        ``final_answer`` with ``is_final_answer`` set.
        """
        smolagents = require("smolagents", "smolagents", "JupyterExecutor")
        live = self.session.async_session
        block = CodeBlock.from_code(code, "python")
        result: BlockResult = run_blocking(
            run_block(live, block, timeout=self.timeout, max_output_chars=self.max_output_chars),
            on_interrupt=live.interrupt(),
        )
        self.last_images = [_pil_image(data) for data, _fmt in result.images]
        execution = result.execution
        error = execution.error if execution is not None else None
        if execution is not None and error is not None and error.ename == FINAL_ANSWER:
            answer = self._deserialize_final_answer(error.evalue, self.allow_pickle)
            logs = self._logs_before_answer(execution)
            return smolagents.local_python_executor.CodeOutput(
                output=answer, logs=logs, is_final_answer=True
            )
        if result.exit_code != 0:
            raise smolagents.utils.AgentError(result.text, self.logger)
        output = _main_output(execution) if execution is not None else None
        return smolagents.local_python_executor.CodeOutput(
            output=output, logs=result.text, is_final_answer=False
        )

    def _logs_before_answer(self, execution: Execution) -> str:
        """What the action printed before ``final_answer``: the run's text without its signal."""
        outputs = tuple(o for o in execution.outputs if o.get("output_type") != "error")
        quiet = dataclasses.replace(execution, error=None, status="ok", outputs=outputs)
        text = render(
            quiet,
            work_dir=self.work_dir,
            max_chars=self.max_output_chars,
            save_dir=self.session.files_dir,
            network=self.session.async_session.options.network,
        ).text
        return "" if text == "(no output)" else text

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """Install the modules the kernel cannot import yet (quietly, as every front end does)."""
        names = sorted({n.split(".")[0] for n in additional_imports if n and n != "*"})
        if not names or not hasattr(self, "session"):
            return list(additional_imports)
        missing = _missing_modules(self.session, names)
        if missing:
            output = self.run_code_raise_errors(f"%pip install {' '.join(missing)}")
            self.logger.log(output.logs)
        return list(additional_imports)

    # -- images for the model ----------------------------------------------------------------

    def show_images(self, memory_step: Any, agent: Any = None) -> None:
        """A ``CodeAgent`` step callback: the images the step's action produced, shown to the model.

        smolagents shows a model the images of an ``ActionStep``'s
        ``observations_images``; pass ``step_callbacks=[executor.show_images]``
        so plots (``plt.show()``, ``display(img)``, image files the code
        wrote) reach a multimodal model with the observation. The text names
        each saved file either way.
        """
        if getattr(memory_step, "code_action", None) is None or not self.last_images:
            return
        images, self.last_images = self.last_images, []
        memory_step.observations_images = [*(memory_step.observations_images or []), *images]

    # -- the session ---------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Stop the kernel (the work dir and notebook stay). Idempotent."""
        session = getattr(self, "session", None)
        if session is not None:
            session.close()

    def __enter__(self) -> JupyterExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


def _pil_image(data: bytes) -> Any:
    image_module = require("PIL.Image", "smolagents", "JupyterExecutor")
    image = image_module.open(io.BytesIO(data))
    image.load()
    return image


def _main_output(execution: Execution) -> Any:
    """The last expression's value as E2BExecutor returns it: an image, or its text."""
    main = execution.main_result
    if main is None:
        return None
    for mime in ("image/png", "image/jpeg"):
        if mime in main.data:
            return _pil_image(main.data_bytes(mime))
    return main.text
