"""Shared fixtures: work dirs, real ipykernel sessions and notebook helpers.

Session tests run real kernels (no mocks of jupyter_client). Tests that only
need a working kernel share one module-scoped ``session``; tests that kill,
restart or time out a kernel take a ``fresh_session`` of their own.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pluggy
import pytest

from jupyter_exec import Session

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The host's checkpoint key (jupyter_exec.boundary.trust): one of the test run's own, never
# the user's; set before anything runs so CLI and server subprocesses inherit it.
_KEY_DIR = Path(tempfile.mkdtemp(prefix="jx-checkpoint-key-"))
os.environ["JUPYTER_EXEC_CHECKPOINT_KEY"] = str(_KEY_DIR / "checkpoint.key")
atexit.register(shutil.rmtree, _KEY_DIR, ignore_errors=True)


def docker_engine() -> Any:
    """A client of the Docker engine (``docker.DockerClient``). Without an engine the test
    is skipped, and fails under ``CI=true``: a suite that silently skips its Docker tests is
    a failing suite."""
    from jupyter_exec.docker.engine import connect
    from jupyter_exec.exceptions import DockerUnavailable

    try:
        return connect()
    except DockerUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true but no Docker engine is available: {exc}", pytrace=False)
        pytest.skip(f"no Docker engine: {exc}")


COUNT_KERNELS = os.environ.get("JUPYTER_EXEC_TEST_COUNT_KERNELS", "") not in ("", "0")
"""Opt-in: ``JUPYTER_EXEC_TEST_COUNT_KERNELS=1`` ends the run with the kernels each test file
started (or restarted) in the test processes, largest first: where sharing one would pay."""
_LAUNCHES = [0, 0]  # kernels launched in this process so far, and at the last report


def _count_kernel_launches() -> None:
    """Count every launch of jupyter_client's kernel managers in this process (local and
    Docker provisioners, restarts, in-process servers; not those of server subprocesses)."""
    from jupyter_client.manager import KernelManager

    launch = KernelManager._async_launch_kernel

    async def counted(self: Any, kernel_cmd: list[str], **kw: Any) -> None:
        _LAUNCHES[0] += 1
        await launch(self, kernel_cmd, **kw)

    KernelManager._async_launch_kernel = counted  # type: ignore[method-assign]


if COUNT_KERNELS:
    _count_kernel_launches()

_LONG_MARKERS = ("browser", "languages")
"""Markers of the end-to-end tests that take seconds each (Chromium and JupyterLab, the R,
Bash, Deno and Java kernels)."""
_DEFAULT_TIMEOUT = 300.0
"""pyproject's ``timeout``: a test that asks for more says it runs long."""


def _runs_long(item: pytest.Item) -> bool:
    """Whether ``item`` is one of the slow end-to-end tests: a marker above, a JupyterLab of its
    own (the ``lab`` fixture), the loopback cluster (sshd hosts, gateways), or a timeout longer
    than the default (the Docker adapters, the wheel build, AG2's venv)."""
    timeout = item.get_closest_marker("timeout")
    return (
        item.nodeid.startswith("tests/cluster/")
        or "lab" in getattr(item, "fixturenames", ())
        or any(item.get_closest_marker(name) for name in _LONG_MARKERS)
        or (
            timeout is not None and bool(timeout.args) and float(timeout.args[0]) > _DEFAULT_TIMEOUT
        )
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadfile`` (``scripts/test``), the longest files first.

    A whole file goes to one xdist worker, so its module-scoped kernels, servers and
    containers start once, not once per worker; the cost is that a long file handed out last
    ends the run with the other worker idle. So the files of the slow end-to-end tests come
    first, then the others by their count of tests, largest first (the order xdist's own
    ``--loadscope-reorder`` would give, which ``scripts/test`` turns off for this one). Any
    other run keeps the order of the files as collected.
    """
    if getattr(config.option, "dist", "no") not in ("loadfile", "loadscope"):
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    ordered = sorted(
        files.values(), key=lambda tests: (not any(map(_runs_long, tests)), -len(tests))
    )
    items[:] = [item for tests in ordered for item in tests]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport]]:
    """Under ``CI=true`` a skipped test fails: CI runs everything (extras, Docker, browser).

    Locally a missing extra or engine skips with its reason; in CI that same
    reason means the set-up is broken, and a suite that silently skips is a
    failing suite. Expected failures (xfail) are not skips and are kept.
    """
    outcome = yield
    report = outcome.get_result()
    if COUNT_KERNELS:  # this phase's launches travel with its report (to the xdist controller)
        report.user_properties.append(("kernel_launches", _LAUNCHES[0] - _LAUNCHES[1]))
        _LAUNCHES[1] = _LAUNCHES[0]
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pluggy.Result[pytest.CollectReport]]:
    """The same for a whole module skipped while collected (``importorskip`` at its top)."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


_FOLDER_TIME: dict[str, list[float]] = {}
"""Seconds spent per test folder (setup, call and teardown), and the count of tests."""
_FILE_TIME: dict[str, list[float]] = {}
"""The same per test file: the costliest files are where sharing a kernel or server pays."""
_FILE_LAUNCHES: dict[str, int] = {}
"""Kernels launched per test file (only with JUPYTER_EXEC_TEST_COUNT_KERNELS=1)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time to its folder (under xdist the controller sees every worker's)."""
    parts = report.nodeid.split("::")[0].split("/")
    folder = "/".join(parts[:2])  # tests/engine, or tests/test_layout.py at the root
    path = report.nodeid.split("::")[0]
    for key, table in ((folder, _FOLDER_TIME), (path, _FILE_TIME)):
        spent = table.setdefault(key, [0.0, 0])
        spent[0] += report.duration
        spent[1] += report.when == "call"
    launched = dict(report.user_properties).get("kernel_launches", 0)
    if isinstance(launched, int) and launched:
        _FILE_LAUNCHES[path] = _FILE_LAUNCHES.get(path, 0) + launched


_COSTLIEST_FILES = 15
"""How many of the costliest test files the summary names."""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The time per folder and the costliest files, largest first: where a run's minutes go,
    in every run's output.

    Summed over workers, so it is test time, not wall time (with two workers about twice the
    wall clock); its use is the proportions, and a folder or file that grows between runs."""
    if COUNT_KERNELS:
        terminalreporter.write_sep("=", "kernels launched per test file (test processes only)")
        for path, count in sorted(_FILE_LAUNCHES.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{count:6d}  {path}")
        terminalreporter.write_line(f"{sum(_FILE_LAUNCHES.values()):6d}  total")
    if len(_FOLDER_TIME) > 1:
        total = sum(t for t, _ in _FOLDER_TIME.values()) or 1.0
        terminalreporter.write_sep("=", "test time per folder (summed over workers)")
        for folder, (seconds, tests_run) in sorted(_FOLDER_TIME.items(), key=lambda kv: -kv[1][0]):
            share = 100 * seconds / total
            terminalreporter.write_line(
                f"{seconds:8.1f}s {share:5.1f}% {tests_run:5.0f} tests  {folder}"
            )
        terminalreporter.write_line(f"{total:8.1f}s total")
    if len(_FILE_TIME) > 1:
        terminalreporter.write_sep("=", f"the {_COSTLIEST_FILES} costliest test files (summed)")
        costliest = sorted(_FILE_TIME.items(), key=lambda kv: -kv[1][0])[:_COSTLIEST_FILES]
        for path, (seconds, tests_run) in costliest:
            terminalreporter.write_line(f"{seconds:8.1f}s {tests_run:5.0f} tests  {path}")


def read_valid_notebook(path: Path) -> nbformat.NotebookNode:
    """Read ``path`` as nbformat v4 and fail the test unless it validates."""
    text = path.read_text(encoding="utf-8")
    json.loads(text)  # well-formed JSON first, for a clear failure
    nb: nbformat.NotebookNode = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    assert nb.nbformat == 4
    nbformat.validate(nb)
    return nb


@pytest.fixture
def read_notebook() -> Callable[[Path], nbformat.NotebookNode]:
    """``read_notebook(path)``: the notebook at ``path``, validated (fails the test if invalid)."""
    return read_valid_notebook


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """An empty work dir of its own for one test (not yet created: the session makes it)."""
    return tmp_path / "work"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """One kernel shared by the tests of a module that need no isolation.

    Tests using it must not kill, restart or leave state that others rely on.
    """
    s = Session(work_dir=tmp_path_factory.mktemp("shared"), name="shared", timeout=60)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def fresh_session(work_dir: Path) -> Iterator[Callable[..., Session]]:
    """``fresh_session(**kwargs)``: a new Session in this test's work dir, closed afterwards."""
    made: list[Session] = []

    def make(**kwargs: Any) -> Session:
        kwargs.setdefault("work_dir", work_dir)
        kwargs.setdefault("timeout", 60)
        s = Session(**kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
