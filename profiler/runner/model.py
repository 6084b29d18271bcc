"""The model a run trains: the plan's built-in GPT/Llama, or a user's factory.

A user's factory is named `package.module:function` (`--model-factory`) and called as
`function(seq_length=S, seed=N)`. It returns an `nn.Module` laid out like
`profiler.models.ReferenceModel`:

- `embedding`: tokens [b, s] (int64) -> hidden [b, s, h];
- `layers`: an `nn.ModuleList` of blocks, hidden -> hidden (the plan's decoder layers, in order);
- `head`: `head(hidden, labels) -> scalar mean loss`;
- `vocab_size`: an int attribute (synthetic tokens are drawn below it).

The profile layer list is then [embedding, layers..., head], as for the built-in models, so the
plan's stage boundaries index the same list. Tensor parallel needs the built-in module names
(`profiler.models.TP_PLAN`); for a user's model it is applied when the plan's `arch.family`
names one of those layouts and the blocks use its names, and refused otherwise (tp must be 1).
A user's embedding and head are never tied.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from torch import nn

from planner.plan import Plan
from profiler.models import build_model

__all__ = ["RunModel", "load_model"]


@dataclass(frozen=True)
class RunModel:
    embedding: nn.Module
    layers: nn.ModuleList
    head: nn.Module
    vocab_size: int
    family: str | None  # a key of profiler.models.TP_PLAN, or None (no tensor parallel)
    tied: bool

    @property
    def num_blocks(self) -> int:
        return len(self.layers)


def load_model(plan: Plan, *, factory: str | None, seed: int) -> RunModel:
    """Build the full model on the host (fp32, initialised from `seed`, identical on every rank)."""
    if factory is None:
        if plan.arch is None:
            raise ValueError(
                "the plan carries no model shapes (plan.arch is null): pass --model-factory "
                "package.module:function, or plan from a built-in model or a profile with 'arch'"
            )
        model = build_model(plan.arch, seq_length=plan.seq_length, seed=seed)
        return RunModel(
            embedding=model.embedding,
            layers=model.layers,
            head=model.head,
            vocab_size=plan.arch.vocab_size,
            family=plan.arch.family,
            tied=plan.arch.tied,
        )
    mod_name, _, attr = factory.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"--model-factory {factory!r}: expected package.module:function")
    fn = getattr(importlib.import_module(mod_name), attr)
    module = fn(seq_length=plan.seq_length, seed=seed)
    missing = [a for a in ("embedding", "layers", "head", "vocab_size") if not hasattr(module, a)]
    if missing:
        raise ValueError(f"--model-factory {factory!r}: the model lacks {missing}")
    parts = (module.embedding, module.layers, module.head)
    if not isinstance(parts[1], nn.ModuleList) or not all(isinstance(m, nn.Module) for m in parts):
        raise ValueError(
            f"--model-factory {factory!r}: embedding and head must be modules and 'layers' an "
            "nn.ModuleList"
        )
    family = plan.arch.family if plan.arch is not None else None
    if plan.tp > 1 and family is None:
        raise ValueError(
            f"tp={plan.tp} with a user's model needs the plan's arch.family to name the block "
            "layout (profiler.models.TP_PLAN); plan with tp=1 otherwise"
        )
    return RunModel(
        embedding=parts[0],
        layers=parts[1],
        head=parts[2],
        vocab_size=int(module.vocab_size),
        family=family,
        tied=False,
    )
