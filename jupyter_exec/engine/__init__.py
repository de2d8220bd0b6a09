"""The engine: one session, one kernel, code in and an ``Execution`` out.

Owns how a kernel is started and watched (:mod:`.kernel`, :mod:`.launch`,
:mod:`.interpreters`, :mod:`.venvs`, :mod:`.environments`, :mod:`.backends`),
how one cell runs on it (:mod:`.runner`, :mod:`.receiver`, :mod:`.inflight`,
the stream guard :mod:`.guard` and its in-kernel half :mod:`.inkernel`), how
its messages become nbformat outputs (:mod:`.outputs`, :mod:`.mime`), and how
a cell is recorded in the work dir (:mod:`.recording`, :mod:`.store`,
:mod:`.workdir`). :class:`~jupyter_exec.AsyncSession` (:mod:`.session`) ties
them together.

Imports only the public surface's vocabulary (models, exceptions, options),
the boundary, the network policy and the notebook file itself; never a front
end (CLI, servers, agents, MCP) or a manager.
"""
