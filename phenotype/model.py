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


def sinusoidal_positions(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """(T,) integer positions -> (T, D): sin on even, cos on odd channels (Vaswani et al.)."""
    inv = torch.exp(-math.log(10_000.0) * torch.arange(0, d_model, 2, device=positions.device)
                    / d_model)
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
        pre_norm = cfg.norm_position == "pre"
        self.stages = nn.ModuleDict()
        self.edge_gates = nn.ModuleDict()
        self.loop_scales = nn.ParameterDict()
        signal_width: dict[str, int] = {}
        for stage in cfg.stages:
            if isinstance(stage, RegulatoryStage):
                self.stages[stage.region_id] = nn.ModuleList(g.build() for g in stage.gates)
                signal_width[stage.region_id] = stage.signal_width
                continue
            if stage.shares_from is not None:
                source = self.stages[stage.shares_from]
                layers = [ResidualLayer(source[i % len(source)].mixer,
                                        source[i % len(source)].norm, pre_norm, stage.strength)
                          for i in range(len(stage.layers))]
            else:
                layers = [ResidualLayer(layer.block.build(), layer.norm.build(), pre_norm,
                                        stage.strength) for layer in stage.layers]
            self.stages[stage.region_id] = nn.ModuleList(layers)
            for src, represses in stage.gates:
                self.edge_gates[f"{src}__{stage.region_id}"] = EdgeGate(signal_width[src], represses)
            for src in stage.loops_from:
                self.loop_scales[f"{src}__{stage.region_id}"] = nn.Parameter(torch.zeros(()))
        self.final_norm = cfg.norm.build() if pre_norm else nn.Identity()
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02) for embeddings and projections."""
        for name, p in self.named_parameters():
            if p.dim() == 2 and "edge_gates" not in name:
                nn.init.normal_(p, std=0.02)

    # -- parallel form -------------------------------------------------------------------
    def _embed(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        x = self.embed(ids)
        if self.cfg.positions in ("learned", "sinusoidal"):
            pos = torch.arange(start, start + ids.shape[-1], device=ids.device)
            if self.cfg.positions == "learned":
                x = x + self.pos_embed(pos)
            else:
                x = x + sinusoidal_positions(pos, self.cfg.d_model).to(x.dtype)
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final_norm(x)
        return self.head(x) if self.head is not None else F.linear(x, self.embed.weight)

    def _gate(self, stage: CodingStage, signals: dict[str, torch.Tensor]) -> torch.Tensor | None:
        gate = None
        for src, _ in stage.gates:
            g = self.edge_gates[f"{src}__{stage.region_id}"](signals[src])
            gate = g if gate is None else gate * g
        return gate

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (B, T) int64 -> logits (B, T, V)."""
        if ids.shape[-1] > self.cfg.max_len and self.cfg.positions == "learned":
            raise ValueError(f"sequence length {ids.shape[-1]} exceeds max_len {self.cfg.max_len}")
        x = self._embed(ids, 0)
        signals: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}
        for stage in self.cfg.stages:
            modules = self.stages[stage.region_id]
            if isinstance(stage, RegulatoryStage):
                signals[stage.region_id] = torch.cat([g(x) for g in modules], dim=-1)
                continue
            gate = self._gate(stage, signals)
            for layer in modules:
                x = layer(x, gate)
            for src in stage.loops_from:
                x = x + self.loop_scales[f"{src}__{stage.region_id}"] * outputs[src]
            outputs[stage.region_id] = x
        return self._logits(x)

    # -- recurrent form ------------------------------------------------------------------
    def init_state(self, batch: int) -> dict[str, Any]:
        layers = {rid: [layer.mixer.init_state(batch) for layer in mods]
                  for rid, mods in self.stages.items()
                  if isinstance(self.cfg.stage(rid), CodingStage)}
        return {"pos": 0, "layers": layers}

    @torch.no_grad()
    def step(self, ids_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """ids_t: (B,) -> logits (B, V) for the next token, and the advanced state."""
        x = self._embed(ids_t[:, None], state["pos"])[:, 0]
        signals: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}
        new_layers: dict[str, list[Any]] = {}
        for stage in self.cfg.stages:
            modules = self.stages[stage.region_id]
            if isinstance(stage, RegulatoryStage):
                signals[stage.region_id] = torch.cat([g(x[:, None])[:, 0] for g in modules], -1)
                continue
            gate = self._gate(stage, signals)
            new_layers[stage.region_id] = []
            for layer, layer_state in zip(modules, state["layers"][stage.region_id], strict=True):
                x, layer_state = layer.step(x, gate, layer_state)
                new_layers[stage.region_id].append(layer_state)
            for src in stage.loops_from:
                x = x + self.loop_scales[f"{src}__{stage.region_id}"] * outputs[src]
            outputs[stage.region_id] = x
        return self._logits(x), {"pos": state["pos"] + 1, "layers": new_layers}

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, new_tokens: int, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> torch.Tensor:
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

    # -- what the built module reports ----------------------------------------------------
    def num_params(self) -> int:
        """Distinct parameters (shared and tied weights once)."""
        return sum(p.numel() for p in self.parameters())

    def state_size(self, seq_len: int) -> int:
        """Inference-state elements per sequence after `seq_len` tokens, all layers."""
        return sum(layer.mixer.state_size(seq_len)
                   for rid, mods in self.stages.items()
                   if isinstance(self.cfg.stage(rid), CodingStage) for layer in mods)

    def extra_flops_per_token(self) -> int:
        """Elementwise scan FLOPs the mixers declare (a FLOP counter cannot see them)."""
        return sum(layer.mixer.cfg.extra_flops_per_token()
                   for rid, mods in self.stages.items()
                   if isinstance(self.cfg.stage(rid), CodingStage) for layer in mods)
