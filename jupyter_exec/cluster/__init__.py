"""Many machines through the gateways Jupyter already has (issue 25).

* :mod:`~jupyter_exec.cluster.deploy` and :mod:`~jupyter_exec.cluster.kube` write the
  Enterprise Gateway, Kubernetes and Helm files for people who run those gateways.
"""
