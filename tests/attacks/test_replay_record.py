"""Attacks through a notebook's recorded environment (``metadata.jupyter_exec.environment``).

The record is the notebook's, and anyone (or a Docker kernel writing its own notebook) can
forge it. Replay reads it on the host twice: to hash the input files it names (the work
dir's, for the environment differences) and, with ``--in-recorded-env``, to pin packages for
a venv. A forged record must neither read a file outside the work dir (a hash that matches
would confirm its content: an oracle) nor put an option on pip's command line.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_exec.exceptions import NotebookError
from jupyter_exec.notebook import envdiff


def _record(**changes: Any) -> dict[str, Any]:
    return {
        "interpreter": {"implementation": "CPython", "version": "3.11.7"},
        "packages": {"six": "1.16.0"},
        **changes,
    }


def test_recorded_file_paths_cannot_make_the_host_hash_a_file_outside_the_work_dir(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("PIN 4711\n")
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()  # the attacker's guess, right
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(secret, work / "link.txt")
    (work / "sub").mkdir()
    os.symlink(tmp_path, work / "sub" / "up")
    names = ["../secret.txt", str(secret), "link.txt", "sub/up/secret.txt"]
    record = _record(files=dict.fromkeys(names, digest))
    found = envdiff.differences(record, _record(), work)
    # Every guess is reported unreadable: none was read, so none can confirm the secret.
    assert found == [f"input file {name}: missing or unreadable here" for name in sorted(names)]
    assert secret.read_text() == "PIN 4711\n"


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"packages": {"--index-url=http://evil.example/simple": "1"}}, "package name"),
        ({"packages": {"six": "1.0 --extra-index-url http://evil.example/"}}, "version of six"),
        ({"packages": {"six": "-e git+https://evil.example/x"}}, "version of six"),
        ({"packages": {"six @ https://evil.example/six.whl": "1"}}, "package name"),
        ({"packages": {"-rrequirements.txt": "1"}}, "package name"),
        ({"interpreter": {"version": "3.11 --target /"}}, "Python version"),
        ({"docker_image": {"id": "evil.example/image:latest"}}, "Docker image id"),
    ],
)
def test_a_forged_record_cannot_put_options_on_pips_command_line(
    changes: dict[str, Any], what: str, tmp_path: Path
) -> None:
    with pytest.raises(NotebookError, match=f"invalid {what}"):
        envdiff.recorded_environment(_record(**changes), cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()  # refused before any venv was begun


def test_a_kernel_cannot_swell_its_notebook_through_its_environment_report(
    tmp_path: Path,
) -> None:
    """The kernel answers the per-cell environment question itself: it may lie, at length."""
    from jupyter_exec import Session
    from jupyter_exec.inkernel.env import MODULE
    from jupyter_exec.session.envrecord import MAX_ENTRIES

    forge = (
        "import json, sys\n"
        f"capture = sys.modules[{MODULE!r}]\n"
        "capture.report = lambda: json.dumps({{\n"
        "    'packages': {{f'p{{i}}': '1.0' for i in range({count})}},\n"
        "    'files': {{'x' * 5000: 'y', 'ok.txt': 'z' * 5000, 'fine.txt': 'ab'}},\n"
        "    'interpreter': {{'version': 'v' * {size}, 'extra': {{'nested': 1}}}},\n"
        "}})\n"
    )
    with Session(work_dir=tmp_path, name="liar") as session:
        session.execute("import six")  # an honest first report
        session.execute(forge.format(count=5000, size=10))
        capped = json_metadata(tmp_path / "liar.ipynb")
        session.execute(forge.format(count=10, size=2_000_000))  # over the size limit: ignored
        ignored = json_metadata(tmp_path / "liar.ipynb")
    packages = capped["packages"]
    assert len(packages) == MAX_ENTRIES
    assert "six" in packages  # the honest part survives
    assert capped["files"] == {"fine.txt": "ab"}  # overlong names and values are dropped
    assert capped["interpreter"] == {"version": "v" * 10}
    assert ignored == capped
    assert (tmp_path / "liar.ipynb").stat().st_size < 200_000


def json_metadata(path: Path) -> dict[str, Any]:
    import json

    return dict(json.loads(path.read_text())["metadata"]["jupyter_exec"]["environment"])
