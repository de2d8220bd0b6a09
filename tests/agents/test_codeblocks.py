"""Code blocks from messages: extraction, ``# filename:``, shell blocks run in the kernel."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from jupyter_exec import Session, StorageError, WorkDirError
from jupyter_exec.agents.codeblocks import (
    CodeBlock,
    cell_source,
    extract_code_blocks,
    filename_directive,
    message_text,
    prepare_block,
    save_block,
)

MESSAGE = """\
First some setup:

```bash
$ pip --version
```

Then the analysis:

```py
# filename: analysis/fit.py
import math
print(math.pi)
```

~~~~
ls -la
~~~~

```
x = 1
```

```json
{"a": 1}
```
"""


def test_blocks_in_order_with_normalised_languages() -> None:
    blocks = extract_code_blocks(MESSAGE)
    assert [b.language for b in blocks] == ["sh", "python", "sh", "python", "json"]
    assert blocks[0].code == "pip --version\n"  # console prompt stripped
    assert blocks[1].filename == "analysis/fit.py"
    assert [b.runnable for b in blocks] == [True, True, True, True, False]


@pytest.mark.parametrize("tag", ["python", "py", "python3", "ipython", "{.python}"])
def test_python_tags(tag: str) -> None:
    assert extract_code_blocks(f"```{tag}\n1\n```")[0].language == "python"


@pytest.mark.parametrize("tag", ["sh", "bash", "shell", "console", "zsh"])
def test_shell_tags(tag: str) -> None:
    assert extract_code_blocks(f"```{tag}\necho 1\n```")[0].language == "sh"


def test_content_parts_are_read_in_order_and_images_skipped() -> None:
    parts = [
        {"type": "text", "text": "```python\na = 1\n```"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "```sh\necho $a\n```"},
    ]
    blocks = extract_code_blocks(parts)
    assert [(b.language, b.code) for b in blocks] == [("python", "a = 1\n"), ("sh", "echo $a\n")]
    assert message_text(None) == ""
    assert extract_code_blocks(None) == []


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("# filename: a.py\nx = 1\n", "a.py"),
        ("\n#filename:sub/b.sh\n", "sub/b.sh"),
        ("#  filename: `c d.txt`\n", "c d.txt"),
        ("x = 1\n# filename: late.py\n", None),
        ("# file name: no.py\n", None),
    ],
)
def test_filename_directive(code: str, name: str | None) -> None:
    assert filename_directive(code) == name


def test_save_block_confined_to_work_dir(tmp_path: Path) -> None:
    block = CodeBlock("# filename: pkg/mod.py\nVALUE = 3", "python", "pkg/mod.py")
    path = save_block(block, tmp_path)
    assert path == tmp_path / "pkg" / "mod.py"
    assert path.read_text() == "# filename: pkg/mod.py\nVALUE = 3\n"
    assert save_block(CodeBlock("1"), tmp_path) is None
    for bad in ("../escape.py", "/etc/passwd", "a/../../escape.py"):
        with pytest.raises(WorkDirError):
            save_block(CodeBlock("x", "python", bad), tmp_path)
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(StorageError) as refused:  # a link is never followed
        save_block(CodeBlock("x", "python", "link/escape.py"), tmp_path)
    assert refused.value.errno == errno.ELOOP
    assert not (tmp_path.parent / "escape.py").exists()


def test_cell_source_runs_shell_through_bash_magic() -> None:
    assert cell_source(CodeBlock("echo hi\n", "sh")) == "%%bash\necho hi\n"
    assert cell_source(CodeBlock("x = 1\n")) == "x = 1\n"


def test_message_blocks_run_in_one_kernel(session: Session) -> None:
    """Shell runs in the kernel's cwd and environment; a saved file is importable next."""
    message = (
        "```python\n# filename: helpers_cb.py\ndef double(v):\n    return 2 * v\n```\n"
        "```sh\nls helpers_cb.py && python -c 'import sys; print(sys.prefix)'\n```\n"
        "```python\nimport helpers_cb\nhelpers_cb.double(21)\n```"
    )
    executions = [
        session.execute(prepare_block(b, session.work_dir)) for b in extract_code_blocks(message)
    ]
    assert [e.status for e in executions] == ["ok", "ok", "ok"]
    assert (session.work_dir / "helpers_cb.py").is_file()
    assert executions[1].stdout.startswith("helpers_cb.py\n")
    assert executions[2].text == "42"


def test_failed_shell_block_is_an_error(session: Session) -> None:
    execution = session.execute(cell_source(CodeBlock("echo partial; exit 4\n", "sh")))
    assert execution.status == "error"
    assert execution.stdout == "partial\n"
    assert execution.error is not None
    assert "exit status 4" in execution.error.evalue


@pytest.mark.parametrize(
    ("first_line", "name"),
    [
        ("# filename: app.py", "app.py"),
        ("# app.py", "app.py"),
        ("# sub/dir/data.csv", "sub/dir/data.csv"),
        ("// filename: main.js", "main.js"),
        ("// main.js", "main.js"),
        ("/* filename: style.css */", "style.css"),
        ("/* style.css */", "style.css"),
        ("<!-- filename: index.html -->", "index.html"),
        ("<!-- index.html -->", "index.html"),
        ("-- query.sql", "query.sql"),
        ("# numpy.random is seeded below", None),
        ("# numpy.random", None),
        ("# %%", None),
        ("# a comment", None),
    ],
)
def test_filename_directive_forms(first_line: str, name: str | None) -> None:
    assert filename_directive(f"{first_line}\nbody\n") == name


def test_fences_indented_in_list_items_are_found_and_dedented() -> None:
    message = (
        "1. Load:\n\n    ```python\n    rows = [1, 2]\n    for r in rows:\n        print(r)\n"
        "    ```\n\n2. Check:\n\n  ~~~bash\n  ls\n  ~~~\n"
    )
    blocks = extract_code_blocks(message)
    assert [b.language for b in blocks] == ["python", "sh"]
    assert blocks[0].code == "rows = [1, 2]\nfor r in rows:\n    print(r)\n"
    assert blocks[1].code == "ls\n"
