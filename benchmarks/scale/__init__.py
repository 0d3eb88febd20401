"""Scale fleets and load for the local cluster, and the measurements of the operator at scale.

Shared by ``benchmarks/bench_scale.py`` (``make bench-scale``: 1,000, 5,000 and 20,000 nodes),
``benchmarks/profile_start.py`` and ``tests/e2e/test_scale_smoke.py`` (300 nodes, generous
bounds), so all measure the same way. The local cluster itself comes from ``tests.harness``.

Modules: ``common`` (plain HTTPS, ``Rest``), ``fleet`` (the Nodes, pods and their creation),
``process`` (the operator process, its log, audit log, watches, heartbeats), ``measure`` (the
measurements).

Fleet: Nodes shaped like Gardener AWS worker nodes (``scale_node``): realistic labels,
annotations, providerID, nodeInfo, capacity and 40 ``status.images`` entries, about 12 kB of
JSON each; a fraction are g6.xlarge GPU nodes (``nvidia.com/gpu: 1``, NFD's pci-10de label).
Pods: ordinary bare pods (``scale_pod``, no GPU) in a few namespaces, placed by the scheduler,
made Running by kwok. Heartbeats: ``Heartbeats`` patches ``status.conditions[].lastHeartbeatTime``
of the Nodes round robin at a fixed rate, as kubelets do every 5 minutes (5,000 nodes / 300 s is
about 17/s).

Everything bulk goes through ``Rest``: plain HTTPS with one keep-alive connection per thread and
JSON bodies, not the kubernetes client's models, so that creating 5,000 Nodes costs the API
server rather than this process. Its user agent (``scale-bench``) is never counted as an
operator write.

Measurements (``measure_operator``): the operator runs as a process (``Operator``) with
``PYTHONPATH=<operator_root>/operator``, so an older source tree (a ``git worktree``) can be
measured the same way. Its writes come from the API server's audit log (user agent ``kopf`` or
``kyma-gpu``), its first reconcile from its log line ``reconciled: phase=`` or its first write
as ``kyma-gpu`` (kopf's finalizer on a new Gpu is no reconcile), whichever comes first; CPU
and memory from ``/proc/<pid>``.
"""

from benchmarks.scale.common import GPU_PATH, METADATA, TIMEOUT, ApiError, Metric, Rest
from benchmarks.scale.fleet import (
    Fleet,
    ScaleConfig,
    build_fleet,
    is_gpu_index,
    node_name,
    scale_node,
    scale_pod,
    teardown_fleet,
)
from benchmarks.scale.measure import Session, measure_operator
from benchmarks.scale.process import AuditTail, Heartbeats, LineTail, ObjectWatch, Operator, Write

__all__ = [
    "GPU_PATH",
    "METADATA",
    "TIMEOUT",
    "ApiError",
    "AuditTail",
    "Fleet",
    "Heartbeats",
    "LineTail",
    "Metric",
    "ObjectWatch",
    "Operator",
    "Rest",
    "ScaleConfig",
    "Session",
    "Write",
    "build_fleet",
    "is_gpu_index",
    "measure_operator",
    "node_name",
    "scale_node",
    "scale_pod",
    "teardown_fleet",
]
