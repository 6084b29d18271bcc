"""One golden file per target x framework for a reference plan (reviewed by eye once).

Refresh after an intended change with: MESHPLAN_UPDATE_GOLDEN=1 pytest tests/planner/launch
"""

from __future__ import annotations

import os

import pytest
from golden_support import GOLDEN, flatten
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders

from planner.launch import FRAMEWORKS, TARGETS, Deployment, render

# Llama-3-8B on 2 nodes x 4 GPUs: tp=4, pp=2 (16 decoder blocks each), 1F1B, full recompute;
# a plan all four frameworks can express.
REFERENCE = make_plan(arch=LLAMA_8B, tp=4, pp=2, dp=1, mbs=1, gbs=32, seq=4096,
                      recompute="full", stages=ranges_from_decoders([16, 16]))  # fmt: skip
DEPLOYMENT = Deployment(
    hosts=("gpu-node-0", "gpu-node-1"),
    image="nvcr.io/nvidia/pytorch:25.01-py3",
    partition="gpu",
    account="ml-team",
    time="04:00:00",
    job_name="llama8b-ref",
    namespace="training",
    steps=50,
    env={"NCCL_DEBUG": "WARN"},
)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("target", TARGETS)
def test_output_matches_golden(target: str, framework: str) -> None:
    bundle = render(REFERENCE, DEPLOYMENT, target=target, framework=framework)  # type: ignore[arg-type]
    text = flatten(bundle)
    path = GOLDEN / f"{target}-{framework}.txt"
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with MESHPLAN_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path.name} differs; refresh with MESHPLAN_UPDATE_GOLDEN=1"
