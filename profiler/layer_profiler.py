"""Per-layer profiler: time and memory of each distinct layer kind -> a measured ModelProfile.

For each tp degree asked, the model is built with one tp rank's shapes; for each micro-batch
size, each distinct layer kind is measured once on the activations the layers before it
produce (`profiler.layer_source`):

- `fw_s`: the forward, autograd recording (as in training).
- backward, timed after an untimed forward, in paired rounds:
  full backward B = `torch.autograd.backward(out, grad)` (input and weight gradients);
  input gradient I = `torch.autograd.grad(out, input, grad)`: autograd computes only what the
  input's gradient needs (weight-gradient matmuls are skipped: each node is asked only for the
  outputs that lead to a requested input); `bw_input_s` = median(I) and
  `bw_weight_s` = median over rounds of (B - I), i.e. W = B - I (Qi et al. 2024 split B into I
  and W). Layers whose input is not differentiable (token ids) have I = 0, W = B.
- split backward as torch.distributed.pipelining runs it (zb-h1, zbv): `split_bw_input_s` =
  `stage_backward_input` on the layer (autograd.grad plus its graph walk and hooks),
  `split_bw_weight_s` = `stage_backward_weight` on the parameter groups it recorded (one
  autograd call per group). Measured, because they cost more than I and W above (I + W = B).
  A layer whose input is not differentiable: split I = 0, split W = B (torch's first stage).
- recompute: `selective` re-runs the attention core softmax(QK^T)V (timed on the block's own
  q, k, v); `full` = (forward + backward of the layer inside torch's `checkpoint_wrapper`, as
  the runner wraps it) - (the plain layer's forward + backward), paired rounds, each round at
  least the layer's measured forward (the checkpoint re-runs it: full_recompute_stat); `none`
  is 0.
- activation bytes per recompute mode, counted exactly with `saved_tensors_hooks`
  (`profiler.saved_tensors`): per storage, parameters and buffers excluded.
- parameter bytes and count (one tp rank), output bytes (what a stage boundary carries),
  forward FLOPs from `torch.utils.flop_counter.FlopCounterMode` (measured, not a formula),
  TP bytes by Megatron's rule (built-in families), and CUDA peak allocated memory of a
  forward + backward (in `notes`).
Timing: CUDA events on GPU, `perf_counter` on CPU; median of `repeats` rounds after `warmup`;
the relative inter-quartile spread of each timing goes to `LayerCost.spread`.
Per-action overhead (`action_overhead=True`, the default): the fixed time
torch.distributed.pipelining's PipelineStage adds to each F / B / I / W action, measured on the
same device and dtype (`profiler.action_overhead`) -> `ModelProfile.action_overhead_s`.
`concurrency=K > 1` (CPU): the times are then scaled by the measured slowdown of the model's
fw+bw when K processes share this host's cores (`profiler.contention`), for runs whose K
ranks share them.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from planner.specs import LayerCost, ModelProfile, ModeValues, ProfilePoint
from planner.specs.model import NO_OVERHEAD
from profiler.action_overhead import measure_action_overhead
from profiler.action_overhead import note as overhead_note
from profiler.layer_source import BuiltSource, Layer, ModelSource
from profiler.models import Attention, RecomputeMode, set_recompute
from profiler.saved_tensors import SavedTensors, count_saved
from profiler.timing import Stat, measure, measure_chain, measure_pairs, summarize

__all__ = [
    "LayerMeasurement",
    "ProfileOptions",
    "ProfileResult",
    "dtype_name",
    "measure_layer",
    "parse_dtype",
    "profile_model",
]

MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} is not one of {', '.join(_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    for name, value in _DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"dtype {dtype} is not one of {', '.join(_DTYPES)}")


@dataclass(frozen=True)
class ProfileOptions:
    micro_batch_sizes: tuple[int, ...]
    tp_degrees: tuple[int, ...] = (1,)
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    repeats: int = 10
    warmup: int = 2
    seed: int = 0
    progress: bool = False
    concurrency: int = 1  # processes that will share this host's cores (profiler.contention)
    contention_duration_s: float = 2.0  # each timed phase of the contention measurement
    action_overhead: bool = True  # measure PipelineStage's fixed cost per action

    def __post_init__(self) -> None:
        if not self.micro_batch_sizes or min(self.micro_batch_sizes) < 1:
            raise ValueError(f"micro_batch_sizes={self.micro_batch_sizes} must be >= 1")
        if not self.tp_degrees or min(self.tp_degrees) < 1:
            raise ValueError(f"tp_degrees={self.tp_degrees} must be >= 1")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"repeats={self.repeats} must be >= 1, warmup={self.warmup} >= 0")
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency} must be >= 1")
        if self.concurrency > 1 and self.device != "cpu":
            raise ValueError(f"concurrency={self.concurrency} is for device cpu, not {self.device}")


@dataclass(frozen=True)
class LayerMeasurement:
    """Everything measured for one layer kind at one (micro-batch size, tp)."""

    kind: str
    micro_batch_size: int
    tp: int
    cost: LayerCost
    saved: dict[str, SavedTensors]
    peak_allocated_bytes: int | None = None
    stats: dict[str, Stat] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfileResult:
    profile: ModelProfile
    measurements: tuple[LayerMeasurement, ...]


def _state_tensors(module: nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


def _param_totals(module: nn.Module) -> tuple[int, int]:
    seen: dict[int, torch.Tensor] = {id(p): p for p in module.parameters()}
    count = sum(p.numel() for p in seen.values())
    return count, sum(p.numel() * p.element_size() for p in seen.values())


def _attention_inputs(module: nn.Module, call: Callable[[], object]) -> list[tuple[Attention, Any]]:
    """Each Attention sub-module with the input it received in one forward."""
    captured: list[tuple[Attention, Any]] = []
    hooks = []
    for sub in module.modules():
        if isinstance(sub, Attention):

            def pre(mod: nn.Module, args: tuple[Any, ...], _a: Attention = sub) -> None:
                captured.append((_a, args[0].detach()))

            hooks.append(sub.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            call()
    finally:
        for h in hooks:
            h.remove()
    return captured


def _cpu_flash_flops(query_shape: Any, key_shape: Any, value_shape: Any, *_: Any, **__: Any) -> int:
    """FLOPs of torch's fused CPU attention kernel, which FlopCounterMode does not know:
    the same count as its formula for the CUDA kernels (Q K^T and scores x V, full s x s)."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


def _flop_counter() -> FlopCounterMode:
    custom: dict[Any, Any] = {}
    cpu_op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_op is not None:
        custom[cpu_op] = _cpu_flash_flops
    return FlopCounterMode(display=False, custom_mapping=custom)


def tp_comm_bytes(kind: str, *, tokens: int, hidden: int, elem_bytes: int, tp: int) -> float:
    """Bytes the TP group all-reduces per micro-batch, forward + backward (one tp rank).

    Megatron (Shoeybi et al. 2019, Fig. 4): a decoder layer all-reduces b*s*h twice in the
    forward and twice in the backward; the vocab-parallel embedding sums its output (forward)
    and the head its input gradient (backward), plus three fp32 all-reduces of s*b in the
    vocab-parallel cross-entropy. The same rule as `planner.catalog.models.analytic_costs`.
    """
    if tp == 1:
        return 0.0
    e = float(tokens * hidden * elem_bytes)
    if kind == "decoder":
        return 4.0 * e
    if kind == "embedding":
        return 2.0 * e
    if kind == "head":
        return 2.0 * e + 3.0 * 4.0 * tokens
    return 0.0


def full_recompute_stat(
    plain_s: Sequence[float], ckpt_s: Sequence[float], *, forward_s: float
) -> Stat:
    """What full recompute adds to one micro-batch's forward + backward, from paired rounds of
    the plain layer (`plain_s`) and the checkpointed one (`ckpt_s`): per round their
    difference, and at least `forward_s`, the layer's measured forward. A checkpointed layer
    re-runs its whole forward inside its backward (torch.utils.checkpoint's documented
    behaviour; Korthikanti et al. 2022, "Reducing Activation Recomputation": full recompute
    costs one extra forward pass), so what it adds is at least one forward. A round whose
    difference falls below that (on a loaded machine the plain round can come out the slower
    one, the difference then 0 or negative) measured the machine's noise, not the recompute."""
    diffs = [max(forward_s, c - p) for p, c in zip(plain_s, ckpt_s, strict=True)]
    return summarize(diffs)


def measure_layer(
    layer: Layer,
    x: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
    tp: int = 1,
    micro_batch_size: int = 1,
    hidden_size: int | None = None,
) -> LayerMeasurement:
    """Measure one layer on input `x` (and `labels` for a head). See the module docstring."""
    module = set_recompute(layer.module, "none")
    x = x.detach()
    differentiable = x.is_floating_point()
    if differentiable:
        x.requires_grad_(True)

    def call(mod: nn.Module = module) -> torch.Tensor:
        out: torch.Tensor = mod(x, labels) if layer.takes_labels else mod(x)
        return out

    first = call()
    gen = torch.Generator().manual_seed(1234)
    grad_out = (
        None
        if first.dim() == 0
        else torch.randn(first.shape, generator=gen).to(device=first.device, dtype=first.dtype)
    )
    output_bytes = first.numel() * first.element_size()
    del first

    state = _state_tensors(module)
    saved: dict[str, SavedTensors] = {}
    for mode in MODES:
        mod = set_recompute(module, mode)
        out, saved[mode] = count_saved(lambda m=mod: call(m), exclude=state)  # type: ignore[misc]
        del out
    module = set_recompute(module, "none")

    with _flop_counter() as counter:
        call()
    fw_flops = float(counter.get_total_flops())

    fw = measure(lambda: None, lambda _: call(), device=device, repeats=repeats, warmup=warmup)

    def backward(out: torch.Tensor) -> None:
        torch.autograd.backward(out, grad_out)

    def input_grad(out: torch.Tensor) -> None:
        torch.autograd.grad(out, x, grad_out)

    if differentiable:
        full, inp = measure_pairs(
            call, backward, input_grad, device=device, repeats=repeats, warmup=warmup
        )
        bw, bw_in = summarize(full), summarize(inp)
        bw_w = summarize([max(0.0, f - i) for f, i in zip(full, inp, strict=True)])
        # I and W as torch's split backward runs them (PipelineStage.backward_one_chunk with
        # full_backward=False, then backward_weight_one_chunk): the same two functions on
        # this layer, W on the parameter groups I recorded.
        params = list(module.parameters())

        def split_input(out: torch.Tensor) -> list[dict[str, Any]]:
            grads = None if grad_out is None else [grad_out]
            _, groups = stage_backward_input([out], grads, [x], iter(params))
            return groups

        def split_weight(groups: list[dict[str, Any]]) -> None:
            stage_backward_weight(iter(params), groups)

        def owned() -> torch.Tensor:
            # stage_backward_input detaches the output in place, which a view refuses (a
            # Linear on 3-d input returns one); the clone's backward passes the gradient on
            out = call()
            return out.clone() if out._is_view() else out

        s_in, s_w = measure_chain(
            owned, split_input, split_weight, device=device, repeats=repeats, warmup=warmup
        )
        x.grad = None
        split_in, split_w = summarize(s_in), summarize(s_w)
    else:
        bw = measure(call, backward, device=device, repeats=repeats, warmup=warmup)
        bw_in, bw_w = Stat(0.0, 0.0, ()), bw
        # a first stage's split I does nothing and its W runs the full backward (torch's
        # PipelineStage: the input has no gradient to take)
        split_in, split_w = bw_in, bw_w

    # Full recompute as the runner runs it: the layer inside torch's checkpoint_wrapper
    # (profiler.models.set_recompute), forward + backward, against the plain layer's in the
    # same rounds. The difference is what full recompute adds to a micro-batch: the re-run
    # forward inside the backward and the checkpoint's own hooks (its forward saves nothing
    # but costs more than the plain one); the cost model charges it in the backward.
    wrapped = set_recompute(module, "full")  # `module` itself stays the plain layer

    def fw_bw(mod: nn.Module) -> Callable[[None], None]:
        def run(_: None) -> None:
            backward(call(mod))

        return run

    plain_s, ckpt_s = measure_pairs(
        lambda: None, fw_bw(module), fw_bw(wrapped), device=device, repeats=repeats, warmup=warmup
    )
    recompute_full = full_recompute_stat(plain_s, ckpt_s, forward_s=fw.median_s)

    attn = _attention_inputs(module, call)
    if attn:

        def qkv() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
            return [a.project(inp) for a, inp in attn]

        def cores(qkvs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
            for q, k, v in qkvs:
                Attention.core(q, k, v)

        selective = measure(qkv, cores, device=device, repeats=repeats, warmup=warmup)
    else:
        selective = Stat(0.0, 0.0, ())

    peak: int | None = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        backward(call())
        torch.cuda.synchronize(device)
        peak = int(torch.cuda.max_memory_allocated(device) - base)
    for p in module.parameters():
        p.grad = None

    count, pbytes = _param_totals(module)
    tokens = int(x.shape[0] * x.shape[1]) if x.dim() >= 2 else int(x.numel())
    elem = (
        x.element_size()
        if differentiable
        else (grad_out.element_size() if grad_out is not None else 4)
    )
    stats = {
        "fw_s": fw,
        "bw_s": bw,
        "bw_input_s": bw_in,
        "bw_weight_s": bw_w,
        "recompute_selective_s": selective,
        "recompute_full_s": recompute_full,
        "split_bw_input_s": split_in,
        "split_bw_weight_s": split_w,
    }
    cost = LayerCost(
        fw_s=fw.median_s,
        bw_input_s=bw_in.median_s,
        bw_weight_s=bw_w.median_s,
        recompute_s=ModeValues(
            none=0.0, selective=selective.median_s, full=recompute_full.median_s
        ),
        activation_bytes=ModeValues(
            none=saved["none"].activation_bytes,
            selective=saved["selective"].activation_bytes,
            full=saved["full"].activation_bytes,
        ),
        param_bytes=pbytes,
        param_count=count,
        output_bytes=output_bytes,
        tp_comm_bytes=tp_comm_bytes(
            layer.kind, tokens=tokens, hidden=hidden_size or 0, elem_bytes=elem, tp=tp
        )
        if hidden_size
        else 0.0,
        fw_flops=fw_flops,
        split_bw_input_s=split_in.median_s,
        split_bw_weight_s=split_w.median_s,
        spread={k: round(v.spread, 4) for k, v in stats.items() if v.samples_s},
    )
    return LayerMeasurement(
        kind=layer.kind,
        micro_batch_size=micro_batch_size,
        tp=tp,
        cost=cost,
        saved=saved,
        peak_allocated_bytes=peak,
        stats=stats,
    )


def _layer_inputs(
    built: BuiltSource, mbs: int, *, device: torch.device, dtype: torch.dtype, seed: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The input each layer sees in a forward of one micro-batch (index-aligned), and labels."""
    gen = torch.Generator().manual_seed(seed)
    x = built.make_input(mbs, gen).to(device)
    if x.is_floating_point():
        x = x.to(dtype)
    labels = built.make_labels(mbs, gen).to(device)
    inputs: list[torch.Tensor] = []
    last = max(i for i, _ in built.distinct())
    with torch.no_grad():
        for i, layer in enumerate(built.layers[: last + 1]):
            inputs.append(x)
            if i < last:
                x = layer.module(x, labels) if layer.takes_labels else layer.module(x)
    return inputs, labels


class _Bar:
    """A progress bar on stderr (rich), or nothing when disabled."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._bar: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task("profiling", total=total)

    def __enter__(self) -> _Bar:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def total(self, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def step(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return f"cpu {platform.machine()} ({torch.get_num_threads()} threads)"


def profile_model(source: ModelSource, options: ProfileOptions) -> ProfileResult:
    """Measure every distinct layer kind at each (micro-batch size, tp) -> a ModelProfile."""
    device = torch.device(options.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda asked for but torch.cuda.is_available() is False")
    hidden = source.arch.hidden_size if source.arch is not None else None
    measurements: list[LayerMeasurement] = []
    points: list[ProfilePoint] = []
    notes: dict[str, str] = {}
    rounds = len(options.tp_degrees) * len(options.micro_batch_sizes)
    with torch.random.fork_rng(devices=[]), _Bar(options.progress, rounds * 3) as bar:
        for tp in options.tp_degrees:
            built = source.build(tp=tp, dtype=options.dtype, device=device, seed=options.seed)
            distinct = built.distinct()
            bar.total(rounds * len(distinct))
            for mbs in options.micro_batch_sizes:
                inputs, labels = _layer_inputs(
                    built, mbs, device=device, dtype=options.dtype, seed=options.seed + mbs
                )
                kinds: dict[str, LayerCost] = {}
                for index, layer in distinct:
                    bar.step(f"tp={tp} mbs={mbs} {layer.kind}")
                    m = measure_layer(
                        layer,
                        inputs[index],
                        labels if layer.takes_labels else None,
                        device=device,
                        repeats=options.repeats,
                        warmup=options.warmup,
                        tp=tp,
                        micro_batch_size=mbs,
                        hidden_size=hidden,
                    )
                    measurements.append(m)
                    kinds[layer.kind] = m.cost
                    if m.peak_allocated_bytes is not None:
                        notes[f"peak_allocated_bytes.{layer.kind}.mbs{mbs}.tp{tp}"] = str(
                            m.peak_allocated_bytes
                        )
                points.append(ProfilePoint(micro_batch_size=mbs, tp=tp, kinds=kinds))
            del built
    notes["timing"] = (
        f"median of {options.repeats} rounds after {options.warmup} warm-up; spread = IQR/median; "
        "bw_weight_s = B - I per round"
    )
    overhead = NO_OVERHEAD
    if options.action_overhead:
        try:
            overhead, per = measure_action_overhead(device=device, dtype=options.dtype)
            notes["action_overhead"] = (
                overhead_note(per) + "; action_overhead_s is the mean of the three positions"
            )
        except RuntimeError as e:
            notes["action_overhead"] = f"not measured: {e}"
    profile = ModelProfile(
        name=source.name,
        source="measured",
        dtype=dtype_name(options.dtype),
        device_name=device_name(device),
        seq_length=source.seq_length,
        layers=source.refs(),
        points=tuple(points),
        arch=source.arch,
        torch_version=torch.__version__,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        notes=notes,
        action_overhead_s=overhead,
    )
    if options.concurrency > 1:
        from profiler.contention import measure_contention, scale_profile

        contention = measure_contention(
            source,
            copies=options.concurrency,
            tp=options.tp_degrees[0],
            micro_batch_size=options.micro_batch_sizes[0],
            dtype=options.dtype,
            seed=options.seed,
            duration_s=options.contention_duration_s,
        )
        profile = scale_profile(profile, contention)
    return ProfileResult(profile=profile, measurements=tuple(measurements))
