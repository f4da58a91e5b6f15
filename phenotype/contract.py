"""The block contract, as one function every kind is held to: built-in and plugin alike.

`check_kind(kind)` builds the kind's block at its defaults (a channel or sequence block on
its own; a regulatory block inside a two-region model, since it acts between regions) in
float64 and returns a `Failure` per check it fails, named, with a one-line detail:

* ``build``: the config builds a module (nothing else is checked when it does not);
* ``params``: ``num_params()`` equals the built module's parameters, also built on the
  ``meta`` device, and ``0 < active_params() <= num_params()``;
* ``shape``, ``finite``: ``forward`` maps (B, T, D) to (B, T, D), finite;
* ``gradients``: a random cotangent reaches every parameter, finite and non-zero;
* ``causality``: changing the inputs after position t leaves every output up to t unchanged
  (exactly: atol 1e-12), and changes some output after it;
* ``step == forward``: token-by-token ``step`` from ``init_state`` gives ``forward``'s outputs
  (rtol = atol = 1e-9);
* ``state size``: what ``init_state`` and T ``step``s hold is ``state_size(T)`` =
  ``state_elements(T)`` per sequence;
* ``flops``: torch's FlopCounterMode counts ``flops_per_token(T) - extra_flops_per_token()``
  per token (kernels' scan work, declared as extra, is kept out of the count).

`tests/phenotype/test_blocks.py` runs it over every registered kind, and `evolve plugin
check MODULE` over a plugin's kinds, so a plugin passes exactly what the built-ins pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import FlopCounterMode

import dogma_evolve.kernels as kernels
from dogma_evolve.genome import KINDS, Genome
from dogma_evolve.genome.validate import SIGNAL_KIND
from dogma_evolve.phenotype.blocks.base import REGISTRY, BlockConfig, Mixer
from dogma_evolve.phenotype.config import CodingStage, model_config

B, T = 2, 11  # a batch and an odd length: what the built-ins are checked at
# Every public kernel entry point: its work is the blocks' declared `extra_flops_per_token`,
# so the FLOP counter must not see inside it (the CPU path may or may not use matmuls).
KERNEL_OPS = ("selective_scan", "wkv", "wkv_with_state", "gated_linear_recurrence")
CHECKS = (
    "build",
    "params",
    "shape",
    "finite",
    "gradients",
    "causality",
    "step == forward",
    "state size",
    "flops",
)


@dataclass(frozen=True)
class Failure:
    """One failed check: its name (of `CHECKS`) and a one-line detail."""

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


def genome_doc(
    bases: list[dict[str, Any]], d_model: int = 32, copies: int = 1, **structural: Any
) -> dict[str, Any]:
    """A one-coding-region genome document (vocab 61, max_len 64, rope) around ``bases``."""
    settings = {"d_model": d_model, "vocab": 61, "max_len": 64, "positions": "rope", **structural}
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": settings},
            {"id": "p1", "type": "promoter", "settings": {"copies": copies}},
            {"id": "c1", "type": "coding", "bases": bases},
        ]
    }


def block_config(
    kind: str, params: dict[str, Any] | None = None, d_model: int = 32, **structural: Any
) -> BlockConfig:
    """The config a one-gene genome of ``kind`` decodes to (its first base type)."""
    base = KINDS[kind].bases[0]
    genome = Genome.from_dict(
        genome_doc([{"base": base, "kind": kind, "params": params or {}}], d_model, **structural)
    )
    stage = model_config(genome).stages[0]
    assert isinstance(stage, CodingStage)
    return stage.layers[0].block


def state_elements(state: Any) -> int:
    """Elements of every tensor in a (nested) state."""
    if isinstance(state, torch.Tensor):
        return state.numel()
    if isinstance(state, dict):
        return sum(state_elements(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(state_elements(v) for v in state)
    return 0


@contextlib.contextmanager
def kernels_unseen() -> Iterator[None]:
    """Run kernel ops (and torch's fused LSTM/GRU) outside any dispatch mode, so a
    FlopCounterMode does not count them; restored on exit."""

    def hidden(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with _disable_current_modes():
                return fn(*args, **kwargs)

        return call

    saved = {name: getattr(kernels, name) for name in KERNEL_OPS if hasattr(kernels, name)}
    rnn = vars(torch.nn.modules.rnn)  # the module's namespace: its private `_VF` is patched
    fused = rnn["_VF"]

    class FusedHidden:
        lstm, gru = staticmethod(hidden(fused.lstm)), staticmethod(hidden(fused.gru))

        def __getattr__(self, name: str) -> Any:
            return getattr(fused, name)

    try:
        for name, fn in saved.items():
            setattr(kernels, name, hidden(fn))
        rnn["_VF"] = FusedHidden()
        yield
    finally:
        for name, fn in saved.items():
            setattr(kernels, name, fn)
        rnn["_VF"] = fused


def counted_flops(fn: Callable[..., Any], *args: Any) -> int:
    """FLOPs FlopCounterMode counts for fn(*args), SDPA through its countable math path."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn(*args)
    return int(fc.get_total_flops())


def _differ(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def check_block(cfg: BlockConfig) -> list[Failure]:
    """The failed checks of a sequence or channel block's config (module docstring)."""
    torch.manual_seed(0)
    try:
        module = cast(Mixer[Any], cfg.build().to(torch.float64))
    except Exception as e:  # a plugin's build may raise anything: the check reports it
        return [Failure("build", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")]
    failures: list[Failure] = []
    fail = failures.append
    d = cfg.d_model
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, d, dtype=torch.float64, generator=gen)

    built = sum(p.numel() for p in module.parameters())
    with torch.device("meta"):
        on_meta = sum(p.numel() for p in cfg.build().parameters())
    if not cfg.num_params() == built == on_meta:
        fail(Failure("params", f"num_params() {cfg.num_params():,}, built {built:,}, on meta {on_meta:,}"))
    elif not 0 < cfg.active_params() <= cfg.num_params():
        fail(Failure("params", f"active_params() {cfg.active_params():,} not in (0, {cfg.num_params():,}]"))

    module.train()
    y = module(x)
    if tuple(y.shape) != (B, T, d):
        return [*failures, Failure("shape", f"forward of {(B, T, d)} gave {tuple(y.shape)}")]
    if not torch.isfinite(y).all():
        fail(Failure("finite", "forward gave non-finite outputs"))
    (y * torch.randn(y.shape, dtype=y.dtype, generator=gen)).sum().backward()
    dead = [n for n, p in module.named_parameters() if p.grad is None or not (p.grad.abs().sum() > 0)]
    if dead:
        fail(Failure("gradients", f"no gradient reaches {', '.join(dead[:3])}"))

    module.eval()
    with torch.no_grad():
        y = module(x)
        t = T // 2
        x2 = x.clone()
        x2[:, t + 1 :] += torch.randn(B, T - t - 1, d, dtype=x.dtype, generator=gen)
        y2 = module(x2)
        past = _differ(y2[:, : t + 1], y[:, : t + 1])
        if past > 1e-12:
            fail(
                Failure(
                    "causality", f"outputs at positions <= {t} moved by {past:.3g} when later inputs changed"
                )
            )
        elif torch.allclose(y2[:, t + 1 :], y[:, t + 1 :]):
            fail(Failure("causality", f"outputs after position {t} ignore the inputs there"))
        try:
            state = module.init_state(B)
            steps = []
            for i in range(T):
                y_t, state = module.step(x[:, i], state)
                steps.append(y_t)
            stepped = torch.stack(steps, 1)
        except Exception as e:  # as for build
            fail(
                Failure(
                    "step == forward", f"step raised {type(e).__name__}: {' '.join(str(e).split())[:160]}"
                )
            )
        else:
            if stepped.shape != y.shape or not torch.allclose(stepped, y, rtol=1e-9, atol=1e-9):
                gap = _differ(stepped, y) if stepped.shape == y.shape else float("nan")
                fail(Failure("step == forward", f"step's outputs differ from forward's by up to {gap:.3g}"))
            held, said = state_elements(state), (B * module.state_size(T), B * cfg.state_elements(T))
            if not held == said[0] == said[1]:
                fail(
                    Failure(
                        "state size",
                        f"state holds {held:,}; state_size {said[0]:,}, state_elements {said[1]:,}",
                    )
                )

    with kernels_unseen():
        flops = counted_flops(module, x)
    declared = B * T * (cfg.flops_per_token(T) - cfg.extra_flops_per_token())
    if flops != declared:
        fail(Failure("flops", f"counted {flops:,} for {B}x{T} tokens, declared {declared:,}"))
    return failures


def check_regulatory(kind: str) -> list[Failure]:
    """The failed checks of a regulatory kind at its defaults, in a small model (attention +
    swiglu, two copies) it regulates: the model's causality, step == forward, gradients to
    every parameter, and accounting (params, FLOPs) equal to the built model."""
    from dogma_evolve.phenotype.accounting import account

    doc = genome_doc(
        [
            {"base": "T", "kind": "attention", "params": {"heads": 2}},
            {"base": "A", "kind": "swiglu", "params": {}},
        ],
        copies=2,
    )
    doc["regions"].insert(
        1, {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": kind, "params": {}}]}
    )
    if kind == SIGNAL_KIND:  # a gate's signal reaches its target through an edge
        doc["edges"] = [{"source": "r0", "target": "c1", "kind": "activates"}]
    failures: list[Failure] = []
    try:
        genome = Genome.from_dict(doc)
        torch.manual_seed(0)
        model = model_config(genome).build().double()
    except Exception as e:  # as for build
        return [Failure("build", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 61, (B, T), generator=gen)
    logits = model(ids)
    (logits * torch.randn(logits.shape, dtype=logits.dtype, generator=gen)).sum().backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or not (p.grad.abs().sum() > 0)]
    if dead:
        failures.append(Failure("gradients", f"no gradient reaches {', '.join(dead[:3])}"))
    model.eval()
    with torch.no_grad():
        logits = model(ids)
        ids2 = ids.clone()
        ids2[:, 6:] = (ids2[:, 6:] + 1) % 61
        past = _differ(model(ids2)[:, :6], logits[:, :6])
        if past > 1e-12:
            failures.append(
                Failure("causality", f"logits at positions < 6 moved by {past:.3g} when later tokens changed")
            )
        state, steps = model.init_state(B), []
        for t in range(T):
            out, state = model.step(ids[:, t], state)
            steps.append(out)
        if not torch.allclose(torch.stack(steps, 1), logits, rtol=1e-9, atol=1e-9):
            failures.append(Failure("step == forward", "the model's step differs from its forward"))
    acct = account(genome, seq_len=T)
    if acct.params != model.num_params():
        failures.append(Failure("params", f"accounted {acct.params:,}, built {model.num_params():,}"))
    with kernels_unseen():
        flops = counted_flops(model, ids)
    declared = B * T * (acct.flops_per_token - model.extra_flops_per_token())
    if flops != declared:
        failures.append(Failure("flops", f"counted {flops:,} for {B}x{T} tokens, declared {declared:,}"))
    return failures


def check_kind(kind: str, params: dict[str, Any] | None = None, **structural: Any) -> list[Failure]:
    """The failed checks of a registered kind (at ``params``, defaults elsewhere)."""
    if REGISTRY[kind].role == "regulatory":
        return check_regulatory(kind)
    try:
        cfg = block_config(kind, params, **structural)
    except Exception as e:  # a plugin's derive or from_gene may raise anything
        return [Failure("build", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")]
    return check_block(cfg)


__all__ = [
    "CHECKS",
    "Failure",
    "block_config",
    "check_block",
    "check_kind",
    "check_regulatory",
    "counted_flops",
    "genome_doc",
    "kernels_unseen",
    "state_elements",
]
