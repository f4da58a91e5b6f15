"""The phenotype: a decoded genome as one `nn.Module`, token ids (B, T) -> logits (B, T, V).

Forward runs the stages in genome order (see `phenotype.config` for the expression rules);
`init_state` / `step` run the same network one token at a time from a cache, and
`generate` decodes greedily or by sampling from that cache. Both forms share one walk over
the stages (`DogmaModel._walk`) and one residual rule (`ResidualLayer`); they differ only
in how a coding region's layers run (the whole sequence, or one token with its states).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import Carry, Mixer
from dogma_evolve.phenotype.blocks.regulation import AllostericRouter, EdgeGate
from dogma_evolve.phenotype.config import CodingStage, ModelConfig, RegulatoryStage


class ResidualLayer(nn.Module):
    """x + g·s·f(norm(x)) (pre-norm) or norm(x + g·s·f(x)) (post-norm), f the mixer, g the
    region's gate (or None), s its strength; `forward` and `step` differ only in f's call."""

    def __init__(self, mixer: Mixer[Any], norm: nn.Module, pre_norm: bool, strength: float):
        super().__init__()
        self.mixer, self.norm = mixer, norm
        self.pre_norm, self.strength = pre_norm, strength

    def _mixer_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.pre_norm else x

    def _residual(self, x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        if self.strength != 1.0:
            y = y * self.strength
        if gate is not None:
            y = y * gate
        return x + y if self.pre_norm else self.norm(x + y)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None, carry: Carry) -> torch.Tensor:
        """x: (B, T, D), gate (B, T, 1) or None -> (B, T, D)."""
        return self._residual(x, self.mixer.forward_carried(self._mixer_input(x), carry), gate)

    def step(
        self, x_t: torch.Tensor, gate: torch.Tensor | None, state: Any, carry: Carry
    ) -> tuple[torch.Tensor, Any]:
        """x_t: (B, D), gate (B, 1) or None, the mixer's state -> (B, D), its next state."""
        y, state = self.mixer.step_carried(self._mixer_input(x_t), state, carry)
        return self._residual(x_t, y, gate), state


RegionRun = Callable[[str, list[ResidualLayer], torch.Tensor, torch.Tensor | None], torch.Tensor]
"""(coding region id, its layers, x (B, T, D), its gate (B, T, 1) or None) -> x after them."""


def sinusoidal_positions(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """(T,) integer positions -> (T, D): sin on even, cos on odd channels (Vaswani et al.)."""
    inv = torch.exp(-math.log(10_000.0) * torch.arange(0, d_model, 2, device=positions.device) / d_model)
    angles = positions.float()[:, None] * inv[None, :]
    out = torch.zeros(positions.shape[0], d_model, device=positions.device)
    out[:, 0::2] = angles.sin()
    out[:, 1::2] = angles.cos()[:, : d_model // 2]
    return out


class DogmaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.positions == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
        pre_norm = cfg.norm_position in ("pre", "pre_embed")
        if cfg.norm_position == "pre_embed":
            self.embed_norm = cfg.norm.build()
        self.stages = nn.ModuleDict()
        self.routers = nn.ModuleDict()  # allosteric routers per regulatory region
        self.edge_gates = nn.ModuleDict()
        self.loop_scales = nn.ParameterDict()
        signal_width: dict[str, int] = {}
        for stage in cfg.stages:
            if isinstance(stage, RegulatoryStage):
                self.stages[stage.region_id] = nn.ModuleList(g.build() for g in stage.gates)
                if stage.routers:
                    self.routers[stage.region_id] = nn.ModuleList(r.build() for r in stage.routers)
                signal_width[stage.region_id] = stage.signal_width
                for src, represses in stage.regulated_by:
                    self.edge_gates[f"{src}__{stage.region_id}"] = EdgeGate(signal_width[src], represses)
                continue
            if stage.shares_from is not None:
                source = self._layers(stage.shares_from)
                layers = [
                    ResidualLayer(
                        source[i % len(source)].mixer, source[i % len(source)].norm, pre_norm, stage.strength
                    )
                    for i in range(len(stage.layers))
                ]
            else:
                layers = [
                    ResidualLayer(_mixer(layer.block.build()), layer.norm.build(), pre_norm, stage.strength)
                    for layer in stage.layers
                ]
            self.stages[stage.region_id] = nn.ModuleList(layers)
            for src, represses in stage.gates:
                self.edge_gates[f"{src}__{stage.region_id}"] = EdgeGate(signal_width[src], represses)
            for src in stage.loops_from:
                self.loop_scales[f"{src}__{stage.region_id}"] = nn.Parameter(torch.zeros(()))
        self.final_norm = cfg.norm.build() if pre_norm else nn.Identity()
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        """Width-aware init: matrices N(0, 1/fan_in); token embeddings N(0, 1), or
        N(0, 1/d) when tied to the head so initial logits stay O(1). GPT-2's fixed 0.02
        suits width 768 but starves the narrow models a search trains for a few hundred
        steps (measured on mqar: 0.25 vs 1.0 accuracy at width 64). Parameters tagged
        no-weight-decay (A_log, S4D eigenvalues, ...) keep their blocks' structured init."""
        for name, p in self.named_parameters():
            if p.dim() != 2 or "edge_gates" in name or getattr(p, "_no_weight_decay", False):
                continue
            if name.startswith(("embed.", "pos_embed.")):
                std = self.cfg.d_model**-0.5 if self.cfg.tie_embeddings or name[0] == "p" else 1.0
            else:
                std = p.shape[1] ** -0.5
            nn.init.normal_(p, std=std)

    # -- parallel form -------------------------------------------------------------------
    def _embed(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        x = self.embed(ids)
        if self.cfg.positions in ("learned", "sinusoidal"):
            pos = torch.arange(start, start + ids.shape[-1], device=ids.device)
            if self.cfg.positions == "learned":
                x = x + self.pos_embed(pos)
            else:
                x = x + sinusoidal_positions(pos, self.cfg.d_model).to(x.dtype)
        if self.cfg.norm_position == "pre_embed":
            x = self.embed_norm(x)
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final_norm(x)
        return self.head(x) if self.head is not None else F.linear(x, self.embed.weight)

    def _edge_gates(
        self,
        target: str,
        sources: tuple[tuple[str, bool], ...],
        signals: dict[str, torch.Tensor],
        gate: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """`gate` (B, T, 1) or None times the gates that the `activates`/`represses` edges
        from `sources` put on `target`, each read from its source's signal (module
        `blocks.regulation`); None when there is neither."""
        for src, _ in sources:
            g = self.edge_gates[f"{src}__{target}"](signals[src])
            gate = g if gate is None else gate * g
        return gate

    def _gate(
        self, stage: CodingStage, signals: dict[str, torch.Tensor], allosteric: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        return self._edge_gates(stage.region_id, stage.gates, signals, allosteric.get(stage.region_id))

    def _regulate(
        self,
        stage: RegulatoryStage,
        x: torch.Tensor,
        outputs: dict[str, torch.Tensor],
        signals: dict[str, torch.Tensor],
        allosteric: dict[str, torch.Tensor],
    ) -> None:
        """Run a regulatory region on x (B, T, D): its gates' signal (B, T, S), scaled by
        the gates its upstream regulators put on it (a cascade), and its routers' gates."""
        gates = cast(nn.ModuleList, self.stages[stage.region_id])
        if len(gates):
            signal = torch.cat([g(x) for g in gates], dim=-1)
        else:
            signal = x.new_zeros(*x.shape[:-1], 0)
        upstream = self._edge_gates(stage.region_id, stage.regulated_by, signals)
        signals[stage.region_id] = signal if upstream is None else signal * upstream
        routers = cast(nn.ModuleList, self.routers[stage.region_id]) if stage.routers else ()
        for router in cast(list[AllostericRouter], list(routers)):
            sources = [outputs[r] for r in router.cfg.sources] or [x]
            for target, g in router(sources).items():
                allosteric[target] = g if target not in allosteric else allosteric[target] * g

    def _layers(self, region_id: str) -> list[ResidualLayer]:
        """The residual layers of a coding region, in order."""
        return [cast(ResidualLayer, layer) for layer in cast(nn.ModuleList, self.stages[region_id])]

    def _coding_layers(self) -> list[ResidualLayer]:
        """Every coding layer in order, a shared region's at each use (each keeps its own state)."""
        return [
            layer
            for stage in self.cfg.stages
            if isinstance(stage, CodingStage)
            for layer in self._layers(stage.region_id)
        ]

    def _walk(self, x: torch.Tensor, run_region: RegionRun) -> torch.Tensor:
        """Run the stages in genome order on x (B, T, D): a regulatory region emits its signal
        and allosteric gates, a coding region runs its layers (`run_region`) under its gate,
        then adds its loops. What `forward` and `step` share."""
        signals: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}
        allosteric: dict[str, torch.Tensor] = {}
        for stage in self.cfg.stages:
            if isinstance(stage, RegulatoryStage):
                self._regulate(stage, x, outputs, signals, allosteric)
                continue
            gate = self._gate(stage, signals, allosteric)
            x = run_region(stage.region_id, self._layers(stage.region_id), x, gate)
            for src in stage.loops_from:
                x = x + self.loop_scales[f"{src}__{stage.region_id}"] * outputs[src]
            outputs[stage.region_id] = x
        return x

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (B, T) int64 -> logits (B, T, V)."""
        if ids.shape[-1] > self.cfg.max_len and self.cfg.positions == "learned":
            raise ValueError(f"sequence length {ids.shape[-1]} exceeds max_len {self.cfg.max_len}")
        carry: Carry = {}

        def run_region(
            region_id: str, layers: list[ResidualLayer], x: torch.Tensor, gate: torch.Tensor | None
        ) -> torch.Tensor:
            for layer in layers:
                x = layer(x, gate, carry)
            return x

        return self._logits(self._walk(self._embed(ids, 0), run_region))

    # -- recurrent form ------------------------------------------------------------------
    def init_state(self, batch: int) -> dict[str, Any]:
        layers = {
            stage.region_id: [layer.mixer.init_state(batch) for layer in self._layers(stage.region_id)]
            for stage in self.cfg.stages
            if isinstance(stage, CodingStage)
        }
        return {"pos": 0, "layers": layers}

    @torch.no_grad()
    def step(self, ids_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        """ids_t: (B,) -> logits (B, V) for the next token, and the advanced state."""
        carry: Carry = {}
        new_layers: dict[str, list[Any]] = {}

        def run_region(
            region_id: str, layers: list[ResidualLayer], x: torch.Tensor, gate: torch.Tensor | None
        ) -> torch.Tensor:
            # The walk holds one token as a length-1 sequence (what regulatory regions read);
            # layers step on (B, D).
            x_t, gate_t = x[:, 0], None if gate is None else gate[:, 0]
            new_layers[region_id] = []
            for layer, layer_state in zip(layers, state["layers"][region_id], strict=True):
                x_t, layer_state = layer.step(x_t, gate_t, layer_state, carry)
                new_layers[region_id].append(layer_state)
            return x_t[:, None]

        x = self._walk(self._embed(ids_t[:, None], state["pos"]), run_region)
        return self._logits(x[:, 0]), {"pos": state["pos"] + 1, "layers": new_layers}

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        new_tokens: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """prompt: (B, T0) -> (B, T0 + new_tokens), greedy when temperature is 0."""
        state = self.init_state(prompt.shape[0])
        for t in range(prompt.shape[1]):
            logits, state = self.step(prompt[:, t], state)
        out = [prompt]
        for _ in range(new_tokens):
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
            else:
                nxt = logits.argmax(-1)
            out.append(nxt[:, None])
            logits, state = self.step(nxt, state)
        return torch.cat(out, dim=1)

    def aux_loss(self) -> torch.Tensor:
        """Sum of the layers' weighted auxiliary losses from the last forward (the MoE
        load-balancing losses); the trainer adds it to the task loss. 0 when there are none."""
        losses = [
            loss
            for m in self.modules()
            if isinstance(loss := getattr(m, "last_aux_loss", None), torch.Tensor)
        ]
        if not losses:
            return self.embed.weight.new_zeros(())
        return torch.stack(losses).sum()

    # -- what the built module reports ----------------------------------------------------
    def num_params(self) -> int:
        """Distinct parameters (shared and tied weights once)."""
        return sum(p.numel() for p in self.parameters())

    def state_size(self, seq_len: int) -> int:
        """Inference-state elements per sequence after `seq_len` tokens, all layers."""
        return sum(layer.mixer.state_size(seq_len) for layer in self._coding_layers())

    def extra_flops_per_token(self) -> int:
        """Elementwise scan FLOPs the mixers declare (a FLOP counter cannot see them)."""
        return sum(layer.mixer.cfg.extra_flops_per_token() for layer in self._coding_layers())


def _mixer(module: nn.Module) -> Mixer[Any]:
    """A coding block's module, checked to honour the mixer contract (`blocks.base`)."""
    if not isinstance(module, Mixer):
        raise TypeError(f"{type(module).__name__} is not a Mixer: a coding block must build one")
    return module
