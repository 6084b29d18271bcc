"""Megatron-LM arguments the emitter writes, built into megatron-core's own objects.

Megatron-LM's parser (megatron/training/arguments.py) is not on PyPI; its translation of the
flags into a TransformerConfig (validate_args: the virtual-stage count;
core_transformer_config_from_args: same-named fields, --decoder-first/last-pipeline-num-layers
-> num_layers_in_first/last_pipeline_stage, --swiglu -> gated SiLU, --bf16 -> params and pipeline
dtype) is re-stated in `transformer_config` below. megatron-core 0.16.1 then validates the
config (TransformerConfig.__post_init__), and its own layer-split functions
(`get_num_layers_to_build`, `get_transformer_layer_offset`) must give every (pipeline rank,
virtual stage) exactly the plan's decoder blocks; its micro-batch calculator the plan's m.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

import pytest
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders
from megatron.core import parallel_state
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from megatron_support import (
    FLOATS,
    INTS,
    VALUED,
    layers_per_stage,
    transformer_config,
)
from searched_plans import cases

from planner.launch import Deployment, render
from planner.launch.frameworks.megatron_flags import FLAGS
from planner.plan import Plan


def parse(argv: list[str]) -> argparse.Namespace:
    """The emitted flags, parsed by their Megatron-LM types (an unknown flag fails)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in FLAGS:
        if flag in INTS:
            p.add_argument(flag, type=int)
        elif flag in FLOATS:
            p.add_argument(flag, type=float)
        elif flag == "--cp-comm-type":  # Megatron-LM: nargs="+", one per layer or one for all
            p.add_argument(flag, nargs="+", default=["p2p"])
        elif flag in VALUED:
            p.add_argument(flag)
        else:
            p.add_argument(flag, action="store_true")
    return p.parse_args(argv)


def megatron_args(plan: Plan) -> argparse.Namespace:
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    words = shlex.split(command)
    return parse(words[words.index("pretrain_gpt.py") + 1 :])


@pytest.fixture(autouse=True)
def _pipeline_rank_state() -> Iterator[None]:
    """megatron-core reads the pipeline rank and virtual size from parallel_state."""
    yield
    parallel_state.set_pipeline_model_parallel_rank(None)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(None)


def check(plan: Plan) -> None:
    a = megatron_args(plan)
    config = transformer_config(a)
    assert config.tensor_model_parallel_size == plan.tp
    assert config.pipeline_model_parallel_size == plan.pp
    assert config.context_parallel_size == plan.cp
    assert a.cp_comm_type == [plan.cp_comm]
    assert (config.virtual_pipeline_model_parallel_size or 1) == plan.vpp
    assert config.sequence_parallel == plan.sequence_parallel
    n = config.num_layers
    want = [(max(f, 1) - 1, min(e, n + 1) - max(f, 1)) for f, e in (s.layers for s in plan.stages)]
    assert layers_per_stage(config) == want
    calc = ConstantNumMicroBatchesCalculator(
        a.global_batch_size, a.micro_batch_size, plan.dp, decrease_batch_size_if_needed=False,
        rank=0,
    )  # fmt: skip
    assert calc.get() == plan.num_microbatches
    if plan.vpp > 1:
        assert calc.get() % plan.pp == 0  # the interleaved schedule's rule
    assert (config.recompute_granularity or "none") == plan.recompute


SEARCHED = cases("megatron")


@pytest.mark.parametrize(("name", "i"), [(name, i) for name, i, _ in SEARCHED])
def test_searched_plans_build_in_megatron_core(name: str, i: int) -> None:
    (plan,) = [p for n, j, p in SEARCHED if (n, j) == (name, i)]
    check(plan)


# decoder blocks per virtual stage of Llama-3-8B (32 blocks), by pp; one per split flag family
SPLITS = {
    "even": (4, [8, 8, 8, 8], None),
    "account for the embedding": (3, [10, 11, 11], "--account-for-embedding-in-pipeline-split"),
    "account for the loss": (3, [11, 11, 10], "--account-for-loss-in-pipeline-split"),
    "first/last differ": (4, [6, 9, 9, 8], "--decoder-first-pipeline-num-layers"),
    "irregular (layout)": (4, [5, 9, 10, 8], "--pipeline-model-parallel-layout"),
    "interleaved even": (2, [8, 8, 8, 8], "--num-layers-per-virtual-pipeline-stage"),
    "interleaved first/last": (4, [3, 4, 4, 5] * 2, "--num-virtual-stages-per-pipeline-rank"),
    "interleaved layout": (4, [3, 5, 4, 4, 4, 4, 5, 3], "--pipeline-model-parallel-layout"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SPLITS))
def test_uneven_splits_build_in_megatron_core(name: str) -> None:
    pp, counts, flag = SPLITS[name]
    vpp = len(counts) // pp
    plan = make_plan(arch=LLAMA_8B, tp=2, pp=pp, vpp=vpp, sp=True, gbs=48,
                     schedule="interleaved-1f1b" if vpp > 1 else "1f1b",
                     stages=ranges_from_decoders(counts))  # fmt: skip
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    assert flag is None or flag in shlex.split(command)
    check(plan)
