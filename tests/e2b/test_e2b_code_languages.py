"""``run_code(language=...)`` and ``create_code_context(language=...)`` through the real E2B SDK.

R (IRkernel), JavaScript and TypeScript (Deno) and bash (bash_kernel) run in
real kernels whose kernelspecs the module installs into a temporary
``JUPYTER_PATH`` (:mod:`tests.language_kernels`); Java (JJava) in the one
``jupyter-exec kernels install java`` installed. Each language's default
context is a kernel of its own that keeps its state; ``envs=`` holds for one
execution in each language. JavaScript's values are read back from a file its
cell writes, never from the cell's outputs: Deno may send a cell's stdout and
result after the cell's idle status (its own race between its stdio task and
its reply, denoland/deno#20337), so a test that waited for them would depend on
timing.
"""

from __future__ import annotations

import pytest
from e2b.exceptions import SandboxException
from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

from jupyter_exec.e2b.languages import Language, check_installed
from jupyter_exec.exceptions import InvalidArgument
from tests.language_kernels import language_kernels  # noqa: F401

pytestmark = [
    pytest.mark.languages,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("language_kernels"),
    # bash_kernel's installer writes a "codemirror_mode" key that jupyter_client's KernelSpec
    # warns about (a DeprecationWarning of traitlets) each time it reads the kernelspec.
    pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning"),
]


def test_each_language_keeps_its_own_state_in_its_default_context(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    assert sandbox.run_code("x <- 21", language="r").error is None
    assert sandbox.run_code("x * 2", language="r").results[0].text == "[1] 42"
    assert sandbox.run_code("let a = 20", language="js").error is None
    sandbox.run_code("Deno.writeTextFileSync('a.txt', String(a + 1))", language="javascript")
    assert sandbox.files.read("a.txt") == "21"
    sandbox.run_code("const m: number = 3", language="ts")
    sandbox.run_code("Deno.writeTextFileSync('m.txt', String(m * 2))", language="typescript")
    assert sandbox.files.read("m.txt") == "6"
    sandbox.run_code("X=5", language="bash")
    assert "".join(sandbox.run_code("echo $((X * 2))", language="bash").logs.stdout) == "10\n"
    python = sandbox.run_code("x")  # R's x is not Python's
    assert python.error is not None
    assert python.error.name == "NameError"


def test_envs_hold_for_one_execution_in_every_language(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    value = 'it\'s "$(quoted)" `x`'
    read = "Deno.writeTextFileSync('{0}', process.env.E2B_LANG ?? 'gone')"
    sandbox.run_code(read.format("during.txt"), language="js", envs={"E2B_LANG": value})
    sandbox.run_code(read.format("after.txt"), language="js")
    assert (sandbox.files.read("during.txt"), sandbox.files.read("after.txt")) == (value, "gone")
    during = sandbox.run_code('echo "$E2B_LANG"', language="bash", envs={"E2B_LANG": value})
    assert "".join(during.logs.stdout) == value + "\n"
    later = sandbox.run_code("echo ${E2B_LANG:-gone}", language="bash")
    assert "".join(later.logs.stdout) == "gone\n"
    read_r = "cat(Sys.getenv('E2B_LANG', unset = 'gone'))"
    during = sandbox.run_code(read_r, language="r", envs={"E2B_LANG": value})
    assert "".join(during.logs.stdout) == value
    assert "".join(sandbox.run_code(read_r, language="r").logs.stdout) == "gone"


def test_a_context_of_another_language_is_its_own_kernel(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    context = sandbox.create_code_context(language="r")
    assert context.language == "r"
    sandbox.run_code("y <- 2", context=context)
    assert sandbox.run_code("y + 1", context=context).results[0].text == "[1] 3"
    default_r = sandbox.run_code("exists('y')", language="r")
    assert default_r.results[0].text == "[1] FALSE"
    listed = {(c.id, c.language) for c in sandbox.list_code_contexts()}
    assert (context.id, "r") in listed
    assert {"python", "javascript"} <= {language for _, language in listed}
    sandbox.remove_code_context(context.id)
    assert context.id not in {c.id for c in sandbox.list_code_contexts()}


def test_an_r_plot_is_a_png_result(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    execution = sandbox.run_code("plot(1:3)", language="r")
    assert execution.error is None
    assert any(result.png for result in execution.results)


def test_an_r_error_is_the_executions_error(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    execution = sandbox.run_code("stop('boom')", language="r")
    assert execution.error is not None
    assert "boom" in execution.error.value


def test_java_keeps_its_state_and_takes_envs_as_system_properties(debug_env: Running) -> None:
    sandbox = Sandbox.create()
    assert sandbox.run_code("int k = 6;", language="java").error is None
    said = sandbox.run_code('System.out.println("k=" + (k * 7))', language="java")
    assert "".join(said.logs.stdout) == "k=42\n"
    value = 'it\'s "$(quoted)" \\u0022 `x`'
    during = sandbox.run_code(
        'System.getProperty("E2B_LANG")', language="java", envs={"E2B_LANG": value}
    )
    assert during.text == value
    after = sandbox.run_code('System.getProperty("E2B_LANG", "gone")', language="java")
    assert after.text == "gone"
    with pytest.raises(SandboxException, match=r"400.*does not run .cobol."):
        sandbox.create_code_context(language="cobol")


def test_a_language_whose_kernel_is_not_installed_is_refused_naming_it() -> None:
    missing = Language("r", "no-such-kernelspec-here", "R (IRkernel)")
    with pytest.raises(InvalidArgument, match="no kernelspec 'no-such-kernelspec-here'"):
        check_installed(missing)
