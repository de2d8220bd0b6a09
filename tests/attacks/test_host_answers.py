"""A cluster host's answers, tried as the attacker: whoever controls a host (or the
interpreter ``--python`` names there) answers the probe of ``jupyter-exec gateway`` with
terminal escape sequences, to retitle the person's terminal, erase the line it is on and
forge "ALL HOSTS OK", or with more than any probe prints.

The defence (:mod:`jupyter_exec.cluster.hosts`, :func:`jupyter_exec.boundary.replies.printable`):
every host-supplied string a person sees is shown escaped, only the packages asked for are
listed, and an answer past :data:`~jupyter_exec.cluster.hosts.MAX_ANSWER_BYTES` is refused.
The real command runs against the loopback cluster (real sshd, real SSH login).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jupyter_exec.cli.exits import EXIT_OK, EXIT_TROUBLE
from jupyter_exec.cluster.hosts import MAX_ANSWER_BYTES
from tests.cluster.conftest import loopback_cluster  # noqa: F401  (the cluster's fixture)
from tests.cluster_gateway import gateway_once
from tests.cluster_hosts import Cluster

FORGED = "\x1b]0;owned\x07\r\x1b[2KALL HOSTS OK\x1b[8m\u202e"
"""Retitle the terminal, go back to the line's start, erase it, print a verdict, hide the
rest, reverse what follows."""
DRIVES_A_TERMINAL = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def hostile_python(folder: Path, stdout: str, stderr: str = "", status: int = 0) -> str:
    """An "interpreter" on the host (the loopback cluster's hosts share this file system)
    that ignores the probe and answers ``stdout`` / ``stderr`` with ``status``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out").write_text(stdout, encoding="utf-8")
    (folder / "err").write_text(stderr, encoding="utf-8")
    script = folder / "python3"
    script.write_text(
        f"#!/bin/sh\ncat {folder}/out\ncat {folder}/err >&2\nexit {status}\n", encoding="utf-8"
    )
    script.chmod(0o700)
    return str(script)


def run(cluster: Cluster, python: str) -> subprocess.CompletedProcess[str]:
    return gateway_once(
        cluster, "--allow-this-machine", "--check-only", "--python", python, hosts=cluster.hosts[0]
    )


def assert_nothing_drives_the_terminal(done: subprocess.CompletedProcess[str]) -> None:
    for stream in (done.stdout, done.stderr):
        for char in DRIVES_A_TERMINAL:
            assert char not in stream, (char, stream)
    assert "Traceback" not in done.stderr


def test_a_probe_answer_with_escape_sequences_is_printed_escaped(
    loopback_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    answer = {
        "version": [3, 11, 0],
        "executable": f"/usr/bin/python3{FORGED}",
        "found": {
            "ipykernel": f"6.29{FORGED}",
            "jupyter_client": "8.6",
            "pyzmq": "26.0",
            "cryptography": "42.0",
            f"{FORGED}evil": "1",  # a package nobody asked about: not listed at all
        },
    }
    done = run(loopback_cluster, hostile_python(tmp_path / "probe", json.dumps(answer) + "\n"))
    assert done.returncode == EXIT_OK, done.stderr
    assert_nothing_drives_the_terminal(done)
    (line,) = [line for line in done.stdout.splitlines() if "  ok  " in line]
    assert "/usr/bin/python3\\x1b]0;owned\\x07\\x0d\\x1b[2KALL HOSTS OK" in line
    assert "ipykernel 6.29\\x1b]0;owned" in line
    assert "evil" not in line
    assert done.stdout.count("\n") == 2  # the host's line and "1 host(s) ready", no forged one


def test_an_error_answer_with_escape_sequences_is_printed_escaped(
    loopback_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    python = hostile_python(tmp_path / "fails", "", f"boom{FORGED}\n{FORGED}\n", status=3)
    done = run(loopback_cluster, python)
    assert done.returncode == EXIT_TROUBLE, (done.stdout, done.stderr)
    assert_nothing_drives_the_terminal(done)
    error = done.stderr.strip().splitlines()[-1]
    assert "did not run (exit status 3)" in error
    assert "\\x1b]0;owned\\x07" in error
    assert "\\x1b[2KALL HOSTS OK" in error
    assert "  ok  " not in done.stdout


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_probe_answer_past_the_limit_is_refused_unread(
    stream: str,
    loopback_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    flood = "x" * (MAX_ANSWER_BYTES * 4) + "\n"
    if stream == "stdout":
        python = hostile_python(tmp_path / "flood", flood)
    else:
        python = hostile_python(tmp_path / "flood", "{}\n", flood)
    done = run(loopback_cluster, python)
    assert done.returncode == EXIT_TROUBLE, (done.stdout, done.stderr)
    assert f"printed more than {MAX_ANSWER_BYTES} bytes" in done.stderr
    assert "x" * 1000 not in done.stderr
    assert "  ok  " not in done.stdout
