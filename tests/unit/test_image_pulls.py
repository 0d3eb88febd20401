"""Pods that cannot pull an image (facts/stack.py, status/judge.py): the compact facts
and the words of ComponentsReady. The real kubelet's side: tests/e2e/test_air_gapped.py."""

from __future__ import annotations

from typing import Any

from kyma_gpu.api.conditions import ComponentsReason
from kyma_gpu.facts.stack import PullFailure, pull_failure
from kyma_gpu.status.judge import PULL_SHOWN, image_pull_failed


def _pod(name: str, *waiting: tuple[str, str], init: bool = False) -> dict[str, Any]:
    statuses = [{"name": f"c{i}", "image": image, "state": {"waiting": {"reason": reason}}}
                for i, (image, reason) in enumerate(waiting)]  # fmt: skip
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "spec": {"nodeName": "node-1"},
            "status": {"phase": "Pending", key: statuses}}  # fmt: skip


def test_only_pods_that_cannot_pull_are_kept() -> None:
    assert pull_failure(_pod("p", ("m/a:1", "ContainerCreating"))) is None
    assert pull_failure({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}) is None
    assert pull_failure(_pod("p", ("m/a:1", "ImagePullBackOff"), ("m/b:1", "Running"))) == (
        PullFailure("p", "node-1", (("m/a:1", "ImagePullBackOff"),))
    )
    init = pull_failure(_pod("p", ("m/driver-manager:1", "ErrImagePull"), init=True))
    assert init is not None
    assert init.images == (("m/driver-manager:1", "ErrImagePull"),)


def test_the_condition_names_each_image_once_with_its_pods() -> None:
    failures = [PullFailure(f"dcgm-{i}", f"node-{i}", (("m/dcgm:1", "ImagePullBackOff"),))
                for i in range(3)]  # fmt: skip
    judgement = image_pull_failed(failures, 4)
    condition = judgement.condition
    assert condition.status == "False"
    assert condition.reason == ComponentsReason.IMAGE_PULL_FAILED
    assert condition.message.startswith(
        "3 pods of the GPU operator cannot pull their images: m/dcgm:1 (ImagePullBackOff: pod "
        "dcgm-0 on node node-0 and 2 more). Check that the registry holds them: kyma-gpu "
        "images --check"
    ), condition.message


def test_the_condition_is_bounded() -> None:
    failures = [PullFailure(f"p{i}", "", ((f"m/img{i}:1", "ErrImagePull"),)) for i in range(12)]
    message = image_pull_failed(failures, 1).condition.message
    assert message.count("(ErrImagePull: pod") == PULL_SHOWN
    assert f"; and {12 - PULL_SHOWN} more images." in message
