"""Refusals through Jupyter's own routes: a kernel we refuse to start is the client's 4xx.

JupyterLab starts kernels through jupyter_server's ``/api/sessions`` and
``/api/kernels``, whose handlers answer any exception but tornado's
``HTTPError`` with a 500 "Unhandled error". When our Docker provisioner refuses
a kernel on purpose (its folder is reached through a link a kernel planted, an
option is malformed), the request was the thing to fix, and a 500 would say
the server is broken. The one seam every such route shares is the server's
kernel manager's ``start_kernel``; :func:`translate_refusals` wraps it there,
once, so a refusal becomes an ``HTTPError`` with our status and message. The
original exception stays its ``__cause__``, and :mod:`jupyter_exec.server.errors`
unwraps it, so the extension's own routes answer exactly as before.
"""

from __future__ import annotations

import functools
from typing import Any

from jupyter_core.utils import ensure_async
from tornado.web import HTTPError

from jupyter_exec.exceptions import JupyterExecError
from jupyter_exec.server.errors import clip, status_of

__all__ = ["translate_refusals"]

_MARK = "_jupyter_exec_refusals"


def translate_refusals(kernel_manager: Any) -> None:
    """Make ``kernel_manager.start_kernel`` raise our refusals as 4xx ``HTTPError``s."""
    original = kernel_manager.start_kernel
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    async def start_kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            return await ensure_async(original(*args, **kwargs))
        except JupyterExecError as exc:
            status = status_of(exc)
            if status is None or status >= 500:
                raise
            raise HTTPError(status, clip(str(exc))) from exc

    setattr(start_kernel, _MARK, True)
    kernel_manager.start_kernel = start_kernel
