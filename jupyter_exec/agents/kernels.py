"""The other languages' kernels of an agent's session: one per language, started on first use.

A model fences code as ``r``, ``js``, ``ts`` or ``java`` as readily as ``python``. Such a
block runs in a stateful kernel of its language (IRkernel, Deno, JJava) that sits
beside the session's Python kernel: the same work dir (so files pass between
languages), its own notebook (``<session>-<language>.ipynb``), started the
first time a block of that language comes and stopped with the session.
Shell blocks are not among them: they keep running as ``%%bash`` cells of the
Python kernel, the documented interface of the AG2 executors (AG2 runs ``sh``
blocks as shell commands) and the one that lets ``pip install`` in a shell
block serve the next Python block.

Only kernels on this machine are started: a session whose Python kernel runs
in Docker or on a remote server gets a notice instead, since its image or host
decides which languages it has.
"""

from __future__ import annotations

import asyncio
import contextlib

from jupyter_exec.engine.language_records import LANGUAGE_RECORDS, Language
from jupyter_exec.exceptions import InvalidArgument, JupyterExecError
from jupyter_exec.session.session import AsyncSession

__all__ = ["KERNEL_LANGUAGES", "LanguageKernels"]

_RECORDS: dict[str, Language] = {
    name: record
    for record in LANGUAGE_RECORDS.values()
    if record.agent_kernel
    for name in (record.tag, *record.other_names)
}

KERNEL_LANGUAGES: dict[str, str] = {name: record.kernel for name, record in _RECORDS.items()}
"""A block's language (as :func:`~jupyter_exec.agents.codeblocks.normalise_language`
gives it, or a record's other name: ``js``, ``ts``) -> the kernelspec that runs it. The
one place a fence picks a kernel: the languages whose records say ``agent_kernel``."""


def _key(language: str) -> str:
    """One kernel per kernelspec, named after the first language it runs: ``js``,
    ``javascript``, ``ts`` and ``typescript`` blocks share one Deno kernel, ``javascript``
    (Deno runs both; a value defined in one is there for the next)."""
    kernel = _RECORDS[language].kernel
    return next(r.name for r in LANGUAGE_RECORDS.values() if r.kernel == kernel)


class LanguageKernels:
    """The sibling kernels of ``session``, keyed by language; ``close`` stops them all."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self._kernels: dict[str, AsyncSession] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def runs(language: str) -> bool:
        """Whether a block of ``language`` runs in a kernel of its own here."""
        return language in KERNEL_LANGUAGES

    async def kernel(self, language: str) -> AsyncSession:
        """The kernel for ``language``, started now if it is the first block in it.

        Raises :class:`~jupyter_exec.InvalidArgument` when the session's kernels do not run
        on this machine, and :class:`~jupyter_exec.KernelStartError` when the
        language's kernelspec is not installed (the model is told either).
        """
        if not self.runs(language):
            raise InvalidArgument(f"no kernel runs {language!r} blocks")
        backend = self.session.options.backend
        if backend != "local":
            raise InvalidArgument(
                f"{language} blocks run in a kernel on this machine, and this session's "
                f"kernels run on the {backend!r} backend"
            )
        key = _key(language)
        async with self._lock:
            found = self._kernels.get(key)
            if found is not None and not found.closed:
                return found
            name = f"{self.session.name or 'session'}-{key}"
            made = AsyncSession(
                self.session.work_dir,
                kernel_name=KERNEL_LANGUAGES[language],
                name=name,
                timeout=self.session.timeout,
                env=dict(self.session.options.env) if self.session.options.env else None,
            )
            await made.start()
            for kernel in (self.session, *self._kernels.values()):
                kernel.share_work_dir(made)
                made.share_work_dir(kernel)
            self._kernels[key] = made
            return made

    @property
    def started(self) -> dict[str, AsyncSession]:
        """The kernels started so far, by language."""
        return dict(self._kernels)

    async def restart(self) -> None:
        """Restart every started kernel (their state goes, as the Python kernel's does)."""
        for kernel in list(self._kernels.values()):
            with contextlib.suppress(JupyterExecError):
                await kernel.restart()

    async def close(self) -> None:
        """Stop every started kernel. Idempotent."""
        kernels, self._kernels = list(self._kernels.values()), {}
        for kernel in kernels:
            with contextlib.suppress(JupyterExecError):
                await kernel.close()
