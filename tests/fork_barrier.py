"""A barrier for the tests that the forks of one call start together, not one after another.

Run in the parent before it forks: each child, before it serves, says it is alive (a file
named by its pid in ``folder``) and waits until ``count`` siblings are, then keeps the names
it saw in ``siblings``. Forks started one by one (each waiting for the last to serve) never
see each other: each waits out ``most`` and sees fewer. Nothing is timed; ``most`` only
ends the wait of a child whose siblings never come.
"""

from __future__ import annotations

SIBLINGS_BARRIER = """\
import os, time
def _wait_for_siblings(folder={folder!r}, count={count}, most=60.0):
    open(os.path.join(folder, str(os.getpid())), "w").close()
    end = time.monotonic() + most
    while len(os.listdir(folder)) < count and time.monotonic() < end:
        time.sleep(0.01)
    get_ipython().user_ns["siblings"] = sorted(os.listdir(folder))
os.register_at_fork(after_in_child=_wait_for_siblings)
"""
