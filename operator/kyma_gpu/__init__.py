"""Kyma GPU module: makes GPU worker pools of a Kyma cluster usable.

Data flows one way, and the package tree says so:

    facts   Node -> compact NodeFacts -> ClusterFacts          (pure)
    rules   values rules, machine types, installer matrices     (pure, data in values-rules/)
    plan    (Gpu spec, ClusterFacts) -> Plan: values + Flux objects (pure)
    status  (Plan, observed Flux/DaemonSets/ClusterPolicy) -> Gpu.status (pure)
    observe paged LISTs and WATCHes of the Gpu and nine other kinds -> one store of facts
    reconcile the loop: wake on a change, decide (pure), carry the step out through the adapter
    adapter the only module that talks to the API server
    handlers kopf runs the process (signals, liveness, start and stop); main: kyma-gpu-manager
"""

__version__ = "0.1.0"
