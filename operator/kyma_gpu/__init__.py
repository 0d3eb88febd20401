"""Kyma GPU module: makes GPU worker pools of a Kyma cluster usable.

Data flows one way, and the package tree says so:

    facts   Node -> compact NodeFacts -> ClusterFacts          (pure)
    rules   values rules, machine types, installer matrices     (pure, data in values-rules/)
    plan    (Gpu spec, ClusterFacts) -> Plan: values + Flux objects (pure)
    status  (Plan, observed Flux/DaemonSets/ClusterPolicy) -> Gpu.status (pure)
    adapter the only module that talks to the API server
    handlers kopf wiring: watch, call the core, write through the adapter
"""

__version__ = "0.1.0"
