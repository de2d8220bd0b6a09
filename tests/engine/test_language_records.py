"""Each language's record against the code that reads it, and no language branch outside.

A language is one record (:mod:`jupyter_exec.engine.language_records`); these tests hold
every record to what the package does with it: its names resolve back to it, its
kernelspec is the one sessions start, each capability it claims is one the options, the
Docker backend, the fork check, the agents and the E2B server grant (and each one it
lacks, they refuse). The last test reads the package's source for ``if language ==
"..."`` left outside the records. No kernel is started.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_exec import ForkError, InvalidArgument, SessionOptions
from jupyter_exec.agents.agent import SCRIPT_POLICY
from jupyter_exec.agents.codeblocks import CodeBlock, cell_source
from jupyter_exec.agents.kernels import KERNEL_LANGUAGES, LanguageKernels
from jupyter_exec.cli import kernels as cli_kernels
from jupyter_exec.docker.image import IMAGE_LANGUAGES
from jupyter_exec.e2b import languages as e2b
from jupyter_exec.engine.kernel import KernelHandle
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS, Language, record_of_tag
from jupyter_exec.engine.languages import (
    LANGUAGE_KERNELS,
    LANGUAGES,
    canonical_language,
    install_hint,
    is_default_language,
    kernel_for,
    language_of_kernel,
    language_record,
    normalise_language,
)
from jupyter_exec.engine.scripts import SCRIPT_LANGUAGES, script_of
from jupyter_exec.session import backends
from jupyter_exec.state.forking import check_forkable

RECORDS = list(LANGUAGE_RECORDS.values())
PACKAGE = Path(__file__).resolve().parents[2] / "jupyter_exec"


def _ids(record: Language) -> str:
    return record.name


each = pytest.mark.parametrize("record", RECORDS, ids=_ids)


# -- names ---------------------------------------------------------------------------------


@each
def test_every_name_of_a_language_leads_back_to_its_record(record: Language) -> None:
    assert LANGUAGE_RECORDS[record.name] is record
    assert {record.name, record.tag} <= record.aliases
    for alias in record.aliases:
        assert alias == alias.lower()
        assert normalise_language(alias) == record.tag
        assert normalise_language(alias.upper()) == record.tag
        assert canonical_language(alias) == record.name
        assert language_record(alias) is record
    for name in record.other_names:
        assert canonical_language(name) == record.name
        assert e2b.language_named(name).record is record
    assert record_of_tag(record.tag) is record


def test_no_alias_means_two_languages_and_the_views_follow_the_records() -> None:
    aliases = [alias for record in RECORDS for alias in record.aliases]
    assert len(aliases) == len(set(aliases))
    assert LANGUAGES == ("python", "r", "bash", "javascript", "typescript", "java")
    assert tuple(LANGUAGE_RECORDS) == LANGUAGES
    assert {record.name: record.kernel for record in RECORDS} == LANGUAGE_KERNELS
    assert [record.name for record in RECORDS if record.default] == ["python"]


@each
def test_a_records_labels_are_the_ones_people_read(record: Language) -> None:
    assert record.title
    assert record.label.startswith(record.title)
    if record.kernel_title:
        assert record.label == f"{record.title} ({record.kernel_title})"
    else:
        assert record.label == record.title == "Python"
    assert e2b.LANGUAGES[record.name].label == record.label


# -- kernels -------------------------------------------------------------------------------


@each
def test_a_records_kernel_is_the_one_a_session_starts(record: Language) -> None:
    assert kernel_for(record.name) == record.kernel
    assert SessionOptions(language=record.name).kernel_name == record.kernel
    owner = language_of_kernel(record.kernel)
    assert owner is not None
    assert LANGUAGE_RECORDS[owner].kernel == record.kernel
    assert (owner == record.name) is record.owns_kernel
    assert language_of_kernel("some-kernel", record.spec_language) == owner
    assert backends.language_kernelspec(record.name, "local") == record.kernel
    served = e2b.LANGUAGES[record.name]
    assert served.kernel_name == record.kernel
    assert served.kernel_env == dict(record.kernel_env)


def test_each_kernel_is_owned_by_exactly_one_language() -> None:
    kernels = {record.kernel for record in RECORDS}
    for kernel in kernels:
        owners = [r.name for r in RECORDS if r.kernel == kernel and r.owns_kernel]
        assert len(owners) == 1, (kernel, owners)
    assert language_of_kernel("deno") == "typescript"


@each
def test_a_records_install_hint_is_the_one_the_cli_follows(record: Language) -> None:
    assert install_hint(record.name) == record.install_hint
    if record.bundled:
        with pytest.raises(InvalidArgument, match="comes with jupyter-exec"):
            cli_kernels.install_language(record.name, user=True, prefix=None)
        assert record.install_hint == "pip install ipykernel"
    else:
        assert record.install_hint == f"jupyter-exec kernels install {record.name}"
        assert record.kernel in cli_kernels._INSTALLERS
        with pytest.raises(InvalidArgument) as refused:
            canonical_language("cobol")
        assert f" {record.name}" in str(refused.value).split("kernels install")[-1]


# -- Docker --------------------------------------------------------------------------------


@each
def test_a_records_docker_kernel_is_what_the_backend_runs(record: Language) -> None:
    docker = record.docker
    if docker is None:
        assert record.no_docker_why
        with pytest.raises(InvalidArgument, match=f"{record.title} has no Docker kernel yet"):
            backends.language_kernelspec(record.name, "docker")
        with pytest.raises(InvalidArgument, match="this machine's kernel only"):
            SessionOptions(language=record.name, backend="docker")
        with pytest.raises(InvalidArgument, match="has no Docker kernel"):
            e2b.refuse_language(record.name, backend="docker")
        assert record.name not in IMAGE_LANGUAGES
        return
    assert not record.no_docker_why
    assert backends.language_kernelspec(record.name, "docker") == f"{record.kernel}-docker"
    SessionOptions(language=record.name, backend="docker")
    e2b.refuse_language(record.name, backend="docker")
    if record.owns_kernel:
        spec = backends.docker_kernel_spec({}, record.kernel)
        assert spec.argv == list(docker.argv)
        assert spec.display_name == docker.display_name
        assert spec.interrupt_mode == docker.interrupt_mode
        assert spec.language == record.spec_language
        config = spec.metadata["kernel_provisioner"]["config"]
        assert ("image" in config) is docker.languages_image
    assert (record.name in IMAGE_LANGUAGES) is docker.languages_image


# -- capabilities --------------------------------------------------------------------------


@each
def test_undo_and_python_are_refused_exactly_where_the_record_says(record: Language) -> None:
    if record.undo:
        SessionOptions(language=record.name, undo_steps=1)
    else:
        with pytest.raises(InvalidArgument, match="has no undo"):
            SessionOptions(language=record.name, undo_steps=1)
    if record.interpreter:
        SessionOptions(language=record.name, python=sys.executable)
    else:
        with pytest.raises(InvalidArgument, match="names a Python interpreter"):
            SessionOptions(language=record.name, python=sys.executable)


def _handle(language: str, implementation: str) -> Any:
    """Enough of a local kernel's handle for what is read of it without a kernel."""
    info = {"language_info": {"name": language}, "implementation": implementation}
    fake = SimpleNamespace(
        kernel_info=info,
        spec=None,
        km=SimpleNamespace(transport="ipc", provisioner=SimpleNamespace(process=None)),
    )
    fake.language = KernelHandle.language.fget(fake)  # type: ignore[attr-defined]
    return fake


@each
def test_fork_and_per_cell_state_follow_the_record(record: Language) -> None:
    handle = _handle(record.name, "ipython")
    assert KernelHandle.runs_ipython.fget(handle) is record.cell_state  # type: ignore[attr-defined]
    if record.fork:
        check_forkable(handle)
    else:
        with pytest.raises(ForkError, match="only IPython kernels can be forked"):
            check_forkable(handle)
    late = KernelHandle.late_outputs.fget(_handle(record.name, "x"))  # type: ignore[attr-defined]
    assert late is record.late_outputs


@each
def test_the_agents_run_a_block_where_the_record_says(record: Language) -> None:
    assert LanguageKernels.runs(record.tag) is record.agent_kernel
    for name in record.other_names:
        assert LanguageKernels.runs(name) is (record.agent_kernel and name in KERNEL_LANGUAGES)
    if record.agent_kernel:
        assert KERNEL_LANGUAGES[record.tag] == record.kernel
    source = cell_source(CodeBlock("echo hi\n", record.tag))
    if record.ipython_magic:
        assert source == f"{record.ipython_magic}\necho hi\n"
    else:
        assert source == "echo hi\n"
    if record.script is None:
        assert record.tag not in SCRIPT_LANGUAGES
        assert record.tag not in SCRIPT_POLICY
        with pytest.raises(ValueError, match="use 'python' or 'sh'"):
            script_of(record.tag)
    else:
        assert SCRIPT_LANGUAGES[record.tag] == record.script.suffix == record.suffix
        assert SCRIPT_POLICY[record.tag] is True


@each
def test_the_e2b_environment_cells_are_the_records(record: Language) -> None:
    served = e2b.LANGUAGES[record.name]
    envs = {"JX_ONE": "a 'quoted' value"}
    assert served.set_env_code(envs) == record.env.set_code(envs)
    assert "JX_ONE" in served.set_env_code(envs)
    assert served.restore_env_code(envs) == record.env.restore_code(envs)
    served.check_env(envs)
    startup = served.startup_code(envs)
    assert startup is None or "JX_ONE" in startup
    assert served.startup_code({}) is None


def test_only_bash_refuses_a_name_it_cannot_quote() -> None:
    bad = {"1-not-a-name": "x"}
    for record in RECORDS:
        if record.name == "bash":
            with pytest.raises(InvalidArgument, match="bash context"):
                record.env.check(bad)
            with pytest.raises(InvalidArgument, match="bash context"):
                record.env.set_code(bad)
        else:
            record.env.check(bad)


@pytest.mark.parametrize(
    ("name", "default"), [(None, True), ("python", True), ("py", False), ("r", False), ("", False)]
)
def test_the_default_language_is_named_exactly(name: str | None, default: bool) -> None:
    assert is_default_language(name) is default


# -- no language branch outside the records -----------------------------------------------

OUTSIDE = {PACKAGE / "engine" / "language_records.py", PACKAGE / "engine" / "language_env.py"}
"""The records and their cells: where the languages are named, one by one."""

EXCEPTIONS = {
    ("agents/codeblocks.py", "language == 'sh'"): (
        "a shell transcript's '$ ' prompts come off a fenced sh block: the agents' fence "
        "handling, not the bash language (a bash session runs its code as given)"
    ),
    ("agents/agent.py", "block.language == 'sh'"): (
        "an agent's sh block is rewritten as AG2's command-line executors do (IPython's '!' "
        "lines, quiet pip): the agents' fence handling, not the bash language"
    ),
}
"""Comparisons the scan allows, by file and source, each with why it stays."""


def _named_language(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "language" in name.lower()


def _string_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.Set | ast.List):
        return any(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
    return False


def language_branches(source: str) -> list[str]:
    """Every comparison in ``source`` of a name holding ``language`` with string literals."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_named_language, sides)) and any(map(_string_literal, sides)):
                found.append(ast.unparse(node))
    return found


def test_the_scan_sees_a_language_branch() -> None:
    """The scan below is not vacuous: each shape of branch it looks for is found."""
    source = (
        "if language == 'r': pass\n"
        "if self.language in ('typescript', 'javascript'): pass\n"
        "if 'java' != block.language: pass\n"
        "if language not in {None, 'python'}: pass\n"
        "if language == other or languages is None: pass\n"
    )
    assert len(language_branches(source)) == 4


def test_no_language_branch_is_left_outside_the_records() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in OUTSIDE or "labextension" in path.relative_to(PACKAGE).parts:
            continue
        where = path.relative_to(PACKAGE).as_posix()
        for branch in language_branches(path.read_text(encoding="utf-8")):
            if (where, branch) not in EXCEPTIONS:
                found.append(f"{where}: {branch}")
    assert found == [], "read a field of the language's record (engine/language_records.py)"
