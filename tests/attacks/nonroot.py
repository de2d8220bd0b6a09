"""The way to this interpreter and checkout for a non-root user, when root runs the tests.

The interpreter may live where only root can enter (pyenv under ``/root``, mode 0700). A test
that runs the host as another uid (``test_lent_folder_links``), and the CI's second run of
``tests/attacks`` as a non-root user (``scripts/test-attacks-nonroot``), give that uid one POSIX
ACL entry ``user:<uid>:--x`` on each such folder: it may pass through, not list or read.

``python tests/attacks/nonroot.py UID`` does it from a shell (as root).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from jupyter_exec.docker.ownership import _USER, _read_acl, _with_mask, _write_acl  # noqa: E402


def blocking_folders(uid: int) -> list[Path]:
    """Folders on the way to the interpreter and the checkout that ``uid`` cannot enter."""
    targets = [Path(os.path.realpath(sys.executable)), Path(sys.base_prefix), REPO]
    blocking: set[Path] = set()
    for target in targets:
        for folder in [target, *target.parents]:
            if not folder.is_dir():
                continue
            st = folder.stat()
            if st.st_uid != uid and not st.st_mode & 0o001:
                blocking.add(folder)
    return sorted(blocking)


def let_enter(folder: Path, uid: int) -> None:
    """One ACL entry ``user:<uid>:--x`` on ``folder`` (kept: the next run needs it too)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        acl = _read_acl(fd, st.st_mode)
        if any(tag == _USER and ident == uid and perm & 1 for tag, perm, ident in acl):
            return
        entries = [e for e in acl if not (e[0] == _USER and e[2] == uid)]
        _write_acl(fd, _with_mask([*entries, (_USER, 1, uid)]), st.st_mode)
    finally:
        os.close(fd)


def main() -> None:
    uid = int(sys.argv[1])
    for folder in blocking_folders(uid):
        let_enter(folder, uid)
        print(f"uid {uid} may now enter {folder} (ACL user:{uid}:--x)", file=sys.stderr)


if __name__ == "__main__":
    main()
