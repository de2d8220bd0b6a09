"""Kernels on many machines, through the gateways Jupyter already has.

One module per concern::

    cluster/
    ├── launcher.py     runs ON EACH HOST (copied there, the host's python, imports nothing from
    │                   jupyter_exec): binds the kernel to the host's address, starts ipykernel
    │                   in a work dir of its own, answers the gateway's listener requests
    ├── provisioner.py  jupyter-exec-distributed: gateway_provisioners' SSH provisioner with
    │                   pinning limited to its hosts, no SSH-less local launches, quoted
    │                   startup commands, restarts that stay on their host
    ├── hosts.py        each host checked over SSH before use; the launcher installed there
    ├── spec.py         the kernelspec the gateway serves
    ├── gateway.py      Kernel Gateway (or Jupyter Server) configured for the hosts, started
    ├── managers.py     the server's kernelspec and kernel managers (only the cluster's spec;
    │                   refusals as 4xx with a reason)
    ├── settings.py     the checked settings of the files below
    ├── deploy.py       Enterprise Gateway, Kubernetes and Helm files (write_deployment)
    └── kube.py         the Kubernetes objects among them (pod template, NetworkPolicy)

``cluster`` may import ``jupyter_exec.exceptions`` and ``boundary``; never ``engine``,
``server`` or ``cli``.
"""
