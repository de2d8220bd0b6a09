"""The session: a kernel, its record, its per-cell state and its backend, owned in one place.

:class:`~jupyter_exec.AsyncSession` (:mod:`.session`) is the one owner of a kernel: it
starts one (:mod:`.launch`, :mod:`.backends`), runs each cell through the engine and
calls its declared hooks (:mod:`jupyter_exec.engine.hooks`) around it, records it
(:mod:`.recording`, :mod:`.envrecord`), replaces its kernel (:mod:`.kernel_methods`),
puts it to sleep and wakes it (:mod:`.sleep`), resumes it from a notebook
(:mod:`.resume`), and runs a cell to its end for callers who cannot be cancelled
(:mod:`.cancel`). :mod:`.readthrough` declares an attribute that is only an attribute of
what an object holds (``Session.work_dir``: its AsyncSession's) in one typed line.

Above the engine, the Docker backend and the per-cell state (:mod:`jupyter_exec.state`
knows the session only as a protocol); below the replay (:mod:`jupyter_exec.notebook`)
and every front end.
"""
