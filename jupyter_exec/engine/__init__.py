"""The engine: one kernel, code in and an ``Execution`` out, and the notebook it is written to.

Owns how a kernel is started and watched (:mod:`.kernel`, :mod:`.core`,
:mod:`.provisioning`, :mod:`.interpreters`, :mod:`.venvs`, :mod:`.environments`), how
one cell runs on it (:mod:`.runner`, :mod:`.receiver`, :mod:`.inflight`, the stream
guard :mod:`.guard` and its in-kernel half :mod:`.inkernel`), how its messages become
nbformat outputs (:mod:`.outputs`, :mod:`.mime`, :mod:`.store`), the per-cell hooks a
session declares (:mod:`.hooks`), and the record itself: the notebook file
(:mod:`.recorder`), what it says of its session and the order its cells ran in
(:mod:`.meta`, :mod:`.runorder`), and the files people give us to run
(:mod:`.sources`).

The lowest layer above the boundary: imports only the public vocabulary (models,
exceptions, options), the boundary and the network policy. The session that ties a
kernel to its state, its record and its backend lives above it, in
:mod:`jupyter_exec.session`.
"""
