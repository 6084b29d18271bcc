"""Megatron-LM's own argument code on the emitted commands (its parser is not on PyPI).

    python bench/megatron_lm_args.py /path/to/Megatron-LM-checkout

Builds the plans of tests/frameworks (the searched Megatron plans and one uneven split per
split-flag family), renders each for Megatron, and runs the checkout's `parse_args`,
`validate_args` and `core_transformer_config_from_args` on the command (with the command's
environment, e.g. CUDA_DEVICE_MAX_CONNECTIONS); then the checkout's megatron.core layer-split
functions must give every (pipeline rank, virtual stage) the plan's decoder blocks. Prints
accepted / rejected counts and each rejection.

Faked, since this machine has no GPU and no Transformer Engine: torch.cuda.is_available and
get_device_properties (an sm90 device), and `--no-rope-fusion` is appended. The checkout's
tokenizer imports need `six` and `regex` on the path. Python 3.11 lacks typing.override, which
newer tags import; it is shimmed as the identity.
"""

from __future__ import annotations

import os
import shlex
import sys
import traceback
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def plans() -> list[tuple[str, object]]:
    sys.path[:0] = [str(ROOT / "tests" / "frameworks"), str(ROOT / "tests" / "planner" / "launch")]
    import searched_plans
    from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders

    out: list[tuple[str, object]] = [
        (f"{name} #{i}", p) for name, i, p in searched_plans.cases("megatron")
    ]
    splits = {
        "account embedding": (3, [10, 11, 11]),
        "account loss": (3, [11, 11, 10]),
        "first/last": (4, [6, 9, 9, 8]),
        "layout": (4, [5, 9, 10, 8]),
        "interleaved even": (2, [8] * 4),
        "interleaved first/last": (4, [3, 4, 4, 5] * 2),
        "interleaved layout": (4, [3, 5, 4, 4, 4, 4, 5, 3]),
    }
    for name, (pp, counts) in splits.items():
        vpp = len(counts) // pp
        schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
        stages = ranges_from_decoders(counts)
        plan = make_plan(arch=LLAMA_8B, tp=2, pp=pp, vpp=vpp, sp=True, gbs=48,
                         schedule=schedule, stages=stages)  # fmt: skip
        out.append((name, plan))
    return out


def layers(cfg: object, pp: int) -> list[tuple[int, int]]:
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    vpp = cfg.virtual_pipeline_model_parallel_size  # type: ignore[attr-defined]
    ps.set_virtual_pipeline_model_parallel_world_size(vpp)
    out = []
    for j in range(pp * (vpp or 1)):
        rank, chunk = j % pp, (j // pp if vpp else None)
        ps.set_pipeline_model_parallel_rank(rank)
        offset = get_transformer_layer_offset(cfg, vp_stage=chunk, pp_rank=rank)
        out.append((offset, get_num_layers_to_build(cfg, vp_stage=chunk, pp_rank=rank)))
    return out


def main(checkout: str) -> None:
    typing.override = getattr(typing, "override", lambda f: f)  # type: ignore[attr-defined]
    sys.path.insert(0, checkout)
    import torch

    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    sm90 = types.SimpleNamespace(major=9, minor=0, name="H100")
    torch.cuda.get_device_properties = lambda *a, **k: sm90  # type: ignore[assignment]
    from megatron.training.arguments import (
        core_transformer_config_from_args,
        parse_args,
        validate_args,
    )

    from planner.launch import Deployment, render

    accepted, rejected = 0, []
    for name, plan in plans():
        command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
        words = shlex.split(command)
        env = dict(w.split("=", 1) for w in words[: words.index("torchrun")])
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(env, WORLD_SIZE=str(plan.num_gpus), RANK="0", LOCAL_RANK="0")  # type: ignore[attr-defined]
        sys.argv = ["pretrain_gpt.py", *words[words.index("pretrain_gpt.py") + 1 :]]
        sys.argv.append("--no-rope-fusion")
        try:
            args = parse_args()
            validate_args(args, {})
            cfg = core_transformer_config_from_args(args)
            n = cfg.num_layers
            want = [(max(f, 1) - 1, min(e, n + 1) - max(f, 1)) for f, e in
                    (s.layers for s in plan.stages)]  # type: ignore[attr-defined]  # fmt: skip
            got = layers(cfg, plan.pp)  # type: ignore[attr-defined]
            assert got == want, f"layers per (rank, virtual stage) {got} != plan's {want}"
            accepted += 1
        except BaseException as e:  # a rejection is any failure, SystemExit included
            where = traceback.extract_tb(e.__traceback__)[-1]
            rejected.append(f"{name}: {type(e).__name__}: {str(e)[:200]} ({where.name})")
    print("\n".join(rejected))
    print(f"accepted {accepted}, rejected {len(rejected)}")


if __name__ == "__main__":
    main(sys.argv[1])
