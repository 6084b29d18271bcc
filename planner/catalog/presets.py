"""Named model presets: the shapes of published models, for the planning form.

Each preset is a `ModelArch` with the numbers its source publishes:
- `gpt-3-175b`: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
  (96 layers, d_model 12288, 96 heads); vocabulary padded to 51200 as Megatron-LM trains it
  (Narayanan et al. 2021, Table 1).
- `megatron-gpt-*`: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", Table 1 (its GPT rows, ffn = 4h, vocabulary 51200).
- `llama-3-8b`, `llama-3-70b`, `llama-3.1-405b`: the `config.json` of meta-llama/Meta-Llama-3-8B,
  Meta-Llama-3-70B and Llama-3.1-405B on huggingface.co (num_hidden_layers, hidden_size,
  num_attention_heads, num_key_value_heads, intermediate_size, vocab_size).
- `llama-2-7b`: the `config.json` of meta-llama/Llama-2-7b-hf (multi-head attention).

`PRESETS` adds the mixture-of-experts presets of `planner.catalog.models` (Mixtral, Qwen3,
DeepSeek-V3, GPT-OSS; sources there), which the search refuses until it costs MoE layers.
"""

from __future__ import annotations

from types import MappingProxyType

from planner.catalog.models import PRESETS as MOE_PRESETS
from planner.specs.model import ModelArch


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelArch:
    return ModelArch(
        family="gpt",
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden,
        vocab_size=51200,
    )


def _llama(
    name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int
) -> ModelArch:
    return ModelArch(
        family="llama",
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
    )


_ALL: tuple[ModelArch, ...] = (
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256),
    _llama("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256),
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000),
    _gpt("gpt-3-175b", 96, 12288, 96),
    _gpt("megatron-gpt-1.7b", 24, 2304, 24),
    _gpt("megatron-gpt-7.5b", 36, 4096, 32),
    _gpt("megatron-gpt-18.4b", 40, 6144, 48),
    _gpt("megatron-gpt-39.1b", 48, 8192, 64),
    _gpt("megatron-gpt-145.6b", 80, 12288, 96),
    _gpt("megatron-gpt-529.6b", 105, 20480, 128),
)

DENSE: MappingProxyType[str, ModelArch] = MappingProxyType({m.name: m for m in _ALL})
PRESETS: MappingProxyType[str, ModelArch] = MappingProxyType({**DENSE, **MOE_PRESETS})


def preset(name: str) -> ModelArch:
    """The preset called `name`; ValueError listing the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; choose one of {list(PRESETS)}") from None
