"""Properties of the pure core over generated input.

Any Gpu spec and any node list give either a Plan or a clean rejection (pydantic's
ValidationError for the spec, NodeError for a node): never another exception. Plans are
deterministic, and make_plan never raises for any ClusterFacts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kyma_gpu.api import GpuSpec
from kyma_gpu.facts import ClusterFacts, NodeError, NodeFacts, OsFamily, cluster_facts, node_facts
from kyma_gpu.plan import Owner, Plan, make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.yamlio import dump
from tests.unit.builders import allowing, node

CATALOG = Catalog()
OWNER = Owner(uid="0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11")
ALLOWED = allowing(*(
    {"kind": kind, "url": url, "operatorVersions": ["v26.7.0", "v26.3.3", "v27.0.0"],
     "secretRefs": ["chart-auth"], "insecure": True}
    for kind, url in (("HelmRepository", "https://helm.ngc.nvidia.com/nvidia"),
                      ("HelmRepository", "https://charts.example/nvidia"),
                      ("OCIRepository", "oci://registry.example/charts"))
), nvidia=False)  # fmt: skip
"""The sources the generated specs name, allowed: the properties cover the Flux objects too."""
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Short text as YAML round-trips it: no lone surrogates, and no control characters or line and
# paragraph separators (PyYAML writes U+0085 raw and reads it back as a line break; Kubernetes
# names and label values cannot hold them anyway).
text = st.text(st.characters(exclude_categories=["Cs", "Cc", "Zl", "Zp"]), max_size=24)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def optional_dict(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping in which every field may be absent."""
    return st.fixed_dictionaries({}, optional=fields)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), text)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)

# Specs a user would plausibly write (most of them valid) ...
good_specs = optional_dict(
    driver=optional_dict(
        mode=st.sampled_from(["Auto", "Precompiled", "Preinstalled", "Upstream"]),
        version=st.sampled_from(["590", "580", "570", "550", "590.48.01", "580.65.06"]),
        installerRelease=st.sampled_from(["1.17.0", "1.7.0", "9.9.9"]),
    ),
    operatorVersion=st.sampled_from(["v26.7.0", "v26.3.3", "v27.0.0"]),
    source=optional_dict(
        chartRepository=st.sampled_from(
            ["https://charts.example/nvidia", "oci://registry.example/charts"]
        ),
        insecure=st.booleans(),
        secretRef=st.just("chart-auth"),
        imageRegistry=st.sampled_from(["mirror.example", "mirror.example:5000/path"]),
        imagePullSecrets=st.lists(st.sampled_from(["pull", "pull-2"]), max_size=2),
    ),
    components=optional_dict(
        dcgmExporter=st.booleans(),
        migManager=st.booleans(),
        nodeStatusExporter=st.booleans(),
    ),
    values=st.dictionaries(
        st.sampled_from(["driver", "toolkit", "devicePlugin", "extraObjects", "x"]),
        json_values,
        max_size=3,
    ),
)
# ... and anything at all in the same shape.
wild_specs = optional_dict(
    driver=st.one_of(
        optional_dict(
            mode=st.one_of(
                st.sampled_from(["Auto", "Precompiled", "Preinstalled", "Upstream", "Foo", ""]),
                text,
            ),
            version=st.one_of(
                st.sampled_from(["590", "580", "570", "550", "590.48.01", "580.65.06", "5"]),
                text,
                st.integers(0, 999),
            ),
            installerRelease=st.one_of(st.sampled_from(["1.17.0", "1.7.0", "9.9.9", "1.17"]), text),
        ),
        text,
    ),
    operatorVersion=st.one_of(st.sampled_from(["v26.7.0", "v26.3.3", "v27.0.0", "26.7"]), text),
    source=optional_dict(
        chartRepository=st.one_of(
            st.sampled_from(
                [
                    "https://helm.ngc.nvidia.com/nvidia",
                    "oci://registry.example/charts",
                    "http://127.0.0.1:8879",
                    "ftp://x",
                ]
            ),
            text,
        ),
        chartName=st.one_of(st.just("gpu-operator"), text),
        insecure=st.one_of(st.booleans(), text),
        secretRef=st.one_of(st.just("chart-auth"), text),
        imageRegistry=st.one_of(
            st.sampled_from(["mirror.example", "mirror.example:5000/path", "Bad Registry"]), text
        ),
        imagePullSecrets=st.lists(st.one_of(st.just("pull"), text), max_size=3),
    ),
    components=optional_dict(
        dcgmExporter=st.one_of(st.booleans(), text),
        serviceMonitor=st.booleans(),
        migManager=st.booleans(),
        gpuFeatureDiscovery=st.booleans(),
        nodeStatusExporter=st.booleans(),
    ),
    values=st.one_of(st.dictionaries(text, json_values, max_size=4), json_scalars),
)
specs = st.one_of(good_specs, wild_specs)

LABEL_KEYS = [
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "worker.gardener.cloud/pool",
    "feature.node.kubernetes.io/pci-10de.present",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "gpu.kyma-project.io/gpu",
    "gpu.kyma-project.io/gpu-model",
    "gpu.kyma-project.io/gpu-count",
    "gpu.kyma-project.io/driver-preinstalled",
    "kubernetes.io/arch",
]
label_values = st.one_of(
    st.sampled_from(["true", "false", "g6.xlarge", "g2-standard-8", "n1-standard-8", "2", "-1"]),
    text,
    st.integers(-2, 8),
    st.none(),
)
labels = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(LABEL_KEYS), text), label_values, max_size=6),
    st.lists(text, max_size=2),
    st.none(),
)
os_images = st.one_of(
    st.sampled_from(
        [
            "Garden Linux 1877.21",
            "Garden Linux 1877.18",
            "Garden Linux 2150.8.0",
            "Garden Linux 1592.4",
            "Ubuntu 22.04.5 LTS",
            "SUSE Linux Micro 6.1",
            "Red Hat Enterprise Linux 9.4 (Plow)",
            "Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)",
            "Talos (v1.9.5)",
            "Bottlerocket OS 1.29.0",
            "Garden Linux ²",
        ]
    ),
    text,
    st.integers(),
    st.none(),
)
provider_ids = st.one_of(
    st.sampled_from(
        ["aws:///eu-central-1a/i-1", "gce://p/z/n", "azure:///s/r/vm", "openstack:///u", "x"]
    ),
    text,
    st.integers(),
    st.none(),
)
node_info = optional_dict(
    osImage=os_images,
    architecture=st.one_of(st.sampled_from(["amd64", "arm64", "x86_64", "aarch64"]), text),
    kernelVersion=st.one_of(text, st.integers()),
)
capacity = st.one_of(
    optional_dict(
        **{"nvidia.com/gpu": st.one_of(st.sampled_from(["0", "1", "8", "x"]), st.integers())}
    ),
    st.lists(st.integers(), max_size=2),
    st.none(),
)
# Nodes as a cluster has them, with odd labels, OS images and capacities mixed in ...
MACHINES: list[tuple[str | None, str | None]] = [
    ("g6.xlarge", "aws:///eu-central-1a/i-1"),
    ("g4dn.12xlarge", "aws:///eu-central-1a/i-2"),
    ("g5g.xlarge", "aws:///eu-central-1a/i-3"),
    ("g2-standard-8", "gce://p/europe-west3-a/n"),
    ("Standard_NC4as_T4_v3", "azure:///subscriptions/s/resourceGroups/r/vm"),
    ("m6i.large", "aws:///eu-central-1a/i-4"),
    ("n1-standard-8", "gce://p/z/n1"),
    ("g6.xlarge", "gce://p/z/wrong-provider"),
    (None, "openstack:///u"),
    ("g6.xlarge", None),
]


def _node(machine: tuple[str | None, str | None], **kwargs: Any) -> dict[str, Any]:
    return node(instance_type=machine[0], provider_id=machine[1], **kwargs)


realistic_nodes = st.builds(
    _node,
    machine=st.sampled_from(MACHINES),
    name=st.one_of(st.sampled_from(["gpu-1", "gpu-2", "gpu-3", "cpu-1"]), text.filter(bool)),
    os_image=os_images,
    arch=st.sampled_from(["amd64", "arm64", None]),
    kernel=st.sampled_from(["6.12.44-cloud-amd64", None]),
    pool=st.sampled_from(["gpu", "gpu-b", None]),
    labels=st.dictionaries(st.sampled_from(LABEL_KEYS), label_values.map(str), max_size=3),
    capacity=optional_dict(**{"nvidia.com/gpu": st.sampled_from(["0", "1", "4", "x"])}),
)
# ... and bodies of any shape.
wild_nodes = st.one_of(
    optional_dict(
        apiVersion=st.just("v1"),
        kind=st.one_of(st.just("Node"), st.just("Pod"), st.none()),
        metadata=st.one_of(
            optional_dict(name=st.one_of(text, st.integers(), st.none()), labels=labels),
            st.lists(text, max_size=1),
        ),
        spec=st.one_of(optional_dict(providerID=provider_ids), text),
        status=st.one_of(
            optional_dict(nodeInfo=st.one_of(node_info, text), capacity=capacity), text
        ),
    ),
    json_scalars,
    st.lists(json_scalars, max_size=2),
)
# Mostly realistic nodes, a few of any shape, shuffled.
node_lists = st.tuples(
    st.lists(realistic_nodes, max_size=5), st.lists(wild_nodes, max_size=2)
).flatmap(lambda lists: st.permutations(lists[0] + lists[1]))


def plan_or_rejection(spec_data: Any, bodies: list[Any]) -> Plan | None:
    """The CLI's path through the core: a Plan, or None for a clean rejection."""
    try:
        spec = GpuSpec.model_validate(spec_data)
    except ValidationError:
        return None
    facts = []
    for body in bodies:
        try:
            facts.append(node_facts(body, CATALOG.machine_types))
        except NodeError:
            continue
    return make_plan(spec, cluster_facts(facts), CATALOG, OWNER, ALLOWED)


@SETTINGS
@given(spec=specs, bodies=node_lists)
def test_any_input_gives_a_plan_or_a_clean_rejection(spec: Any, bodies: list[Any]) -> None:
    plan = plan_or_rejection(spec, bodies)
    if plan is None:
        return
    document = plan.document()
    text_ = dump(document)
    assert yaml.safe_load(text_) == document
    assert plan.preflight.verdict in ("ok", "warning", "error")
    if plan.preflight.verdict == "error":
        assert plan.objects == ()
    else:
        assert [o["kind"] for o in plan.objects][1] == "HelmRelease"
        assert plan.helm_release is not None
        assert plan.helm_release["spec"]["values"] == plan.values


@SETTINGS
@given(spec=specs, bodies=node_lists, data=st.data())
def test_plans_are_deterministic(spec: Any, bodies: list[Any], data: st.DataObject) -> None:
    first = plan_or_rejection(spec, bodies)
    shuffled = data.draw(st.permutations(bodies))
    second = plan_or_rejection(spec, shuffled)
    if first is None or second is None:
        assert first is second is None
        return
    # Node names may repeat in generated lists; order of equal names is the input order.
    names = [n.name for n in first.nodes]
    if len(names) == len(set(names)):
        assert dump(first.document()) == dump(second.document())
    again = plan_or_rejection(spec, bodies)
    assert again is not None
    assert dump(again.document()) == dump(first.document())


versions = st.one_of(
    st.sampled_from(["1877.21", "1877.21.0", "2150.8.0", "1877.18", "", "abc", "²", "1..2"]),
    st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3}){0,3}", fullmatch=True),
    text,
)
node_facts_strategy = st.builds(
    NodeFacts,
    name=text,
    provider=st.one_of(st.sampled_from(["aws", "gcp", "azure", "unknown"]), text),
    machine_type=maybe(text),
    gpu_model=maybe(text),
    gpu_count=maybe(st.integers(0, 16)),
    os=st.sampled_from(list(OsFamily)),
    os_version=maybe(versions),
    os_image=text,
    arch=st.one_of(st.sampled_from(["amd64", "arm64", "x86_64", "aarch64", "unknown"]), text),
    kernel=maybe(text),
    pool=maybe(text),
    evidence=st.lists(
        st.sampled_from(["registry", "nfd-pci", "gpu-present", "capacity", "opt-in"]),
        unique=True,
        max_size=3,
    ).map(tuple),
    preinstalled_driver=st.booleans(),
    opted_out=st.booleans(),
)


def _valid(data: Any) -> bool:
    try:
        GpuSpec.model_validate(data)
    except ValidationError:
        return False
    return True


valid_specs = specs.filter(_valid).map(GpuSpec.model_validate)


GARDEN_LINUX_NODE = NodeFacts(
    name="gl",
    provider="aws",
    machine_type="g6.xlarge",
    gpu_model="L4",
    gpu_count=1,
    os=OsFamily.GARDENLINUX,
    os_version="1877.21",
    os_image="Garden Linux 1877.21",
    arch="amd64",
    kernel=None,
    pool="gpu",
    evidence=("registry",),
    preinstalled_driver=False,
)


@SETTINGS
@example(spec=GpuSpec(), nodes=[replace(GARDEN_LINUX_NODE, os_version="²")], cpu=0, owned=True)
@example(spec=GpuSpec(), nodes=[replace(GARDEN_LINUX_NODE, os_version="")], cpu=0, owned=False)
@example(
    spec=GpuSpec(),
    nodes=[GARDEN_LINUX_NODE, replace(GARDEN_LINUX_NODE, os=OsFamily.UBUNTU)],
    cpu=1,
    owned=True,
)
@given(
    spec=st.one_of(st.just(GpuSpec()), valid_specs),
    nodes=st.lists(node_facts_strategy, max_size=6),
    cpu=st.integers(0, 1000),
    owned=st.booleans(),
)
def test_make_plan_never_raises_for_any_cluster_facts(
    spec: GpuSpec, nodes: list[NodeFacts], cpu: int, owned: bool
) -> None:
    facts = ClusterFacts(gpu_nodes=tuple(nodes), cpu_node_count=cpu)
    plan = make_plan(spec, facts, CATALOG, OWNER if owned else None, ALLOWED)
    assert len(plan.nodes) == len(nodes)
    again = make_plan(spec, facts, CATALOG, OWNER if owned else None, ALLOWED)
    assert plan.document() == again.document()
    for obj in plan.objects:
        assert ("ownerReferences" in obj["metadata"]) is owned
