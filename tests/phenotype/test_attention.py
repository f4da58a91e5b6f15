"""Attention variants against explicit, independent references."""

from __future__ import annotations

import math

import torch

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import model_config
from dogma_evolve.phenotype.blocks.attention import AttentionConfig, alibi_slopes
from tests.phenotype.phenotype_helpers import genome_doc


def _reference(att, x, window=0, slopes=None):
    """softmax(q k^T / sqrt(e) + bias) v with an explicit mask, KV heads repeated by hand."""
    B, T, _ = x.shape
    c = att.cfg
    q, k, v = att._qkv(x, 0)  # projections + RoPE/QK-norm
    group = c.heads // c.kv_heads
    k = torch.stack([k[:, h // group] for h in range(c.heads)], 1)
    v = torch.stack([v[:, h // group] for h in range(c.heads)], 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim)
    t = torch.arange(T)
    dist = (t[:, None] - t[None, :]).to(x.dtype)
    allowed = dist >= 0
    if window:
        allowed &= dist < window
    if slopes is not None:
        scores = scores - slopes[:, None, None] * dist
    scores = scores.masked_fill(~allowed, float("-inf"))
    o = torch.softmax(scores, -1) @ v
    return att.o_proj(o.transpose(1, 2).reshape(B, T, -1))


def _check(cfg, window=0, slopes=None, T=13):
    torch.manual_seed(0)
    att = cfg.build().double()
    x = torch.randn(2, T, cfg.d_model, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(att(x), _reference(att, x, window, slopes))


def test_mha_gqa_mqa_match_explicit_attention():
    for kv in (4, 2, 1):
        _check(AttentionConfig.of(32, heads=4, kv_heads=kv, head_dim=8))


def test_sliding_window_matches_explicit_band_mask():
    _check(AttentionConfig.of(32, True, heads=4, kv_heads=2, head_dim=8, window=4), window=4)


def test_alibi_slopes_follow_the_paper():
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0 ** -(j + 1) for j in range(8)], dtype=torch.float64)
    )
    # 6 heads: the 4-head sequence, then every other slope of the 8-head sequence.
    torch.testing.assert_close(
        alibi_slopes(6),
        torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3], dtype=torch.float64),
    )


def test_alibi_matches_its_closed_form():
    for heads, window in ((4, 0), (6, 5)):
        cfg = AttentionConfig.of(
            48, heads=heads, kv_heads=heads, head_dim=8, window=window, structural={"positions": "alibi"}
        )
        slopes = (
            torch.tensor([2.0 ** (-8 * (j + 1) / heads) for j in range(heads)], dtype=torch.float64)
            if heads == 4
            else alibi_slopes(heads)
        )
        _check(cfg, window, slopes)


def test_local_global_interleave():
    doc = genome_doc(
        [
            {"base": "T", "kind": "attention", "params": {"heads": 4, "window": 3, "global_every": 3}},
            {"base": "A", "kind": "mlp", "params": {}},
        ],
        copies=6,
    )
    cfg = model_config(Genome.from_dict(doc))
    windows = [layer.block.window for layer in cfg.stages[0].layers[0::2]]
    assert windows == [3, 3, 0, 3, 3, 0]
