"""Workload protection's list-watch: users' GPU pods in every namespace but the stack's, which
the server leaves out already (field selector), observed only while a deletion waits."""

from __future__ import annotations

from functools import partial

from kyma_gpu.adapter import ListQuery
from kyma_gpu.extensions.workload_protection.pods import PODS, gpu_workload, pod_selector
from kyma_gpu.observe.informer import ListWatch


def pod_watch(stack_namespaces: tuple[str, ...]) -> ListWatch:
    """Users' GPU pods: the stack's own namespaces are left out by the server already."""
    query = ListQuery("/api/v1/pods", field_selector=pod_selector(stack_namespaces))
    return ListWatch(PODS, query, partial(gpu_workload, stack_namespaces=stack_namespaces))
