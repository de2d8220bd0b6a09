"""``--allow``, ``--deny`` and ``--network-policy`` on the command line: every bad policy, and
every policy for a kernel it cannot be enforced on, is refused with exit status 2 before any
kernel starts (no work dir made). Run as real subprocesses of ``python -m jupyter_exec``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_exec import InvalidArgument, NetworkPolicy
from jupyter_exec.cli.exits import EXIT_USAGE
from jupyter_exec.cli.policy import load_policy_file, merged
from tests.cli_helpers import run_cli

SECRET = "jx-front-secret-3e1f"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=120, env={**os.environ, **(env or {})})


def _policy(tmp_path: Path, value: object, name: str = "policy.json") -> str:
    path = tmp_path / name
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    path.chmod(0o600)
    return str(path)


BAD_FILES = [
    ('{"allow": ["pypi.org",', "not valid JSON: Expecting value at line 1, column 23"),
    ('["pypi.org"]', "a policy is a JSON object"),
    ('{"allow": "pypi.org"}', "allow must be a list of rules"),
    ('{"allow": ["https://pypi.org"]}', "not a URL"),
    ('{"allow": ["*foo.org"]}', "a wildcard may only be a whole first label"),
    ('{"allow": ["pypi.org:99999"]}', "the port must be a number from 1 to 65535"),
    ('{"allow": [], "proxy": "x"}', "unknown key(s) 'proxy'"),
    ('{"ask": true}', "'ask' is a Python callable"),
    ('{"secrets": {"a.org": {"Authorization": 7}}}', 'must be text or {"env"'),
    (
        '{"secrets": {"a.org": {"Authorization": {"env": "JX_FRONT_UNSET"}}}}',
        "reads $JX_FRONT_UNSET, which is not set",
    ),
    ('{"secrets": {"a.org": {"X": {"env": "HOME", "suffix": "!"}}}}', "unknown key(s) 'suffix'"),
    ('{"secrets": {"a.org": {"Bad Header": "v"}}}', "is not a header name"),
]


@pytest.mark.parametrize(("text", "words"), BAD_FILES)
def test_a_malformed_policy_file_is_refused_before_any_kernel(
    tmp_path: Path, text: str, words: str
) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    work = tmp_path / "work"
    done = _cli(
        "run", str(script), "--backend", "docker", "--network-policy", _policy(tmp_path, text),
        "--work-dir", str(work),
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stderr
    assert words in done.stderr
    assert "policy.json" in done.stderr  # the message names the file
    assert "ran" not in done.stdout
    assert not work.exists()  # nothing started: not even the work dir


def test_missing_file_folder_and_bad_flags(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    missing = _cli("run", str(script), "--backend", "docker", "--network-policy",
                   str(tmp_path / "nope.json"))  # fmt: skip
    assert missing.returncode == EXIT_USAGE
    assert "nope.json: no such file" in missing.stderr
    folder = _cli("run", str(script), "--backend", "docker", "--network-policy", str(tmp_path))
    assert folder.returncode == EXIT_USAGE
    assert "a folder, not a JSON file" in folder.stderr
    bad_rule = _cli("run", str(script), "--backend", "docker", "--allow", "http://x.org/")
    assert bad_rule.returncode == EXIT_USAGE
    assert "--allow/--deny" in bad_rule.stderr
    assert "not a URL" in bad_rule.stderr
    whole = _cli("run", str(script), "--backend", "docker", "--network", "--allow", "x.org")
    assert whole.returncode == EXIT_USAGE
    assert "give one or the other" in whole.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["run", "{script}"],
        ["run", "{script}", "--env", "venv"],
        ["run", "{script}", "--python", sys.executable],
        ["run", "{script}", "--backend", "remote", "--url", "http://127.0.0.1:9"],
        ["demo"],
        ["mcp"],
        ["mcp", "--env", "local"],
        ["e2b", "--port", "0", "--envd-port", "0"],
    ],
)
def test_a_policy_with_a_local_or_remote_kernel_is_refused(
    tmp_path: Path, command: list[str]
) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    args = [part.format(script=script) for part in command]
    work = ["--root-dir" if args[0] == "e2b" else "--work-dir", str(tmp_path / "work")]
    done = _cli(*args, *work, "--allow", "pypi.org")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "a network policy is enforced only for Docker kernels" in done.stderr
    assert "--backend docker" in done.stderr
    assert not (tmp_path / "work").exists()


def test_help_teaches_the_policy_options() -> None:
    for command in ("run", "demo", "mcp", "e2b"):
        out = _cli(command, "--help").stdout
        assert "network policy (Docker kernels)" in out, command
        assert "--allow HOST" in out
        assert "--deny HOST" in out
        assert "--network-policy FILE" in out
        assert "--allow pypi.org --allow files.pythonhosted.org" in out
        assert '{"env": "API_TOKEN", "prefix": "Bearer "}' in out


# -- the file's form, in-process ------------------------------------------------------------


def test_secrets_come_from_the_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JX_FRONT_TOKEN", SECRET)
    path = _policy(
        tmp_path,
        {
            "allow": ["api.example.org", "pypi.org:443"],
            "deny": ["*.internal"],
            "secrets": {
                "api.example.org": {
                    "Authorization": {"env": "JX_FRONT_TOKEN", "prefix": "Bearer "},
                    "X-Team": "data",
                }
            },
        },
    )
    policy = load_policy_file(path)
    assert policy.allow == ("api.example.org", "pypi.org:443")
    assert policy.deny == ("*.internal",)
    assert policy.secrets == {
        "api.example.org": {"Authorization": f"Bearer {SECRET}", "X-Team": "data"}
    }
    assert SECRET not in repr(policy)
    # --allow and --deny add to the file's rules
    both = merged(policy, ["files.pythonhosted.org"], ["evil.example"])
    assert both is not None
    assert both.allow == ("api.example.org", "pypi.org:443", "files.pythonhosted.org")
    assert both.deny == ("*.internal", "evil.example")
    assert both.secrets == policy.secrets
    assert merged(None, [], []) is None
    assert merged(None, ["pypi.org"], []) == NetworkPolicy(allow=["pypi.org"])


def test_errors_never_quote_a_secret(tmp_path: Path) -> None:
    path = _policy(tmp_path, {"secrets": {"a.org": {"Authorization": f"Bearer {SECRET}\n"}}})
    with pytest.raises(InvalidArgument) as refused:
        load_policy_file(path)
    assert "must be text on one line" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_written_secrets_in_a_file_others_can_read_are_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(_policy(tmp_path, {"allow": ["a.org"], "secrets": {"a.org": {"X-Key": SECRET}}}))
    load_policy_file(path)
    assert "warning" not in capsys.readouterr().err  # 0600: private
    path.chmod(0o644)
    load_policy_file(path)
    warned = capsys.readouterr().err
    assert "other users may read it" in warned
    assert SECRET not in warned


def test_the_mcp_registry_pools_kernels_for_a_policy(tmp_path: Path) -> None:
    """Pools are keyed by policy, so a warm pool may hold kernels for one."""
    from jupyter_exec.engine.environments import DockerEnv
    from jupyter_exec.mcp.server import SessionRegistry

    policy = {"allow": ["pypi.org"]}
    assert SessionRegistry(tmp_path, DockerEnv(network=policy), pool_size=1).pool_size == 1
