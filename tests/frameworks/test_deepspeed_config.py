"""DeepSpeed 0.19.8 loads the emitted ds_config.json and builds the emitted partition.

`DeepSpeedConfig(ds_config, mpu=grid)` checks the batch identity train_batch_size =
train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size, with the
data-parallel size taken from DeepSpeed's own PipelineParallelGrid over the plan's topology
(PipeModelDataParallelTopology(num_pp, num_mp, num_dp)) on a fake process group of the plan's
world size. With pp > 1, `PipelineModule` built from ds_pipeline.json (layers, topology,
partition_method, activation_checkpoint_interval) must cut the layer list exactly at the
plan's stage boundaries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import deepspeed.comm as ds_dist
import pytest
import torch
import torch.distributed as dist
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.pipe.module import LayerSpec, PipelineModule
from deepspeed.runtime.pipe.topology import PipelineParallelGrid, PipeModelDataParallelTopology
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders
from searched_plans import cases
from torch.testing._internal.distributed.fake_pg import FakeStore

from planner.launch import Deployment, render
from planner.plan import Plan


class Embedding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, 2))


class DecoderLayer(Embedding):  # the Deployment's default deepspeed_layer_class
    pass


class Head(Embedding):
    pass


@pytest.fixture
def fake_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("LOCAL_RANK", "0")

    def start(world_size: int) -> None:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
        ds_dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def files(plan: Plan) -> dict[str, Any]:
    bundle = render(plan, Deployment(), target="torchrun", framework="deepspeed")
    assert "--deepspeed_config" in bundle.commands[0].split()
    return {f.name: json.loads(f.content) for f in bundle.files if f.name.endswith(".json")}


def check(plan: Plan, start_world: Any) -> None:
    docs = files(plan)
    start_world(plan.num_gpus)
    topology = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=plan.dp)
    grid = PipelineParallelGrid(topology=topology, process_group=dist.group.WORLD)
    ds = DeepSpeedConfig(docs["ds_config.json"], mpu=grid)
    assert ds.world_size == plan.dp
    assert ds.train_batch_size == plan.global_batch_size
    assert (ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        plan.micro_batch_size,
        plan.num_microbatches,
    )
    assert ds.zero_optimization_stage == plan.zero_stage
    assert ds.bfloat16_config.enabled
    if plan.pp == 1:
        assert "ds_pipeline.json" not in docs
        return
    pipe = docs["ds_pipeline.json"]
    counts = pipe["layer_counts"]
    classes = {"embedding": Embedding, "DecoderLayer": DecoderLayer, "head": Head}
    layers = [LayerSpec(classes[name]) for name, k in counts.items() for _ in range(k)]
    topo = pipe["topology"]
    module = PipelineModule(
        layers=layers,
        topology=PipeModelDataParallelTopology(**topo),
        partition_method=pipe["partition_method"],
        activation_checkpoint_interval=pipe["activation_checkpoint_interval"],
    )
    assert module.num_stages == pipe["num_stages"] == plan.pp
    bounds = [int(b) for b in module.parts]
    assert bounds == [s.layers[0] for s in plan.stages] + [plan.stages[-1].layers[1]]
    assert (module.activation_checkpoint_interval > 0) == (plan.recompute == "full")


SEARCHED = cases("deepspeed")


@pytest.mark.parametrize(("name", "i"), [(name, i) for name, i, _ in SEARCHED])
def test_searched_plans_load_in_deepspeed(name: str, i: int, fake_world: Any) -> None:
    (plan,) = [p for n, j, p in SEARCHED if (n, j) == (name, i)]
    check(plan, fake_world)


LLAMA_30 = LLAMA_8B.model_copy(update={"num_layers": 30})
LLAMA_PLANS = {
    "pp4 equal blocks (type:DecoderLayer)": (
        make_plan(pp=4, dp=2, gbs=32, zero=1, recompute="full",
                  stages=ranges_from_decoders([8, 8, 8, 8])), "type:DecoderLayer"),
    "pp4 equal layer counts (uniform)": (
        make_plan(arch=LLAMA_30, pp=4, tp=2, gbs=32, stages=ranges_from_decoders([7, 8, 8, 7])),
        "uniform"),
    "pp1 ZeRO-3": (make_plan(dp=8, zero=3, gbs=64), None),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LLAMA_PLANS))
def test_llama_plans_load_in_deepspeed(name: str, fake_world: Any) -> None:
    plan, method = LLAMA_PLANS[name]
    assert files(plan).get("ds_pipeline.json", {}).get("partition_method") == method
    check(plan, fake_world)
