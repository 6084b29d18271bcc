"""The model presets against the parameter counts their sources publish."""

from __future__ import annotations

import pytest

from planner.catalog.models import PRESETS as MOE_PRESETS
from planner.catalog.presets import DENSE, PRESETS, preset
from planner.specs.model import ModelArch

# billions of parameters as published: the counts huggingface.co shows for the meta-llama
# checkpoints (Llama 3 8B, 70B, 3.1 405B; Llama 2 7B), Brown et al. 2020 Table 2.1, Narayanan et al.
# 2021 Table 1 (the Megatron rows), as printed: the comparison allows one unit of the last
# printed digit (1.7 is 1.65 rounded; GPT-3's "175B" counts a 50,257-token vocabulary)
PUBLISHED_B = {
    "llama-3-8b": "8.03",
    "llama-3-70b": "70.6",
    "llama-3.1-405b": "406",
    "llama-2-7b": "6.74",
    "gpt-3-175b": "175",
    "megatron-gpt-1.7b": "1.7",
    "megatron-gpt-7.5b": "7.5",
    "megatron-gpt-18.4b": "18.4",
    "megatron-gpt-39.1b": "39.1",
    "megatron-gpt-145.6b": "145.6",
    "megatron-gpt-529.6b": "529.6",
}


def parameters(m: ModelArch, seq_length: int = 2048) -> float:
    """Weights of the shapes: attention (q, o: h^2 each; k, v: h x kv x head_dim), MLP (two
    matrices for gpt, three for SwiGLU), norms and biases, embeddings (tied for gpt, with
    learned positions)."""
    h, head = m.hidden_size, m.hidden_size // m.num_attention_heads
    kv = m.kv_heads * head
    attn = 2 * h * h + 2 * h * kv
    if m.family == "gpt":
        block = attn + 2 * h * m.ffn + (3 * h + 2 * kv) + (m.ffn + h) + 4 * h
        return m.num_layers * block + m.vocab_size * h + seq_length * h + 2 * h
    block = attn + 3 * h * m.ffn + 2 * h
    return m.num_layers * block + 2 * m.vocab_size * h + h


def test_every_preset_has_its_published_size() -> None:
    assert set(DENSE) == set(PUBLISHED_B)
    assert set(PRESETS) == set(DENSE) | set(MOE_PRESETS)  # the form lists both
    assert all(m.is_plain for m in DENSE.values())
    for name, printed in PUBLISHED_B.items():
        decimals = len(printed.partition(".")[2])
        got = parameters(DENSE[name]) / 1e9
        assert abs(got - float(printed)) <= 10.0**-decimals, (name, got, printed)


def test_an_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown model preset 'llama-4'.*llama-3-8b"):
        preset("llama-4")
