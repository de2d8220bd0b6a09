"""``Sandbox.get_metrics()`` through the SDK: one sample of the sandbox's own processes, now."""

from __future__ import annotations

from e2b_code_interpreter import Sandbox
from e2b_server_helpers import Running

HOLD = 300 << 20
"""Bytes a cell keeps alive, well above a bare kernel's own (about 60 MB)."""


def test_metrics_count_the_memory_its_kernel_holds_and_its_files(api_env: Running) -> None:
    sandbox = Sandbox.create()
    other = Sandbox.create()  # busy elsewhere: none of it is counted here
    other.run_code(f"kept = bytearray({HOLD * 2}); kept[::4096] = b'x' * len(kept[::4096])")
    before = sandbox.get_metrics()[-1]
    sandbox.run_code(f"kept = bytearray({HOLD}); kept[::4096] = b'x' * len(kept[::4096])")
    sandbox.files.write("data.bin", b"y" * (4 << 20))

    after = sandbox.get_metrics()[-1]

    assert before.mem_used < 2 * HOLD  # not the other sandbox's 600 MB
    assert after.mem_used >= before.mem_used + HOLD * 0.9
    assert after.mem_total >= after.mem_used
    assert after.disk_used >= 4 << 20
    assert after.disk_total >= after.disk_used
    assert after.cpu_count >= 1
    assert 0 <= after.cpu_used_pct <= 100
    sandbox.kill()
    other.kill()
