"""A listening socket is ours before its port is announced (boundary/ports.py)."""

from __future__ import annotations

import socket

import pytest

from jupyter_exec.boundary.ports import PortUnavailable, listen


def test_the_socket_listens_before_it_is_returned() -> None:
    with listen("127.0.0.1", 0) as server:
        host, port = server.getsockname()
        with socket.create_connection((host, port), timeout=10):
            accepted, _ = server.accept()  # queued by the kernel: it was listening already
            accepted.close()


def test_a_port_held_by_a_squatter_is_refused_as_taken() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        with pytest.raises(PortUnavailable) as info:
            listen("127.0.0.1", port)
    assert info.value.taken
    assert info.value.port == port
    assert "held by another process" in str(info.value)


def test_an_address_not_on_this_machine_is_refused_with_the_system_reason() -> None:
    with pytest.raises(PortUnavailable) as info:
        listen("192.0.2.1", 0)  # TEST-NET-1: never a local address
    assert not info.value.taken
    assert info.value.reason
