"""The plan's HelmRelease against the running one: which values differ, and whether the driver
DaemonSets change (then the NVIDIA upgrade controller replaces the driver node by node)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_gpu_tools.release_diff import release_diff


def release(version: str = "v26.7.0", **values: Any) -> dict[str, Any]:
    return {"kind": "HelmRelease",
            "spec": {"chart": {"spec": {"version": version}}, "values": values}}  # fmt: skip


def test_the_same_release_changes_nothing() -> None:
    same = release(driver={"version": "590"}, gfd={"enabled": True})
    diff = release_diff(same, same)
    assert (diff.chart, diff.changes, diff.rolls_driver) == (None, (), False)


@pytest.mark.parametrize(
    ("before", "after", "said", "rolls"),
    [
        (
            {"driver": {"version": "580"}},
            {"driver": {"version": "590"}},
            "driver.version: 580 -> 590",
            True,
        ),
        (
            {},
            {"daemonsets": {"tolerations": [{"key": "a"}]}},
            'daemonsets.tolerations: added ([{"key":"a"}])',
            True,
        ),
        (
            {"operator": {"logging": {"level": "info"}}},
            {"operator": {"logging": {"level": "debug"}}},
            "operator.logging.level: info -> debug",
            False,
        ),
        ({"gfd": {"enabled": True}}, {}, "gfd.enabled: removed (true)", False),
        (
            {},
            {"extraObjects": [{"kind": "NVIDIADriver"}]},
            'extraObjects: added ([{"kind":"NVIDIADriver"}])',
            True,
        ),
    ],
)
def test_what_changes_and_whether_the_driver_rolls(
    before: dict[str, Any], after: dict[str, Any], said: str, rolls: bool
) -> None:
    diff = release_diff(release(**before), release(**after))
    assert [c.text() for c in diff.changes] == [said]
    assert diff.rolls_driver is rolls


def test_a_new_chart_rolls_the_driver() -> None:
    diff = release_diff(release("v26.3.3"), release("v26.7.0"))
    assert diff.chart == ("v26.3.3", "v26.7.0")
    assert diff.rolls_driver


def test_long_values_are_cut() -> None:
    diff = release_diff(release(), release(dcgmExporter={"config": {"data": "x" * 500}}))
    assert diff.changes[0].text() == f"dcgmExporter.config.data: added ({'x' * 57}...)"
