"""The session notebook replayed, compared and explained.

:mod:`.replay` re-runs a notebook in a fresh copy of its inputs (:mod:`.inputs`),
:mod:`.judge` and :mod:`.compare` say whether each cell reproduced (with the meaning
rules of :mod:`.reprs`, :mod:`.images` and the masks), :mod:`.report` and
:mod:`.htmlreport` tell it. The notebook file itself (writing, reading, its metadata)
is the engine's record (:mod:`jupyter_exec.engine.recorder`); resuming a session from
it is the session's (:mod:`jupyter_exec.session.resume`).

Drives sessions, never a kernel by itself; never imports a front end or a manager.
"""
