"""Analytic model families -> ModelProfile (filled in by the cost-model work).

The layer list of a built-in family, in execution order: `embedding` (token + position
embeddings, dropout), `num_layers` decoder blocks (`decoder`), and `head` (final norm, output
projection and the cross-entropy loss). Stage boundaries index this list.
"""

from __future__ import annotations

from planner.specs.model import LayerRef, ModelArch

EMBEDDING, DECODER, HEAD = "embedding", "decoder", "head"


def layer_refs(arch: ModelArch) -> tuple[LayerRef, ...]:
    blocks = tuple(LayerRef(name=f"decoder.{i}", kind=DECODER) for i in range(arch.num_layers))
    return (LayerRef(name="embedding", kind=EMBEDDING), *blocks, LayerRef(name="head", kind=HEAD))
