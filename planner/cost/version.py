"""The cost model's version: which formulas and constants a stored plan's numbers came from.

`COST_MODEL_VERSION` is recorded on every stored plan (with the calibration it used) so that
the history can tell plans chosen under different models apart and `replan` can show what an
upgrade changes (docs/cost-model.md §5, docs/service.md).

The rule for bumping it, by hand: any change that moves a predicted number of some request --
step time, bubble, memory, or which configuration the search picks -- (a formula, a catalog
number, a default constant of planner/catalog/efficiency.py, a memory term) bumps it. Changes
that leave every prediction the same (speed, refactors, new fields, messages) do not. The
form is `YYYY.MM.N`: the date of the change and a counter within that month.
"""

from __future__ import annotations

COST_MODEL_VERSION = "2026.12.4"
"""Shape-aware GEMMs (tile and wave quantization, HBM roofline, per-kernel cost), alpha-beta
collectives, the four calibrated constants fitted on Megatron-LM Table 1, per-rank memory over
the simulated timeline (issue #17 §1 and §3); context and expert parallelism and MoE, MLA,
head_dim and sliding-window layers (issue #19); FlashAttention-2 capped at its Hopper
utilisation (planner.catalog.hardware); ZeRO-2 and ZeRO-3 traffic per micro-batch; the
context-parallel ring as cp flash kernels with FlashAttention-2's own tiles, and torch's ring
(torchtitan) as its own implementation (planner.catalog.ring_attention)."""
