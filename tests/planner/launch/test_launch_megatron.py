"""Megatron-LM arguments satisfy Megatron's own rules and rebuild the plan's stages exactly.

`megatron_stage_layers` re-derives, from the emitted flags alone, the decoder blocks Megatron
builds on each (virtual) stage, following megatron/core/transformer/transformer_block.py
`get_num_layers_to_build`, transformer_config.py and training/arguments.py; each assertion
names the Megatron rule it enforces.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
from launch_plans import GPT_1B, LLAMA_8B, make_plan, ranges_from_decoders

from planner.errors import UnsupportedPlanError
from planner.launch import Deployment, render, unsupported
from planner.plan import Plan


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in (
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers",
        "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--micro-batch-size", "--global-batch-size", "--recompute-num-layers",
        "--num-attention-heads", "--num-query-groups", "--hidden-size", "--ffn-hidden-size",
        "--seq-length",
    ):  # fmt: skip
        p.add_argument(flag, type=int)
    for flag in ("--pipeline-model-parallel-layout", "--recompute-granularity",
                 "--recompute-method"):  # fmt: skip
        p.add_argument(flag)
    for flag in (
        "--sequence-parallel", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--no-overlap-p2p-communication",
        "--use-distributed-optimizer", "--group-query-attention", "--swiglu",
        "--untie-embeddings-and-output-weights",
    ):  # fmt: skip
        p.add_argument(flag, action="store_true")
    args, _ = p.parse_known_args(argv)
    return args


def megatron_argv(plan: Plan) -> list[str]:
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    words = shlex.split(command)
    return words[words.index("pretrain_gpt.py") + 1 :]


def megatron_stage_layers(a: argparse.Namespace) -> list[int]:
    """Decoder blocks per virtual stage (stage i = chunk i // pp of rank i % pp)."""
    pp, n = a.pipeline_model_parallel_size, a.num_layers
    vpp = None
    if a.pipeline_model_parallel_layout:
        stages = _layout(a.pipeline_model_parallel_layout)
        assert len(stages) % pp == 0, "rule: layout length divisible by pp"
        flat = "".join(stages)
        assert flat[0] == "E" and flat[-1] == "L", "rule: layout starts with E, ends with L"
        assert flat.count("t") == n, "rule: layout holds num_layers decoder layers"
        return [s.count("t") for s in stages]
    if a.num_layers_per_virtual_pipeline_stage is not None:
        assert a.decoder_first_pipeline_num_layers is None, (
            "rule: uneven pp needs --num-virtual-stages-per-pipeline-rank"
        )
        assert n % pp == 0, "rule: num_layers divisible by pp"
        assert (n // pp) % a.num_layers_per_virtual_pipeline_stage == 0, (
            "rule: layers per rank divisible by layers per virtual stage"
        )
        vpp = n // pp // a.num_layers_per_virtual_pipeline_stage
    elif a.num_virtual_stages_per_pipeline_rank is not None:
        vpp = a.num_virtual_stages_per_pipeline_rank
    emb, loss = a.account_for_embedding_in_pipeline_split, a.account_for_loss_in_pipeline_split
    first, last = a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers
    if first is not None or last is not None:
        assert not (emb or loss), "rule: uneven pp not with account-for-embedding/loss"
        remaining, left = n, pp
        for edge in (first, last):
            if edge is not None:
                assert edge > 0, "rule: first/last pipeline num layers > 0"
                if vpp:
                    assert edge % vpp == 0, "rule: first/last layers divisible by vpp"
                remaining -= edge
                left -= 1
        assert bool(remaining) == bool(left), "rule: middle layers iff middle stages"
        if left:
            assert remaining % left == 0, "rule: middle layers divisible by middle stages"
        per_rank = [remaining // left if left else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
    else:
        total = n + int(emb) + int(loss)
        assert total % pp == 0, "rule: num_layers (+ embedding/loss) divisible by pp"
        per_rank = [total // pp] * pp
    v = vpp or 1
    if vpp and pp > 1:
        # P2P overlap is on unless --no-overlap-p2p-communication; without it pp must exceed 2
        assert pp > 2 or not a.no_overlap_p2p_communication, "rule: interleaving with pp = 2"
    out = []
    for i in range(pp * v):
        r = i % pp
        assert per_rank[r] % v == 0, "rule: layers per rank divisible by vpp"
        count = per_rank[r] // v
        count -= int(emb and i == 0) + int(loss and i == pp * v - 1)
        assert count >= 0, "rule: enough layers on the first/last virtual stage"
        out.append(count)
    return out


def _layout(text: str) -> list[str]:
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


SPLITS: dict[str, tuple[Plan, str]] = {
    # name: (plan, the flag family that must express it)
    "pp1": (make_plan(tp=8, gbs=16), "none"),
    "even pp4": (make_plan(tp=2, pp=4, stages=ranges_from_decoders([8] * 4)), "even"),
    "even interleaved pp4 vpp2": (
        make_plan(pp=4, vpp=2, schedule="interleaved-1f1b", stages=ranges_from_decoders([4] * 8)),
        "--num-layers-per-virtual-pipeline-stage",
    ),
    "embedding and head counted": (
        make_plan(
            arch=GPT_1B.model_copy(update={"num_layers": 30}),
            pp=4,
            stages=ranges_from_decoders([7, 8, 8, 7]),
        ),
        "--account-for-embedding-in-pipeline-split",
    ),
    "uneven first and last": (
        make_plan(pp=4, stages=ranges_from_decoders([6, 9, 9, 8])),
        "--decoder-first-pipeline-num-layers",
    ),
    "uneven pp2": (
        make_plan(pp=2, stages=ranges_from_decoders([15, 17])),
        "--decoder-first-pipeline-num-layers",
    ),
    "uneven interleaved": (
        make_plan(
            pp=4,
            vpp=2,
            schedule="interleaved-1f1b",
            stages=ranges_from_decoders([3, 4, 4, 5, 3, 4, 4, 5]),
        ),
        "--num-virtual-stages-per-pipeline-rank",
    ),
    "interleaved pp2 (P2P overlap on by default)": (
        make_plan(pp=2, vpp=2, schedule="interleaved-1f1b", stages=ranges_from_decoders([8] * 4)),
        "--num-layers-per-virtual-pipeline-stage",
    ),
    "irregular split -> layout": (
        make_plan(pp=4, stages=ranges_from_decoders([5, 9, 10, 8])),
        "--pipeline-model-parallel-layout",
    ),
    "embedding alone on stage 0 -> layout": (
        make_plan(pp=4, stages=[(0, 1), (1, 12), (12, 23), (23, 34)]),
        "--pipeline-model-parallel-layout",
    ),
}


@pytest.mark.parametrize("name", list(SPLITS))
def test_megatron_builds_exactly_the_plans_stages(name: str) -> None:
    plan, family = SPLITS[name]
    argv = megatron_argv(plan)
    a = parse(argv)
    assert a.tensor_model_parallel_size == plan.tp
    assert a.pipeline_model_parallel_size == plan.pp
    if family not in ("none", "even"):
        assert family in argv
    counts = [
        min(e, plan.arch.num_layers + 1) - max(f, 1)  # type: ignore[union-attr]
        for f, e in (s.layers for s in plan.stages)
    ]
    assert megatron_stage_layers(a) == counts


def test_rule_global_batch_divisible_by_micro_batch_times_dp() -> None:
    plan = make_plan(tp=2, pp=2, dp=4, mbs=2, gbs=64)
    a = parse(megatron_argv(plan))
    assert a.global_batch_size % (a.micro_batch_size * plan.dp) == 0
    assert a.global_batch_size // (a.micro_batch_size * plan.dp) == plan.num_microbatches
    bad = plan.model_copy(update={"global_batch_size": 60})
    assert any("global_batch_size=60" in r for r in unsupported(bad, "megatron"))


def test_rule_sequence_parallel_needs_tp() -> None:
    a = parse(megatron_argv(make_plan(tp=4, sp=True, gbs=8)))
    assert a.sequence_parallel and a.tensor_model_parallel_size > 1
    bad = make_plan(tp=2, sp=True, gbs=8).model_copy(update={"tp": 1, "num_gpus": 1})
    assert any("tp > 1" in r for r in unsupported(bad, "megatron"))


def test_rule_interleaved_microbatches_divisible_by_pp() -> None:
    plan = make_plan(pp=4, vpp=2, schedule="interleaved-1f1b", gbs=6)  # m = 6
    reasons = unsupported(plan, "megatron")
    assert any("num_microbatches=6" in r and "pp=4" in r for r in reasons)


def test_llama_and_gpt_model_flags() -> None:
    llama = parse(megatron_argv(make_plan(tp=8, gbs=8)))
    assert llama.group_query_attention and llama.num_query_groups == LLAMA_8B.num_kv_heads
    assert llama.swiglu and llama.untie_embeddings_and_output_weights
    assert (llama.hidden_size, llama.ffn_hidden_size) == (4096, 14336)
    gpt = parse(megatron_argv(make_plan(arch=GPT_1B, tp=2, gbs=8)))
    assert not gpt.swiglu and not gpt.group_query_attention
    assert not gpt.untie_embeddings_and_output_weights  # GPT ties them
    assert gpt.ffn_hidden_size == 4 * GPT_1B.hidden_size


def test_zero1_is_the_distributed_optimizer_and_zero2_is_refused() -> None:
    assert parse(megatron_argv(make_plan(dp=8, zero=1, gbs=64))).use_distributed_optimizer
    assert not parse(megatron_argv(make_plan(dp=8, zero=0, gbs=64))).use_distributed_optimizer
    with pytest.raises(UnsupportedPlanError) as info:
        render(make_plan(dp=8, zero=2, gbs=64), Deployment(), target="torchrun",
               framework="megatron")  # fmt: skip
    assert "zero_stage=2" in str(info.value)


def test_tensor_parallel_sets_cuda_device_max_connections() -> None:
    bundle = render(make_plan(tp=4, gbs=8), Deployment(), target="torchrun", framework="megatron")
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in shlex.split(bundle.commands[0])
    bundle = render(make_plan(dp=4, gbs=8), Deployment(), target="torchrun", framework="megatron")
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in shlex.split(bundle.commands[0])


@pytest.mark.parametrize("schedule", ["gpipe", "zb-h1"])
def test_schedules_megatron_lacks_are_refused(schedule: str) -> None:
    plan = make_plan(pp=4, schedule=schedule)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedPlanError) as info:
        render(plan, Deployment(), target="slurm", framework="megatron")
    assert info.value.framework == "megatron"
    assert any(repr(schedule) in r for r in info.value.reasons)


# Recompute: Megatron has uniform modes and "block" (first k blocks of every stage, full).
def test_uniform_recompute_modes() -> None:
    sel = parse(megatron_argv(make_plan(tp=2, gbs=8, recompute="selective")))
    assert sel.recompute_granularity == "selective" and sel.recompute_method is None
    full = parse(megatron_argv(make_plan(pp=2, gbs=8, recompute="full")))
    assert (full.recompute_granularity, full.recompute_method) == ("full", "uniform")
    assert full.recompute_num_layers == 1
    none = parse(megatron_argv(make_plan(pp=2, gbs=8)))
    assert none.recompute_granularity is None


def _per_layer(counts: list[int], full_first: list[int]) -> list[list[str]]:
    """Recompute lists per stage: embedding/head 'none', the first k decoders 'full'."""
    out = []
    for i, (c, k) in enumerate(zip(counts, full_first, strict=True)):
        modes = ["full"] * k + ["none"] * (c - k)
        if i == 0:
            modes = ["none", *modes]
        if i == len(counts) - 1:
            modes = [*modes, "none"]
        out.append(modes)
    return out


def test_block_recompute_matches_first_k_blocks_of_every_stage() -> None:
    counts = [8, 8, 8, 8]
    plan = make_plan(pp=4, stages=ranges_from_decoders(counts),
                     per_layer=_per_layer(counts, [3, 3, 3, 3]))  # fmt: skip
    a = parse(megatron_argv(plan))
    assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == (
        "full",
        "block",
        3,
    )


def test_block_with_a_short_stage_recomputes_all_of_it() -> None:
    counts = [2, 10, 10, 10]
    plan = make_plan(pp=4, stages=ranges_from_decoders(counts),
                     per_layer=_per_layer(counts, [2, 4, 4, 4]))  # fmt: skip
    assert parse(megatron_argv(plan)).recompute_num_layers == 4


def test_recompute_pattern_megatron_cannot_express_names_stage_and_layer() -> None:
    counts = [8, 8, 8, 8]
    per_layer = _per_layer(counts, [3, 3, 2, 3])  # stage 2 recomputes 2, the others 3
    plan = make_plan(pp=4, stages=ranges_from_decoders(counts), per_layer=per_layer)
    with pytest.raises(UnsupportedPlanError) as info:
        render(plan, Deployment(), target="torchrun", framework="megatron")
    text = " ".join(info.value.reasons)
    assert "stage 2" in text and "--recompute-num-layers" in text
    # a full layer after a non-recomputed one: not a prefix
    per_layer = _per_layer(counts, [3, 3, 3, 3])
    per_layer[1][5] = "full"  # stage 1 holds decoder.8..15; its 6th block is decoder.13
    plan = make_plan(pp=4, stages=ranges_from_decoders(counts), per_layer=per_layer)
    reasons = unsupported(plan, "megatron")
    assert any("stage 1" in r and "decoder.13" in r for r in reasons), reasons


def test_mixed_selective_and_full_is_refused() -> None:
    counts = [16, 16]
    per_layer = _per_layer(counts, [0, 0])
    per_layer[0][1] = "selective"  # decoder.0
    per_layer[1][0] = "full"  # decoder.16
    plan = make_plan(pp=2, stages=ranges_from_decoders(counts), per_layer=per_layer)
    reasons = unsupported(plan, "megatron")
    assert any("decoder.0 is 'selective'" in r and "decoder.16 is 'full'" in r for r in reasons)


def test_plan_without_shapes_is_refused() -> None:
    plan = make_plan(arch=None, pp=2, num_decoders=32)
    reasons = unsupported(plan, "megatron")
    assert any("arch" in r for r in reasons)
