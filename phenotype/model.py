"""The phenotype: a decoded genome as one `nn.Module`, token ids (B, T) -> logits (B, T, V).

Forward runs the stages in genome order (see `phenotype.config` for the expression rules);
`init_state` / `step` run the same network one token at a time from a cache, and
`generate` decodes greedily or by sampling from that cache.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from phenotype.blocks.regulation import EdgeGate
from phenotype.config import CodingStage, ModelConfig, RegulatoryStage


class ResidualLayer(nn.Module):
    """x + g·s·f(norm(x)) (pre-norm) or norm(x + g·s·f(x)) (post-norm)."""

    def __init__(self, mixer: nn.Module, norm: nn.Module, pre_norm: bool, strength: float):
        super().__init__()
        self.mixer, self.norm = mixer, norm
        self.pre_norm, self.strength = pre_norm, strength

    def _update(self, update: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        if self.strength != 1.0:
            update = update * self.strength
        return update if gate is None else update * gate

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        if self.pre_norm:
            return x + self._update(self.mixer(self.norm(x)), gate)
        return self.norm(x + self._update(self.mixer(x), gate))

    def step(self, x_t: torch.Tensor, gate: torch.Tensor | None, state: Any):
        if self.pre_norm:
            y, state = self.mixer.step(self.norm(x_t), state)
            return x_t + self._update(y, gate), state
        y, state = self.mixer.step(x_t, state)
        return self.norm(x_t + self._update(y, gate)), state

    # Mixers that carry epigenetic marks from block to block (`carries_memory`) take and
    # return the marks beside the stream.
    def forward_memory(
        self, x: torch.Tensor, gate: torch.Tensor | None, marks: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, marks = self.mixer.forward_memory(self.norm(x) if self.pre_norm else x, marks)
        if self.pre_norm:
            return x + self._update(y, gate), marks
        return self.norm(x + self._update(y, gate)), marks

    def step_memory(
        self, x_t: torch.Tensor, gate: torch.Tensor | None, state: Any, marks: torch.Tensor | None
    ):
        y, state, marks = self.mixer.step_memory(self.norm(x_t) if self.pre_norm else x_t, state, marks)
        if self.pre_norm:
            return x_t + self._update(y, gate), state, marks
        return self.norm(x_t + self._update(y, gate)), state, marks


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
                continue
            if stage.shares_from is not None:
                source = self.stages[stage.shares_from]
                layers = [
                    ResidualLayer(
                        source[i % len(source)].mixer, source[i % len(source)].norm, pre_norm, stage.strength
                    )
                    for i in range(len(stage.layers))
                ]
            else:
                layers = [
                    ResidualLayer(layer.block.build(), layer.norm.build(), pre_norm, stage.strength)
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

    def _gate(
        self, stage: CodingStage, signals: dict[str, torch.Tensor], allosteric: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        gate = allosteric.get(stage.region_id)
        for src, _ in stage.gates:
            g = self.edge_gates[f"{src}__{stage.region_id}"](signals[src])
            gate = g if gate is None else gate * g
        return gate

    def _regulate(
        self,
        stage: RegulatoryStage,
        x: torch.Tensor,
        outputs: dict[str, torch.Tensor],
        signals: dict[str, torch.Tensor],
        allosteric: dict[str, torch.Tensor],
    ) -> None:
        """Run a regulatory region on x (B, T, D): its gates' signal, its routers' gates."""
        gates = self.stages[stage.region_id]
        if len(gates):
            signals[stage.region_id] = torch.cat([g(x) for g in gates], dim=-1)
        else:
            signals[stage.region_id] = x.new_zeros(*x.shape[:-1], 0)
        for router in self.routers[stage.region_id] if stage.routers else ():
            sources = [outputs[r] for r in router.cfg.sources] or [x]
            for target, g in router(sources).items():
                allosteric[target] = g if target not in allosteric else allosteric[target] * g

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (B, T) int64 -> logits (B, T, V)."""
        if ids.shape[-1] > self.cfg.max_len and self.cfg.positions == "learned":
            raise ValueError(f"sequence length {ids.shape[-1]} exceeds max_len {self.cfg.max_len}")
        x = self._embed(ids, 0)
        signals: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}
        allosteric: dict[str, torch.Tensor] = {}
        marks: dict[int, torch.Tensor] = {}  # epigenetic marks by width, block to block
        for stage in self.cfg.stages:
            modules = self.stages[stage.region_id]
            if isinstance(stage, RegulatoryStage):
                self._regulate(stage, x, outputs, signals, allosteric)
                continue
            gate = self._gate(stage, signals, allosteric)
            for layer in modules:
                if getattr(layer.mixer, "carries_memory", False):
                    width = layer.mixer.cfg.slots
                    x, marks[width] = layer.forward_memory(x, gate, marks.get(width))
                else:
                    x = layer(x, gate)
            for src in stage.loops_from:
                x = x + self.loop_scales[f"{src}__{stage.region_id}"] * outputs[src]
            outputs[stage.region_id] = x
        return self._logits(x)

    # -- recurrent form ------------------------------------------------------------------
    def init_state(self, batch: int) -> dict[str, Any]:
        layers = {
            rid: [layer.mixer.init_state(batch) for layer in mods]
            for rid, mods in self.stages.items()
            if isinstance(self.cfg.stage(rid), CodingStage)
        }
        return {"pos": 0, "layers": layers}

    @torch.no_grad()
    def step(self, ids_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """ids_t: (B,) -> logits (B, V) for the next token, and the advanced state."""
        x = self._embed(ids_t[:, None], state["pos"])
        signals: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}
        allosteric: dict[str, torch.Tensor] = {}
        marks: dict[int, torch.Tensor] = {}
        new_layers: dict[str, list[Any]] = {}
        for stage in self.cfg.stages:
            modules = self.stages[stage.region_id]
            if isinstance(stage, RegulatoryStage):  # per token: run on a length-1 sequence
                self._regulate(stage, x, outputs, signals, allosteric)
                continue
            gate = self._gate(stage, signals, allosteric)
            gate = None if gate is None else gate[:, 0]
            new_layers[stage.region_id] = []
            x = x[:, 0]
            for layer, layer_state in zip(modules, state["layers"][stage.region_id], strict=True):
                if getattr(layer.mixer, "carries_memory", False):
                    width = layer.mixer.cfg.slots
                    x, layer_state, marks[width] = layer.step_memory(x, gate, layer_state, marks.get(width))
                else:
                    x, layer_state = layer.step(x, gate, layer_state)
                new_layers[stage.region_id].append(layer_state)
            x = x[:, None]
            for src in stage.loops_from:
                x = x + self.loop_scales[f"{src}__{stage.region_id}"] * outputs[src]
            outputs[stage.region_id] = x
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
        losses = [m.last_aux_loss for m in self.modules() if getattr(m, "last_aux_loss", None) is not None]
        if not losses:
            return self.embed.weight.new_zeros(())
        return torch.stack(losses).sum()

    # -- what the built module reports ----------------------------------------------------
    def num_params(self) -> int:
        """Distinct parameters (shared and tied weights once)."""
        return sum(p.numel() for p in self.parameters())

    def state_size(self, seq_len: int) -> int:
        """Inference-state elements per sequence after `seq_len` tokens, all layers."""
        return sum(
            layer.mixer.state_size(seq_len)
            for rid, mods in self.stages.items()
            if isinstance(self.cfg.stage(rid), CodingStage)
            for layer in mods
        )

    def extra_flops_per_token(self) -> int:
        """Elementwise scan FLOPs the mixers declare (a FLOP counter cannot see them)."""
        return sum(
            layer.mixer.cfg.extra_flops_per_token()
            for rid, mods in self.stages.items()
            if isinstance(self.cfg.stage(rid), CodingStage)
            for layer in mods
        )
