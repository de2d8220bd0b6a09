"""Docker kernels: a jupyter_client provisioner that runs ipykernel in a hardened container.

Modules, inner to outer: ``options`` (pure: options -> ``containers.run`` arguments),
``ownership`` (which uid; lending a root-owned work dir), ``engine`` (connecting, error
translation), ``image`` (building the kernel image), ``reap`` (labels, orphans), ``watcher``
(death and its cause), ``execcmd`` (one-off commands), ``config`` (the provisioner's traits),
``rundir`` (run dir and connection files), ``netproxy`` (a network policy's proxy in the
container), ``launch`` (env, run spec, starting the container), ``provisioner``
(``DockerProvisioner``, registered as the ``jupyter-exec-docker`` kernel provisioner) and ``cli``.

Importing this package imports no Docker code, so ``import jupyter_exec`` stays cheap.
"""

from __future__ import annotations

__all__ = ["PROVISIONER_NAME"]

#: The entry-point name kernelspecs use in ``metadata.kernel_provisioner.provisioner_name``.
PROVISIONER_NAME = "jupyter-exec-docker"
