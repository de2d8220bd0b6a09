"""A session's state over time: forks, per-cell undo, checkpoints, recovery after a death.

The host's side (:mod:`.session_state`, :mod:`.api`, :mod:`.branching`,
:mod:`.snapshots`, :mod:`.forking`, :mod:`.checkpoints`, :mod:`.durable`,
:mod:`.recovery`) and the code that runs inside the kernel
(:mod:`.inkernel_fork`, :mod:`.inkernel_state`). It works on a session through
the small protocol in :mod:`.host`, never by importing the session class, so
the engine can use it without an import circle. Trust in what a kernel wrote
to disk is decided by :mod:`jupyter_exec.boundary.trust`.
"""
