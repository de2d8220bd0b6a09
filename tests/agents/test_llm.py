"""The model-facing rendering of executions, on real kernel output."""

from __future__ import annotations

from jupyter_exec import Session
from jupyter_exec.agents.llm import EXIT_TIMEOUT, condense_traceback, exit_code, render


def _render(session: Session, code: str, **kwargs: object) -> str:
    execution = session.execute(code)
    return render(
        execution,
        work_dir=session.work_dir,
        save_dir=session.work_dir / f"{session.name}_files",
        **kwargs,  # type: ignore[arg-type]
    ).text


def test_outputs_in_order_ansi_stripped(session: Session) -> None:
    text = _render(
        session,
        "import sys\nprint('\\x1b[31mred\\x1b[0m')\nprint('warn', file=sys.stderr)\n'done'",
    )
    assert text == "red\nwarn\n'done'"


def test_images_and_written_files_named_relative(session: Session) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(); ax.plot([1, 2])\n"
        "fig.savefig('line_llm.png'); open('data_llm.csv', 'w').write('a\\n1\\n'); plt.show()"
    )
    text = _render(session, code)
    assert "[image/png saved to shared_files/cell-" in text
    assert "Files written (relative to the work dir): data_llm.csv, line_llm.png" in text
    assert str(session.work_dir) not in text


def test_budget_cuts_the_middle_and_names_the_full_file(session: Session) -> None:
    execution = session.execute("for i in range(5000): print(f'line {i}')")
    rendered = render(
        execution,
        work_dir=session.work_dir,
        max_chars=1000,
        save_dir=session.work_dir / f"{session.name}_files",
    )
    assert rendered.truncated
    assert rendered.full_output is not None
    assert len(rendered.text) < 1200
    assert rendered.text.startswith("line 0\n")
    assert rendered.text.endswith("line 4999")
    relative = rendered.full_output.relative_to(session.work_dir).as_posix()
    assert f"all of it is in {relative}" in rendered.text
    assert rendered.full_output.read_text().count("\n") == 5000
    # The file holding the full text is not reported as written by the next cell.
    assert "Files written" not in _render(session, "1")


def test_session_spill_is_named(fresh_session) -> None:  # type: ignore[no-untyped-def]
    session = fresh_session(max_output_chars=2000, name="spill")
    execution = session.execute("print('z' * 10_000)")
    assert execution.truncated
    text = render(execution, work_dir=session.work_dir).text
    assert "spill_files/cell-001-stdout.txt" in text


def test_errors_condensed(session: Session) -> None:
    code = "import json\ndef load():\n    return json.loads('{')\nload()"
    text = _render(session, code)
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1].startswith("JSONDecodeError: Expecting property name")
    assert "----> 4 load()" in text
    # Library frames: one line each, no install prefix, no argument list.
    library = [line for line in lines if line.startswith("File json/")]
    assert library
    assert all(", in " in line and "(" not in line for line in library)
    assert "site-packages" not in text
    assert "\x1b[" not in text


def test_deep_tracebacks_elided() -> None:
    frames = ["---", "RecursionError   Traceback (most recent call last)"]
    frames += ["Cell In[1], line 2, in f(n)\n----> 2     return f(n - 1)\n" for _ in range(50)]
    frames += ["RecursionError: maximum recursion depth exceeded"]
    text = condense_traceback(frames, "RecursionError", "maximum recursion depth exceeded")
    assert "... 45 more frames ..." in text
    assert text.count("Cell In[1]") == 5


def test_shell_failure_is_its_exit_status(session: Session) -> None:
    execution = session.execute("%%bash\necho out\nexit 7")
    text = render(execution, work_dir=session.work_dir).text
    assert text == "out\n[the shell command exited with status 7]"
    assert exit_code(execution) == 7


def test_timeout_says_where_it_stopped(fresh_session) -> None:  # type: ignore[no-untyped-def]
    session = fresh_session()
    execution = session.execute("import time\ntime.sleep(30)", timeout=1)
    text = render(execution, work_dir=session.work_dir).text
    assert text.startswith("ExecutionTimeout: the code ran past its 1 s timeout")
    assert "----> 2 time.sleep(30)" in text
    assert exit_code(execution) == EXIT_TIMEOUT


def test_no_output(session: Session) -> None:
    assert _render(session, "y_llm = 1") == "(no output)"


def test_denied_connections_are_named_once_per_host_with_the_policy(session: Session) -> None:
    import dataclasses

    from jupyter_exec import NetworkPolicy
    from jupyter_exec.network import Connection

    policy = NetworkPolicy(allow=["pypi.org", "files.pythonhosted.org"], deny=["*.internal"])
    tried = (
        Connection("pypi.org", 443, "allowed", "allowed by rule 'pypi.org'"),
        Connection("evil.example", 443, "denied", "not in the allow list"),
        Connection("evil.example", 80, "denied", "not in the allow list"),
        Connection("db.internal", 5432, "denied", "denied by rule '*.internal'"),
    )
    execution = dataclasses.replace(session.execute("print('caught it')"), connections=tried)
    text = render(execution, work_dir=session.work_dir, network=policy).text
    rules = "(allowed: pypi.org, files.pythonhosted.org; denied: *.internal)"
    assert text == (
        "caught it\n"
        f"[connection to evil.example:443 denied by the session's network policy {rules}: "
        "not in the allow list]\n"
        f"[connection to db.internal:5432 denied by the session's network policy {rules}: "
        "denied by rule '*.internal']"
    )
    # never cut for output, and without the policy the reason still reaches the model
    flood = dataclasses.replace(session.execute("print('x' * 5000)"), connections=tried[1:2])
    cut = render(flood, max_chars=300).text
    assert "characters of output cut" in cut
    assert cut.endswith(
        "[connection to evil.example:443 denied by the session's network policy: "
        "not in the allow list]"
    )


def test_many_denied_hosts_are_counted() -> None:
    from jupyter_exec.agents.llm import MAX_DENIED_HOSTS, denied_connections
    from jupyter_exec.network import Connection

    tried = [Connection(f"h{i}.example", 443, "denied", "not in the allow list") for i in range(13)]
    lines = denied_connections(tried)
    assert len(lines) == MAX_DENIED_HOSTS + 1
    assert lines[-1] == "... and 3 more hosts denied"
    assert (
        denied_connections([Connection("a.org", 443, "allowed", "allowed by rule 'a.org'")]) == []
    )
