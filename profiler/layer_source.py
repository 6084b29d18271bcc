"""What the per-layer profiler measures: a model's ordered layers, their kinds and inputs.

Two sources:

- a built-in family (`gpt:…` / `llama:…`): `profiler.models.build_model` at each tp degree.
  Only two decoder blocks are built (all blocks of a built-in family are the same by
  construction, and the check below still runs on the two); the profile lists all
  `num_layers` blocks (`planner.catalog.models.layer_refs`).
- a user's model (`module=package.module:factory`). The contract:

  `factory(*, seq_length: int, tp: int = 1)` (the `tp` keyword is passed only when the factory
  accepts it; without it only tp=1 can be profiled; at tp > 1 it must build the shapes one tp
  rank holds) returns either
    1. an `nn.Module` with `embedding`, `layers` (an `nn.ModuleList`) and `head`, called as
       `embedding(tokens)`, each `layer(x)`, `head(x, labels) -> scalar loss` (the shape of
       `profiler.models.ReferenceModel`), or
    2. a sequence of modules (a list, `nn.Sequential` or `nn.ModuleList`), called in a chain,
       each on the previous one's output (a single tensor). A non-scalar last output is
       back-propagated with a fixed random gradient.
  The first layer's input is `example_input(micro_batch_size)` when the returned object has
  that method; otherwise random token ids [micro_batch_size, seq_length] in
  [0, vocab_size), with `vocab_size` from a `vocab_size` attribute or the first `nn.Embedding`.
  Labels for form 1 are random token ids of the same shape.

Layers with the same structure (module types, parameter and buffer shapes and dtypes) share a
kind and are measured once: a form-1 model's kinds are `embedding`, `decoder` and `head`
(`decoder_1`, `decoder_2`, … for blocks unlike the first); a chain's kinds are the lowercased
class names (suffixed the same way).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from planner.catalog.models import layer_refs
from planner.specs import LayerRef, ModelArch
from profiler.models import build_model

__all__ = ["BuiltSource", "Layer", "ModelSource", "signature"]


@dataclass(frozen=True)
class Layer:
    """One layer to measure: its profile name and kind, the module, how it is called."""

    name: str
    kind: str
    module: nn.Module
    takes_labels: bool = False  # head(x, labels) -> loss


@dataclass(frozen=True)
class BuiltSource:
    """A model built at one tp degree, ready to measure."""

    layers: tuple[Layer, ...]
    make_input: Callable[[int, torch.Generator], torch.Tensor]  # (mbs, gen) -> first input
    make_labels: Callable[[int, torch.Generator], torch.Tensor]

    def distinct(self) -> list[tuple[int, Layer]]:
        """The first layer of each kind, with its index, in model order."""
        seen: set[str] = set()
        out: list[tuple[int, Layer]] = []
        for i, layer in enumerate(self.layers):
            if layer.kind not in seen:
                seen.add(layer.kind)
                out.append((i, layer))
        return out


def signature(module: nn.Module) -> tuple[object, ...]:
    """Structure of a module: sub-module types, parameter and buffer names/shapes/dtypes."""
    return (
        tuple((n, type(m).__name__) for n, m in module.named_modules()),
        tuple((n, tuple(p.shape), p.dtype) for n, p in module.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers()),
    )


def _kinds(modules: Sequence[nn.Module], base: str | None) -> list[str]:
    """One kind per distinct signature; `base` names them (else the class name)."""
    by_sig: dict[tuple[object, ...], str] = {}
    used: dict[str, int] = {}
    kinds: list[str] = []
    for m in modules:
        sig = signature(m)
        if sig not in by_sig:
            stem = base or type(m).__name__.lower()
            n = used.get(stem, 0)
            used[stem] = n + 1
            by_sig[sig] = stem if n == 0 else f"{stem}_{n}"
        kinds.append(by_sig[sig])
    return kinds


def _tokens(vocab: int, seq_length: int) -> Callable[[int, torch.Generator], torch.Tensor]:
    def make(mbs: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, vocab, (mbs, seq_length), generator=gen)

    return make


def _vocab_of(obj: Any) -> int:
    vocab = getattr(obj, "vocab_size", None)
    if isinstance(vocab, int):
        return vocab
    mods = obj.modules() if isinstance(obj, nn.Module) else iter(obj)
    for m in mods:
        for sub in m.modules():
            if isinstance(sub, nn.Embedding):
                return int(sub.num_embeddings)
    raise ValueError(
        "cannot make inputs for this model: give it an `example_input(micro_batch_size)` "
        "method, a `vocab_size` attribute, or an nn.Embedding as its first layer"
    )


class ModelSource:
    """A model to profile: a built-in family or a user's factory (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        seq_length: int,
        arch: ModelArch | None = None,
        factory: Callable[..., Any] | None = None,
    ) -> None:
        if (arch is None) == (factory is None):
            raise ValueError("give exactly one of arch or factory")
        self.name = name
        self.seq_length = seq_length
        self.arch = arch
        self.factory = factory
        self._refs: tuple[LayerRef, ...] | None = layer_refs(arch) if arch is not None else None

    @classmethod
    def from_spec(cls, spec: str, *, seq_length: int) -> ModelSource:
        """`gpt:k=v,...`, `llama:k=v,...` or `module=package.module:factory`."""
        if spec.startswith("module="):
            target = spec.removeprefix("module=")
            mod_name, _, attr = target.partition(":")
            if not mod_name or not attr:
                raise ValueError(f"--model {spec!r}: expected module=package.module:factory")
            factory = getattr(importlib.import_module(mod_name), attr)
            return cls(name=target, seq_length=seq_length, factory=factory)
        family, _, rest = spec.partition(":")
        if family not in ("gpt", "llama"):
            raise ValueError(
                f"--model {spec!r}: expected gpt:…, llama:… or module=package.module:factory"
            )
        fields: dict[str, Any] = {"family": family}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"--model {spec!r}: {item!r} is not key=value")
            fields[key.strip()] = value.strip()
        arch = ModelArch.model_validate(fields)
        return cls(name=arch.display_name, seq_length=seq_length, arch=arch)

    def refs(self) -> tuple[LayerRef, ...]:
        """The profile's full layer list (known after the first build for a user's model)."""
        if self._refs is None:
            raise RuntimeError("build() the source once before asking for its layers")
        return self._refs

    def build(self, *, tp: int, dtype: torch.dtype, device: torch.device, seed: int) -> BuiltSource:
        if self.arch is not None:
            return self._build_builtin(self.arch, tp=tp, dtype=dtype, device=device, seed=seed)
        return self._build_user(tp=tp, dtype=dtype, device=device, seed=seed)

    def _build_builtin(
        self, arch: ModelArch, *, tp: int, dtype: torch.dtype, device: torch.device, seed: int
    ) -> BuiltSource:
        small = arch.model_copy(update={"num_layers": min(arch.num_layers, 2)})
        model = build_model(
            small, seq_length=self.seq_length, tp=tp, dtype=dtype, device=device, seed=seed
        )
        blocks = list(model.layers)
        kinds = _kinds(blocks, "decoder")
        if len(set(kinds)) != 1:  # built-in blocks are identical by construction
            raise AssertionError(f"built-in decoder blocks differ: {kinds}")
        layers = (
            Layer("embedding", "embedding", model.embedding),
            *(Layer(f"decoder.{i}", "decoder", b) for i, b in enumerate(blocks)),
            Layer("head", "head", model.head, takes_labels=True),
        )
        make = _tokens(arch.vocab_size, self.seq_length)
        return BuiltSource(layers=layers, make_input=make, make_labels=make)

    def _build_user(
        self, *, tp: int, dtype: torch.dtype, device: torch.device, seed: int
    ) -> BuiltSource:
        assert self.factory is not None
        torch.manual_seed(seed)
        params = inspect.signature(self.factory).parameters
        kwargs: dict[str, Any] = {"seq_length": self.seq_length}
        if "tp" in params:
            kwargs["tp"] = tp
        elif tp != 1:
            raise ValueError(f"factory {self.name} takes no `tp` keyword: cannot profile tp={tp}")
        built: Any = self.factory(**kwargs)
        example = getattr(built, "example_input", None)
        if isinstance(built, nn.Module) and all(
            hasattr(built, a) for a in ("embedding", "layers", "head")
        ):
            parts: Any = built
            blocks = list(parts.layers)
            kinds = _kinds(blocks, "decoder")
            layers = (
                Layer("embedding", "embedding", parts.embedding),
                *(
                    Layer(f"layers.{i}", k, b)
                    for i, (b, k) in enumerate(zip(blocks, kinds, strict=True))
                ),
                Layer("head", "head", parts.head, takes_labels=True),
            )
        elif isinstance(built, Sequence | nn.Sequential | nn.ModuleList):
            modules: list[nn.Module] = list(built)
            kinds = _kinds(modules, None)
            layers = tuple(
                Layer(f"layer.{i}", k, m)
                for i, (m, k) in enumerate(zip(modules, kinds, strict=True))
            )
        else:
            raise TypeError(
                f"factory {self.name} returned {type(built).__name__}: expected a module with "
                "embedding/layers/head or a sequence of modules"
            )
        for layer in layers:
            layer.module.to(device=device, dtype=dtype)
        if self._refs is None:
            self._refs = tuple(LayerRef(name=la.name, kind=la.kind) for la in layers)
        try:
            vocab: int | None = _vocab_of(built)
        except ValueError:
            if not callable(example):
                raise
            vocab = None
        make_labels = _tokens(vocab or 2, self.seq_length)
        if callable(example):

            def make_input(mbs: int, gen: torch.Generator) -> torch.Tensor:
                torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
                x: torch.Tensor = example(mbs)
                return x

            return BuiltSource(layers=layers, make_input=make_input, make_labels=make_labels)
        assert vocab is not None
        return BuiltSource(
            layers=layers, make_input=_tokens(vocab, self.seq_length), make_labels=make_labels
        )
