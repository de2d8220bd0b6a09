"""Attacks on the agents' language fences: a model's fence picking a kernel it should not.

A model (or text it was fed) fences a block with the name of a kernelspec the
attacker planted on the kernel search path, or with a path to one. Only the
fixed table of :mod:`jupyter_exec.agents.kernels` turns a fence into a
kernelspec, so no such block starts a kernel: it is refused (or saved, when it
names a file), and the planted kernel's marker never appears.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

coding = pytest.importorskip("autogen.coding.base")

from jupyter_exec.integrations.ag2 import SessionCodeExecutor  # noqa: E402
from tests.language_kernels import language_kernels  # noqa: E402, F401

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning"),
]


# ("ir" and "deno" are aliases of R and TypeScript: they go through the table, to its kernels)
@pytest.mark.parametrize("fence", ["evil", "../evil", "kernels/evil", "evil/../ir", "bash_kernel"])
def test_a_fence_naming_a_planted_kernelspec_starts_no_kernel(
    language_kernels: Path,  # noqa: F811
    tmp_path: Path,
    fence: str,
) -> None:
    marker = tmp_path / "evil-ran"
    spec = language_kernels / "kernels" / "evil"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w')", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "e", "language": "e"})
    )
    work = tmp_path / "work"
    work.mkdir()
    with SessionCodeExecutor(work, timeout=60) as executor:
        result = executor.execute_code_blocks([coding.CodeBlock(code="1 + 1", language=fence)])
        assert result.exit_code == 1
        assert "cannot be run" in result.output
        assert executor._kernels is None or executor._kernels.started == {}
    assert not marker.exists()
