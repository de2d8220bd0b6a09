"""Network policies for Docker kernels: the policy value, the host-side proxy that enforces it
and the forwarder that is the kernel's only way out. See docs/howto/network.md."""

from jupyter_exec.network.policy import Connection, Decision, NetworkPolicy, NetworkRequest

__all__ = ["Connection", "Decision", "NetworkPolicy", "NetworkRequest"]
