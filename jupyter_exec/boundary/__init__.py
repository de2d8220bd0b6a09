"""The boundary between kernels and the host: where every such decision is taken, once.

* :mod:`.paths` - the one resolver for every path a client, a notebook or a
  kernel-writable folder supplies: component by component, no link followed,
  nothing outside its root; bounded reads that never open a FIFO or a device.
* :mod:`.trust` - the host's checkpoint key, the manifest's MAC and the origin
  rule: what a Docker kernel wrote is never unpickled on the host unasked.
* :mod:`.naming` - names of sessions and the files derived from them.
* :mod:`.folders` - the folders live sessions hold: no folder is shared across
  a trust line (a Docker or remote kernel's and a local one's).
* :mod:`.claims` - one owner across processes for a file a run writes (a replay's
  output notebook and so its run folder): a lock file beside it, taken over when its
  owner died, never followed.
* :mod:`.replies` - every answer a kernel or a host sends, bounded before it is
  parsed (the key asked for, its raw length, one str of JSON, never ``literal_eval``),
  and every string of theirs a person sees, made printable.

The network boundary (secrets, hosts, addresses) is :mod:`jupyter_exec.network`;
each server's per-route authentication is its own route table
(:mod:`jupyter_exec.e2b.auth`, the REST handlers' base class, the MCP gate).
This package imports only the error tree: every other layer may use it.
See docs/security.md.
"""
