"""The public surface: ``jupyter_exec.__all__`` is the whole API, pinned here."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import jupyter_exec
from jupyter_exec import (
    AsyncSession,
    BackendError,
    DockerUnavailable,
    ExecutionError,
    ExecutionTimeout,
    ForkError,
    ImageError,
    InvalidArgument,
    JupyterExecError,
    KernelDiedError,
    KernelError,
    KernelNotAliveError,
    KernelStartError,
    MissingDependency,
    NotebookError,
    RemoteError,
    RemoteNotFound,
    ServerRefused,
    Session,
    SessionClosedError,
    SessionConflict,
    SessionNotFound,
    StorageError,
    WorkDirError,
)

PUBLIC = {
    "StorageError",
    "SessionConflict",
    "ServerRefused",
    "RemoteNotFound",
    "RemoteError",
    "MissingDependency",
    "NetworkPolicy",
    "InvalidArgument",
    "AsyncSession",
    "AsyncSessionManager",
    "BackendError",
    "CellError",
    "CellResult",
    "Checkpoint",
    "DockerUnavailable",
    "Execution",
    "ExecutionError",
    "ExecutionTimeout",
    "ForkError",
    "ImageError",
    "JupyterExecError",
    "KernelDiedError",
    "KernelError",
    "KernelNotAliveError",
    "KernelStartError",
    "NotebookError",
    "ReplayReport",
    "Result",
    "ScriptResult",
    "Session",
    "SessionClosedError",
    "SessionInfo",
    "SessionLimitError",
    "SessionManager",
    "SessionNotFound",
    "SessionOptions",
    "WorkDirError",
    "__version__",
    "replay",
    "replay_async",
    "CheckpointError",
    "StateRecovery",
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(jupyter_exec.__all__) == PUBLIC
    assert len(jupyter_exec.__all__) == len(PUBLIC)  # no duplicates
    assert sorted(jupyter_exec.__all__) == jupyter_exec.__all__


def test_no_other_public_names_leak_from_the_package() -> None:
    public = {
        name
        for name, value in vars(jupyter_exec).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public <= PUBLIC


def test_version_is_a_string() -> None:
    assert isinstance(jupyter_exec.__version__, str)
    assert jupyter_exec.__version__[0].isdigit()


FUNCTIONS = {"replay", "replay_async"}


@pytest.mark.parametrize("name", sorted(PUBLIC - {"__version__"} - FUNCTIONS))
def test_public_classes_say_jupyter_exec_in_reprs(name: str) -> None:
    obj = getattr(jupyter_exec, name)
    assert isinstance(obj, type)
    assert obj.__module__ == "jupyter_exec"
    assert repr(obj) == f"<class 'jupyter_exec.{name}'>"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_public_functions_say_jupyter_exec(name: str) -> None:
    obj = getattr(jupyter_exec, name)
    assert callable(obj)
    assert obj.__module__ == "jupyter_exec"
    assert obj.__qualname__ == name


def test_exception_tree() -> None:
    tree: dict[type[BaseException], type[BaseException]] = {
        KernelError: JupyterExecError,
        KernelStartError: KernelError,
        KernelDiedError: KernelError,
        KernelNotAliveError: KernelError,
        ExecutionError: JupyterExecError,
        ExecutionTimeout: JupyterExecError,
        SessionClosedError: JupyterExecError,
        SessionNotFound: JupyterExecError,
        NotebookError: JupyterExecError,
        WorkDirError: JupyterExecError,
        BackendError: JupyterExecError,
        DockerUnavailable: BackendError,
        ImageError: BackendError,
        RemoteError: BackendError,
        RemoteNotFound: RemoteError,
        ServerRefused: RemoteError,
        InvalidArgument: JupyterExecError,
        MissingDependency: JupyterExecError,
        SessionConflict: JupyterExecError,
        StorageError: JupyterExecError,
    }
    for child, parent in tree.items():
        assert issubclass(child, parent), (child, parent)
    assert issubclass(JupyterExecError, Exception)
    assert issubclass(ExecutionTimeout, TimeoutError)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(MissingDependency, ImportError)
    assert issubclass(StorageError, OSError)
    assert issubclass(SessionNotFound, KeyError)
    assert not issubclass(ExecutionError, KernelError)


@pytest.mark.parametrize(
    "cls", [ExecutionError, ExecutionTimeout, KernelDiedError, NotebookError, SessionClosedError]
)
def test_errors_from_raise_for_error_carry_the_execution(cls: type[Any]) -> None:
    sentinel = object()
    err = cls("boom", sentinel)
    assert err.execution is sentinel
    assert str(err) == "boom"
    assert cls("no execution").execution is None


def test_storage_error_keeps_the_os_reason_and_the_execution() -> None:
    sentinel = object()
    err = StorageError("disk full writing out.png", errno=28, execution=sentinel)  # type: ignore[arg-type]
    assert err.errno == 28
    assert err.execution is sentinel
    assert str(err) == "disk full writing out.png"


def _params(func: Any) -> list[tuple[str, Any]]:
    sig = inspect.signature(func)
    return [
        (p.name, p.default)
        for p in sig.parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]


@pytest.mark.parametrize("cls", [Session, AsyncSession])
def test_session_constructor_signature(cls: type[Any]) -> None:
    positional = _params(cls.__init__)
    names = [name for name, _ in positional]
    assert names == ["work_dir", "kernel_name", "python", "notebook", "name", "timeout"]
    defaults = dict(positional)
    assert defaults["work_dir"] is None
    assert defaults["kernel_name"] == "python3"
    assert defaults["python"] is None
    assert defaults["notebook"] is None
    assert defaults["name"] is None
    assert defaults["timeout"] is None or defaults["timeout"] > 0


@pytest.mark.parametrize("cls", [Session, AsyncSession])
def test_execute_signature(cls: type[Any]) -> None:
    assert _params(cls.execute) == [
        ("code", inspect.Parameter.empty),
        ("timeout", None),
        ("on_output", None),
    ]


def test_async_session_methods_are_coroutines_and_session_methods_are_not() -> None:
    for method in ("execute", "interrupt", "restart", "close", "fork", "undo"):
        assert inspect.iscoroutinefunction(getattr(AsyncSession, method)), method
        assert callable(getattr(Session, method))
        assert not inspect.iscoroutinefunction(getattr(Session, method)), method


@pytest.mark.parametrize("cls", [Session, AsyncSession])
def test_session_properties(cls: type[Any]) -> None:
    for prop in ("work_dir", "notebook_path", "kernel_id", "is_alive"):
        assert isinstance(inspect.getattr_static(cls, prop), property), prop


@pytest.mark.parametrize("cls", [Session, AsyncSession])
def test_sessions_are_context_managers(cls: type[Any]) -> None:
    if cls is Session:
        assert hasattr(cls, "__enter__")
        assert hasattr(cls, "__exit__")
    else:
        assert hasattr(cls, "__aenter__")
        assert hasattr(cls, "__aexit__")


def test_invalid_arguments_are_refused_before_any_kernel_starts() -> None:
    with pytest.raises(InvalidArgument, match="session name"):
        AsyncSession(name="../escape")
    with pytest.raises(ValueError, match="unknown backend"):
        AsyncSession(backend="nowhere")  # type: ignore[arg-type]


def test_session_options_are_the_sessions_keyword_arguments() -> None:
    """Every option is a keyword of both sessions, and every keyword is an option."""
    from jupyter_exec import SessionOptions
    from jupyter_exec.options import option_fields

    names = {f.name for f in option_fields()}
    for cls in (Session, AsyncSession):
        params = set(inspect.signature(cls.__init__).parameters) - {"self", "options", "start"}
        assert params == names, cls
    assert all(f.help for f in option_fields())
    options = SessionOptions(timeout=5, name="a")
    assert AsyncSession(options=options).options == options
    assert AsyncSession(options=options, timeout=7).options.timeout == 7


@pytest.mark.parametrize("cls", [Session, AsyncSession])
def test_state_methods(cls: type[Any]) -> None:
    """fork, undo, checkpoint, restore and checkpoints are part of the contract."""
    assert _params(cls.fork) == [("n", 1), ("name", None)]
    assert _params(cls.undo) == [("n", 1)]
    assert _params(cls.checkpoint) == [("name", None)]
    assert _params(cls.restore) == [("checkpoint", inspect.Parameter.empty)]
    assert inspect.signature(cls.restore).parameters["force"].default is False
    assert _params(cls.checkpoints) == []
    for method in ("checkpoint", "restore"):
        assert inspect.iscoroutinefunction(getattr(cls, method)) is (cls is AsyncSession)
    assert not inspect.iscoroutinefunction(cls.checkpoints)


def test_checkpoint_and_fork_error() -> None:
    import dataclasses

    assert issubclass(ForkError, KernelError)
    fields = [f.name for f in dataclasses.fields(jupyter_exec.Checkpoint)]
    assert fields[:4] == ["name", "cell_index", "created", "session"]
    assert fields[4:] == [
        "path",
        "names",
        "skipped",
        "size",
        "automatic",
        "environment",
        "origin",
        "digest",
    ]
    assert issubclass(jupyter_exec.CheckpointError, jupyter_exec.JupyterExecError)
