"""Physical bounds on spec numbers and the rules for text, in one place.

Every bound is generous on purpose: it refuses values no real hardware or training run has
(and that overflow the cost model or make a search run for seconds on nonsense), never a
plausible future one. Each limit is stated with its reason; the validation messages quote
the bound. `planner.specs` applies them on construction (`Field(le=...)` and `check_text`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PhysicalBounds:
    """Upper (and a few lower) bounds on request numbers, with the reason for each.

    - memory_gib <= 16384 (16 TiB): the largest accelerators carry 288 GB of HBM (NVIDIA
      B300, AMD MI355X); 16 TiB is ~60x that.
    - peak_tflops in [1e-3, 1e6]: 1 GFLOP/s is below any CPU core; 1e6 TFLOP/s (1 EFLOP/s
      per device) is ~100x the densest low-precision figure quoted for one GPU today
      (B200, ~10 PFLOP/s dense FP4). Below 1e-3 the predicted step time overflows.
    - link bandwidths in [1e-3, 1e5] GB/s: 1 MB/s is slower than any datacenter link;
      100 TB/s per GPU is ~55x NVLink 5's 1.8 TB/s.
    - link latency <= 1 s per message: no interconnect is that slow; larger values only
      produce meaningless plans.
    - num_gpus <= 2**20 and gpus_per_node <= 1024: the largest clusters hold ~1e5 GPUs
      and the largest NVLink domains 576.
    - num_layers <= 2048: the deepest trained transformers have ~1000 layers (DeepNet,
      Wang et al. 2022); production LLMs have <= 126 (Llama 3 405B). The search's time
      grows with the layer count (4096 layers took seconds only to say infeasible).
    - hidden_size, ffn_hidden_size <= 2**18 and vocab_size <= 2**24: ~10x and ~60x the
      largest published (PaLM: hidden 18432, ffn 73728; vocabularies ~256k).
    - seq_length <= 2**24 (16 Mi tokens): ~1.6x the longest context trained (10M).
    - global_batch_size <= 2**20 sequences: large runs use ~2k-16k sequences per step
      (Llama 3: 16M tokens / 8192); 1 Mi sequences of even 128 tokens is 8x that.
    - profile layers <= num_layers + 2 (embedding and head), points <= 1024.
    - measured seconds in [1e-9, 1e7] when nonzero: a step or stage shorter than a
      nanosecond is no measurement, and 1e7 s is ~116 days; below 1e-9 a relative
      error (predicted - measured) / measured can overflow to infinity.
    - measured bytes: 0 or >= 1 (bytes are whole) and <= 2**60 (1 EiB); a profile's
      per-layer times <= 1e7 s, its bytes and counts <= 2**60, its FLOPs <= 1e30 (a
      whole frontier training run is ~1e26).
    """

    memory_gib: float = 16384.0
    peak_tflops_min: float = 1e-3
    peak_tflops: float = 1e6
    link_gbps_min: float = 1e-3
    link_gbps: float = 1e5
    latency_s: float = 1.0
    num_gpus: int = 2**20
    gpus_per_node: int = 1024
    num_layers: int = 2048
    hidden_size: int = 2**18
    vocab_size: int = 2**24
    num_heads: int = 2**16
    seq_length: int = 2**24
    global_batch_size: int = 2**20
    profile_points: int = 1024
    measured_s_min: float = 1e-9
    measured_s: float = 1e7
    measured_bytes: float = 2.0**60
    measured_steps: int = 100_000
    flops: float = 1e30


@dataclass(frozen=True)
class TextLimits:
    """Text fields: no NUL (PostgreSQL cannot store it in text) and no lone UTF-16
    surrogate (not encodable as UTF-8, so not storable or printable); bounded lengths and
    tag counts so one request cannot grow the history tables without limit."""

    name_chars: int = 200
    tag_chars: int = 64
    tags: int = 32
    note_chars: int = 2000
    notes: int = 64


BOUNDS = PhysicalBounds()
TEXT = TextLimits()


def check_text(value: str) -> str:
    """`value` unchanged, or ValueError naming the first NUL or lone surrogate and where."""
    nul = value.find("\x00")
    if nul >= 0:
        raise ValueError(f"contains NUL (U+0000) at index {nul}; text may not hold NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        raise ValueError(
            f"contains a lone UTF-16 surrogate U+{code:04X} at index {exc.start}; "
            "text must be valid Unicode"
        ) from None
    return value


def bad_text_reason(value: str) -> str | None:
    """Why `value` is not acceptable text, or None."""
    try:
        check_text(value)
    except ValueError as exc:
        return str(exc)
    return None
