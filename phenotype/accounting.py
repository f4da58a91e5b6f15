"""Analytic accounting of a genome, read from its config tree (nothing is built).

- `params`: distinct parameters (a `shares` target and a tied head add none);
- `embedding_params`: the token embedding, learned position embeddings and an untied output
  head (the vocabulary-sized matrices); `non_embedding_params` = `params` minus them, the N of
  scaling laws (Kaplan et al. 2020, who count neither), norms and every block included;
- `active_params`: parameters touched per token (total minus unrouted experts);
- `flops_per_token(seq_len)`: forward FLOPs per token when a whole sequence of `seq_len`
  tokens is processed: the dense linear algebra as a FLOP counter counts it (linear layers,
  convolutions, the full T x T attention square) plus the scans' declared elementwise work;
  shared layers count at every use;
- `state_bytes_per_token`: inference state that grows with context (the KV cache), and
  `state_bytes_fixed`: state that does not (convolution windows, recurrent states), both at
  2 bytes per element (bf16/fp16 inference).

These numbers must equal what the built module reports (tests/phenotype/test_blocks.py and
test_model.py check them against the built modules and FlopCounterMode).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype.blocks.regulation import edge_gate_params
from dogma_evolve.phenotype.config import CodingStage, ModelConfig, RegulatoryStage, model_config

BYTES_PER_STATE_ELEMENT = 2


@dataclass(frozen=True)
class Accounting:
    params: int
    active_params: int
    flops_per_token: int
    state_bytes_per_token: int
    state_bytes_fixed: int
    seq_len: int
    layers: int
    embedding_params: int = 0

    @property
    def non_embedding_params(self) -> int:
        return self.params - self.embedding_params

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def account(genome: Genome | ModelConfig, seq_len: int = 2048) -> Accounting:
    """Accounting of a genome (or its config tree) at context length `seq_len`."""
    cfg = model_config(genome) if isinstance(genome, Genome) else genome
    d, v = cfg.d_model, cfg.vocab
    params = v * d + (cfg.max_len * d if cfg.positions == "learned" else 0)
    embedding = params + (0 if cfg.tie_embeddings else v * d)
    if cfg.norm_position in ("pre", "pre_embed"):  # the final norm
        params += cfg.norm.num_params()
    if cfg.norm_position == "pre_embed":  # the embeddings' norm
        params += cfg.norm.num_params()
    if not cfg.tie_embeddings:
        params += v * d
    active = params
    flops = 2 * d * v  # the output head
    per_token = fixed = layers = 0
    width: dict[str, int] = {}
    for stage in cfg.stages:
        if isinstance(stage, RegulatoryStage):
            width[stage.region_id] = stage.signal_width
            n = sum(g.num_params() for g in (*stage.gates, *stage.routers))
            params, active = params + n, active + n
            flops += sum(g.flops_per_token(seq_len) for g in (*stage.gates, *stage.routers))
            for src, _ in stage.regulated_by:  # a cascade: an upstream regulator gates this signal
                n = edge_gate_params(width[src])
                params, active, flops = params + n, active + n, flops + 2 * width[src]
            continue
        assert isinstance(stage, CodingStage)
        owned = stage.shares_from is None
        for layer in stage.layers:
            b = layer.block
            if owned:
                params += b.num_params() + layer.norm.num_params()
                active += b.active_params() + layer.norm.num_params()
            flops += b.flops_per_token(seq_len)
            per_token += b.state_per_token()
            fixed += b.state_fixed()
            layers += 1
        for src, _ in stage.gates:
            n = edge_gate_params(width[src])
            params, active, flops = params + n, active + n, flops + 2 * width[src]
        params += len(stage.loops_from)
        active += len(stage.loops_from)
    return Accounting(
        params,
        active,
        flops,
        per_token * BYTES_PER_STATE_ELEMENT,
        fixed * BYTES_PER_STATE_ELEMENT,
        seq_len,
        layers,
        embedding,
    )


def state_elements(genome: Genome | ModelConfig, seq_len: int) -> int:
    """Inference-state elements per sequence after exactly `seq_len` tokens (sliding windows
    capped at their window), what `DogmaModel.state_size(seq_len)` reports."""
    cfg = model_config(genome) if isinstance(genome, Genome) else genome
    return sum(
        layer.block.state_elements(seq_len)
        for stage in cfg.stages
        if isinstance(stage, CodingStage)
        for layer in stage.layers
    )
