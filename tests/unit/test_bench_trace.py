"""The scale benchmark's traces (benchmarks/scale/trace.py): what explains its write counts must
itself count right, or a table row blames the wrong writer."""

from __future__ import annotations

from benchmarks.scale.fleet import ScaleConfig
from benchmarks.scale.measure import spec_body
from benchmarks.scale.process import Write
from benchmarks.scale.trace import changes, gpu_digest, own_writes, steady
from kyma_gpu.api.models import GpuSpec


def _write(at: float, resource: str, subresource: str = "") -> Write:
    return Write(at, "patch", resource, subresource, "gpu", "kyma-gpu/1")


def test_a_change_owns_its_helmrelease_write_and_the_status_after_it() -> None:
    writes = [
        _write(0.9, "gpus", "status"),  # the change before, still mirroring its rollout
        _write(1.0, "helmreleases"),
        _write(1.1, "gpus", "status"),  # the new observedGeneration
        _write(1.2, "events"),
        _write(2.5, "gpus", "status"),  # Flux upgraded: mirrored
    ]
    assert own_writes(writes) == 2


def test_a_change_without_a_helmrelease_write_owns_nothing() -> None:
    assert own_writes([_write(1.0, "gpus", "status")]) == 0


def test_changes_list_what_each_new_version_changed_and_skip_repeats() -> None:
    ready = gpu_digest({"status": {"state": "Ready", "observedGeneration": 3}})
    processing = gpu_digest({"status": {"state": "Processing", "observedGeneration": 4}})
    seen = [(1.5, ready), (2.0, processing), (2.5, processing)]
    assert changes(ready, seen, 1.0) == [[1000, {"observedGeneration": "4", "state": "Processing"}]]


def test_daemonsets_are_steady_only_when_every_pod_is_ready_and_updated() -> None:
    assert steady({"a": "desired 3 ready 3 updated 3", "b": "desired 0 ready 0 updated 0"})
    assert not steady({"a": "desired 3 ready 2 updated 3"})
    assert not steady({"a": "desired 3 ready 3 updated 3 (stale)"})
    assert not steady({})


def test_a_spec_change_rolls_the_operands_unless_asked_for_an_inert_one() -> None:
    rolling = spec_body(ScaleConfig(nodes=1), 7)
    tolerations = rolling["spec"]["values"]["daemonsets"]["tolerations"]
    assert tolerations[-1] == {"key": "bench.kyma-project.io/round-7", "operator": "Exists"}
    GpuSpec.model_validate(rolling["spec"])  # the module takes it
    inert = spec_body(ScaleConfig(nodes=1, spec_value="inert"), 7)
    assert inert == {"spec": {"values": {"dcgmExporter": {"serviceMonitor": {"interval": "7s"}}}}}
    GpuSpec.model_validate(inert["spec"])  # the module takes it
