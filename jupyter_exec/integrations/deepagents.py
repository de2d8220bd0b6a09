"""A Deep Agents sandbox backend: its shell commands and files on a jupyter-exec session.

Deep Agents (``deepagents.create_deep_agent``) gives its model file tools
(``ls``, ``read_file``, ``write_file``, ``edit_file``, ``glob``, ``grep``) and
an ``execute`` shell tool, all served by a backend. Its ``BaseSandbox``
builds every file operation on three primitives: run a shell command, upload
files, download files. :class:`JupyterSandbox` provides them on a
jupyter-exec session, so the agent's shell and files live where the
session's kernel does (this machine, a venv, or the hardened container of
``environment="docker"``)::

    from deepagents import create_deep_agent
    from jupyter_exec.integrations.deepagents import JupyterSandbox

    sandbox = JupyterSandbox(work_dir="agent-work", environment="docker")
    agent = create_deep_agent(model=model, backend=sandbox)

Each command is a new process in the session's environment
(:func:`jupyter_exec.agents.agent.run_command`, shared with the AG2 sandbox), with
the work dir as its current directory, past ``timeout`` killed with exit code
124, and recorded in the session's notebook as a ``%%bash`` cell with its
output. The output is
returned whole, as Deep Agents parses it (its middleware cuts long output for
the model). Uploads and downloads run as one Python process per batch in the
same environment, so absolute paths mean the same thing to them as to the
commands; per-file failures are Deep Agents' standard error names
(``file_not_found``, ``is_directory``, ``permission_denied``,
``invalid_path``).

deepagents is imported with this module; without it the module still imports
and making a sandbox raises
:class:`~jupyter_exec.integrations.MissingDependency` naming the extra
(``jupyter-exec[deepagents]``).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from jupyter_exec.agents.agent import run_command
from jupyter_exec.engine.environments import Environment, parse_environment
from jupyter_exec.engine.loop_thread import run_blocking
from jupyter_exec.integrations import adapter_options, optional_base, require
from jupyter_exec.models import ScriptResult
from jupyter_exec.session.readthrough import ReadThrough
from jupyter_exec.sync import Session

__all__ = ["JupyterSandbox"]

_UPLOAD = """\
import base64, json, os
results = []
for path, data in json.loads(base64.b64decode({payload!r})):
    if not os.path.isabs(path):
        results.append("invalid_path")
        continue
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        results.append(None)
    except IsADirectoryError:
        results.append("is_directory")
    except PermissionError:
        results.append("permission_denied")
    except FileNotFoundError:
        results.append("file_not_found")
    except OSError as exc:
        results.append(str(exc))
print(json.dumps(results))
"""

_DOWNLOAD = """\
import base64, json, os
results = []
for path in json.loads(base64.b64decode({payload!r})):
    if not os.path.isabs(path):
        results.append([None, "invalid_path"])
    elif os.path.isdir(path):
        results.append([None, "is_directory"])
    else:
        try:
            with open(path, "rb") as f:
                results.append([base64.b64encode(f.read()).decode(), None])
        except FileNotFoundError:
            results.append([None, "file_not_found"])
        except PermissionError:
            results.append([None, "permission_denied"])
        except OSError as exc:
            results.append([None, str(exc)])
print(json.dumps(results))
"""


def _sandbox_base() -> type:
    return optional_base(
        "deepagents.backends.sandbox", "BaseSandbox", "deepagents", "JupyterSandbox"
    )


def _protocol() -> Any:
    return require("deepagents.backends.protocol", "deepagents", "JupyterSandbox")


def _payload(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode("ascii")


class JupyterSandbox(_sandbox_base()):  # type: ignore[misc]
    """A Deep Agents ``BaseSandbox`` on one jupyter-exec session.

    ``work_dir`` (default: a new temporary folder) is the commands' current
    directory and holds the session's notebook; ``environment`` says where
    they run (``"local"``, ``"venv:.venv"``, ``"docker"``, ...); ``timeout``
    is the default seconds per command; any other :class:`~jupyter_exec.Session`
    option may be given. :meth:`close` (or ``with``) stops the session.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        environment: Environment | str | None = None,
        timeout: float | None = 120.0,
        **session_options: Any,
    ) -> None:
        super().__init__()
        options = adapter_options(
            parse_environment(environment).session_options(), session_options, timeout
        )
        self.timeout = timeout
        self.session: Session = Session(work_dir, **options)

    id = ReadThrough[str](
        "session.name", "The session's name (its notebook is ``<work dir>/<name>.ipynb``)."
    )
    work_dir = ReadThrough[Path]("session.work_dir")

    def execute(self, command: str, *, timeout: int | None = None) -> Any:
        """Run ``command`` with bash in the session's environment; ``ExecuteResponse``.

        ``timeout`` seconds (``None``: the sandbox's default; ``0``: no limit);
        a command past it is killed and exits 124. Recorded in the notebook.
        """
        limit = self.timeout if timeout is None else (None if timeout == 0 else float(timeout))
        live = self.session.async_session
        result: ScriptResult = run_blocking(run_command(live, command, timeout=limit))
        return _protocol().ExecuteResponse(output=result.output, exit_code=result.exit_code)

    def _python(self, code: str) -> Any:
        """Run a file-transfer helper (not recorded: the agent's commands are); its JSON result."""
        live = self.session.async_session
        result: ScriptResult = run_blocking(live.run_script(code, "python", timeout=self.timeout))
        result.path.unlink(missing_ok=True)
        if result.exit_code != 0:
            return None, result.output.strip() or f"exit code {result.exit_code}"
        return json.loads(result.output.strip().splitlines()[-1]), None

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[Any]:
        """Write each ``(absolute path, bytes)``, making parent folders; per-file errors."""
        protocol = _protocol()
        if not files:
            return []
        items = [[path, base64.b64encode(data).decode("ascii")] for path, data in files]
        errors, failure = self._python(_UPLOAD.format(payload=_payload(items)))
        if failure is not None:
            errors = [failure] * len(files)
        return [
            protocol.FileUploadResponse(path=path, error=error)
            for (path, _data), error in zip(files, errors, strict=True)
        ]

    def download_files(self, paths: list[str]) -> list[Any]:
        """Read each absolute path; per-file errors (``file_not_found``, ``is_directory``, ...)."""
        protocol = _protocol()
        if not paths:
            return []
        found, failure = self._python(_DOWNLOAD.format(payload=_payload(list(paths))))
        if failure is not None:
            found = [[None, failure]] * len(paths)
        return [
            protocol.FileDownloadResponse(
                path=path,
                content=base64.b64decode(data) if data is not None else None,
                error=error,
            )
            for path, (data, error) in zip(paths, found, strict=True)
        ]

    def close(self) -> None:
        """Stop the session (the work dir and notebook stay). Idempotent."""
        self.session.close()

    def __enter__(self) -> JupyterSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
