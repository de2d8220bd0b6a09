"""The session notebook as a record: written, read, replayed, compared and resumed.

:mod:`.recorder` writes the nbformat v4 file atomically; :mod:`.meta` and
:mod:`.runorder` keep what the notebook says about its session and the order
its cells ran in; :mod:`.sources` reads the files people give us to run
(bounded, link-free); :mod:`.replay` re-runs a notebook, :mod:`.judge` and
:mod:`.compare` say whether each cell reproduced, :mod:`.report` tells it;
:mod:`.resume` rebuilds a session's state from its notebook.

Nothing here starts a kernel by itself: replay and resume drive a session.
Never imports a front end or a manager.
"""
