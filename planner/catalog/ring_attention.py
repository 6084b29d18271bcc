"""How a framework runs context-parallel attention: one profile per implementation.

Both implementations meshplan knows split each sequence into 2 cp chunks, rank r holding
chunks r and 2cp - 1 - r, and run a ring of cp attention steps per layer (load-balanced
causal attention, Liu et al. 2023; Megatron-Core / Transformer Engine
`AttnFuncWithCPAndKVP2P`; PyTorch `torch.distributed.tensor.experimental._attention.
_templated_ring_attention`). With c = s / (2 cp) tokens per chunk, a rank's steps are:

    step 0          causal attention of its 2c queries over its own 2c keys
    step i <= r     its 2c queries over the first c keys received (no mask)
    step i >  r     its second c queries over the 2c keys received (no mask)

so every step does the same 2c^2 query-key work, and each is its own flash kernel, with its
own tile and wave quantization (planner.catalog.kernels.flash_attention_s).

What differs between the implementations is what they move and where the partial results
live (`RingAttention`):

- `MEGATRON_CORE` (Megatron-LM `--context-parallel-size` through Transformer Engine,
  `--cp-comm-type p2p`, `AttnFuncWithCPAndKVP2P`): K and V travel with their kv heads; each
  step's output is kept and corrected into the result after the ring by one fused kernel a
  step, and the backward adds each step's dQ and dK, dV into the received buffers (module
  constants). Its all-gather (`--cp-comm-type allgather`, `AttnFuncWithCPAndKVAllGather`;
  Llama 3 §3.3.2) completes before the core and then runs two kernels a rank, one per local
  query chunk over the keys it attends (planner.catalog.layer_work.gather_attention_s): no
  ring steps, no corrections.
- `TORCH_CONTEXT_PARALLEL` (torchtitan's `context_parallel_degree`, PyTorch's
  `context_parallel` context manager, read in PyTorch's current source; torchtitan's
  published CP benchmark, benchmarks/llama3_h100_202412_torchtitan.md, ran torch 1963fc8 of
  2024-12-23):
  * torchtitan's Llama repeats K and V to every query head before
    `F.scaled_dot_product_attention` (`repeat_kv` in torchtitan/models/llama/model.py at the
    benchmark's commit 9dec370), so the ring moves a heads of K and V, not kv heads (later
    torchtitan passes `enable_gqa` to SDPA instead: a profile with `exchange_all_heads=False`
    describes it);
  * `_ContextParallelOptions.convert_to_f32 = True`: each step's output and log-sum-exp are
    merged into an fp32 running output by separate element-wise kernels (`_SDPAMerger`); in
    the backward dQ, dK and dV accumulate in fp32 tensors, and dK, dV travel between steps in
    fp32 (`dkv_rotater`, an all-to-all permutation, `_RotateMethod.ALL_TO_ALL`);
  * the default rotate method (torchtitan's `context_parallel_rotate_method = "allgather"`)
    all-gathers K and V once, issued before step 0's kernel and waited after it, so step 0
    hides it; every step still concatenates K and V into one send buffer
    (`torch.cat([key.flatten(), value.flatten()])`).

`ring_attention_for(framework)` picks the profile of the framework a request names; any
other (or none) is costed as Megatron-Core's.
"""

from __future__ import annotations

from dataclasses import dataclass

# Element-wise traffic per ring step, in bytes per element of one step's attention output
# (N = query rows x heads x value head size) or of one of K and V (key rows x heads x head
# size); a = the activation dtype's bytes, 4 = fp32; each kernel reads its inputs and writes
# its output once.
#
# Transformer Engine (Megatron-Core; AttnFuncWithCPAndKVP2P, flash_attn_fwd_out_correction and
# the backward's dq / dkv updates):
#   forward, after the ring, for each of the cp steps (step 0 included: `out` starts at zeros),
#     out += out_per_step * exp(lse_step - lse)        one fused kernel: 3a per element
#   backward, each step: dq.add_(dq_) 3a per query element; dkv_ = cat(dk_, dv_) 2a and
#     dkv.add_(dkv_) 3a per element of K and of V
TE_FORWARD_CORRECTION = 3.0  # x a
TE_BACKWARD_DQ = 3.0  # x a
TE_BACKWARD_DKV = 5.0  # x a, per element of K and of V
# torch (_templated_ring_attention(_backward), convert_to_f32), steps i >= 1:
#   forward (`_SDPAMerger.step` + `_merge_one`): the step's output cast to fp32 (a + 4),
#     out - block_out (12), sigmoid(lse diff) * that (8), out - that (12): 36 + a; a step
#     over half the rows (i > r) does it on half and rebuilds the full fp32 output
#     (`_partial_update`: chunk and cat, 8 per full element)
#   backward: dQ, dK, dV += the step's (fp32 += activation dtype: 8 + a), the half-covered one
#     rebuilt (8 per full element); the fp32 dK, dV concatenated into the send buffer (8 per
#     element of each)
#   both: K and V concatenated into the send buffer, `torch.cat([key.flatten(),
#     value.flatten()])`, every step but the last, even under all-gather (2a per element)
TORCH_FORWARD_MERGE = 36.0  # + a
TORCH_ACCUMULATE = 8.0  # + a
TORCH_REBUILD = 8.0
TORCH_SEND_CAT = 8.0


@dataclass(frozen=True)
class RingAttention:
    """One context-parallel attention implementation (module docstring)."""

    name: str
    # K / V exchanged at every query head (torchtitan's repeat_kv) rather than the kv heads
    exchange_all_heads: bool = False
    # partial results in fp32 HBM tensors merged by separate element-wise kernels, dK, dV sent
    # in fp32 (torch's convert_to_f32); else Transformer Engine's fused corrections
    fp32_partials: bool = False
    # the all-gather is issued before step 0's kernel and waited after it, and the ring's cp
    # steps still run (torch), rather than completed before two kernels over the gathered
    # keys (Megatron-Core's allgather, Transformer Engine AttnFuncWithCPAndKVAllGather)
    gather_overlaps_first_step: bool = False

    @property
    def grad_bytes_factor(self) -> float:
        """dK, dV bytes per ring step over K, V bytes: 2 when they travel in fp32."""
        return 2.0 if self.fp32_partials else 1.0

    def forward_merge(
        self, *, out_elements: float, kv_elements: float, element_bytes: int
    ) -> tuple[float, int]:
        """(HBM bytes, kernels) of one forward ring step's merge on the busier kind of rank
        (module constants; `out_elements` over the step's 2c query rows): Transformer
        Engine's fused correction, or torch's fp32 merge and K, V send buffer."""
        a = float(element_bytes)
        if not self.fp32_partials:
            return TE_FORWARD_CORRECTION * a * out_elements, 1
        merge = TORCH_FORWARD_MERGE + a
        full = merge * out_elements
        partial = merge * out_elements / 2.0 + TORCH_REBUILD * out_elements
        # cast, sub, sigmoid, mul, sub, the lse's own as many again, the K, V cat
        return max(full, partial) + 2.0 * 2.0 * a * kv_elements, 11

    def backward_accumulate(
        self, *, q_elements: float, kv_elements: float, element_bytes: int
    ) -> tuple[float, int]:
        """(HBM bytes, kernels) of one backward ring step's gradient accumulation on the busier
        kind of rank (module constants)."""
        a = float(element_bytes)
        if not self.fp32_partials:
            dkv = 2.0 * TE_BACKWARD_DKV * a * kv_elements
            return TE_BACKWARD_DQ * a * q_elements + dkv, 3
        acc = TORCH_ACCUMULATE + a
        rebuild = TORCH_REBUILD
        # i <= r: dQ whole, dK and dV over their first half + rebuilt; i > r: dQ over half
        low = acc * q_elements + 2.0 * (acc / 2.0 + rebuild) * kv_elements
        high = (acc / 2.0 + rebuild) * q_elements + 2.0 * acc * kv_elements
        send = TORCH_SEND_CAT * 2.0 * kv_elements + 2.0 * 2.0 * a * kv_elements
        # dQ, dK, dV adds, the rebuild, the dK, dV cat, the K, V cat
        return max(low, high) + send, 6

    def forward_merges(self, cp: int) -> int:
        """Ring steps whose output is merged: all cp (TE corrects step 0's too), or cp - 1."""
        return cp - 1 if self.fp32_partials else cp


MEGATRON_CORE = RingAttention(name="megatron-core")
TORCH_CONTEXT_PARALLEL = RingAttention(
    name="torch",
    exchange_all_heads=True,
    fp32_partials=True,
    gather_overlaps_first_step=True,
)

_BY_FRAMEWORK: dict[str, RingAttention] = {"torchtitan": TORCH_CONTEXT_PARALLEL}


def ring_attention_for(framework: str | None) -> RingAttention:
    """The context-parallel implementation `framework` runs (module docstring)."""
    return _BY_FRAMEWORK.get(framework or "", MEGATRON_CORE)
