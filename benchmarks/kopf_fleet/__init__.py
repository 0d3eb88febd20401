"""kopf 1.45 beside the module's informer, observing the fleet (``benchmarks/bench_kopf_fleet.py``).

Two kinds of observer process keep the same compact facts of every Node (``observe_node`` with
the Catalog's machine-type registry, as ``observe/watches.py`` ``node_watch`` folds them):

- ``informer_observer``: the module's ``Informer`` with ``node_watch``, as the
  manager starts it, and nothing else;
- ``kopf_observer``: kopf with ``@kopf.index('nodes')`` returning the same facts by name, a
  chunked (or streamed) initial list, a field selector on the Gpu, an ``@kopf.on.event`` on the
  Gpu as the reconcile that waits for the index, standalone, posting off.

Each says what it did as JSON lines on its stdout (``report``); ``measure`` runs one of them
against a cluster that already holds the fleet and reads it from outside (/proc, the audit log).
"""
