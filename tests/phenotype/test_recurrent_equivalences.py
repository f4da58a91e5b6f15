"""Parallel (training) forms of the recurrent families against independent references:
quadratic masked forms and float64 sequential recurrences written here, not in the blocks.
T = 100 > the kernels' default chunk of 64, so the chunked paths cross chunk boundaries."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dogma_evolve.phenotype.blocks.linear_attention import (
    LinearAttentionConfig,
    RetentionConfig,
    retention_log_decay,
)
from dogma_evolve.phenotype.blocks.rglru import RGLRUConfig
from dogma_evolve.phenotype.blocks.rwkv import RWKVTimeMixConfig, _shift
from dogma_evolve.phenotype.blocks.ssm import Mamba2Config

T = 100


def _x(d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, d, dtype=torch.float64, generator=g)


def test_linear_attention_equals_masked_quadratic_form():
    cfg = LinearAttentionConfig.of(16, heads=2, head_dim=8)
    torch.manual_seed(0)
    m = cfg.build().double()
    x = _x(16)
    with torch.no_grad():
        q, k, v = m._qkv(x)
        v = v[..., :-1]
        scores = torch.tril(q @ k.transpose(-1, -2))  # φ(Q) φ(K)ᵀ, causal
        o = (scores @ v) / (scores.sum(-1, keepdim=True) + 1e-6)
        ref = m.o_proj(o.transpose(1, 2).reshape(2, T, -1))
        torch.testing.assert_close(m(x), ref, rtol=1e-9, atol=1e-9)


def test_retention_equals_its_parallel_form():
    cfg = RetentionConfig.of(16, heads=2, head_dim=8, v_head_dim=8)
    torch.manual_seed(0)
    m = cfg.build().double()
    x = _x(16)
    with torch.no_grad():
        q, k, v = m._qkv(x, 0)
        n = torch.arange(T, dtype=torch.float64)
        gamma = retention_log_decay(2).exp()
        decay = gamma[:, None, None] ** (n[:, None] - n[None, :]).clamp(min=0)
        decay = decay * (n[:, None] >= n[None, :])  # D_nm = γ^{n-m}, n ≥ m
        o = ((q @ k.transpose(-1, -2)) * decay) @ v
        torch.testing.assert_close(m(x), m._out(x, o), rtol=1e-9, atol=1e-9)
    assert torch.allclose(gamma, 1 - 2.0 ** torch.tensor([-5.0, -6.0], dtype=torch.float64))


def test_rwkv_parallel_form_equals_its_formula_and_rnn_form():
    cfg = RWKVTimeMixConfig(8, False)
    torch.manual_seed(0)
    m = cfg.build().double()
    with torch.no_grad():
        m.time_decay.add_(torch.linspace(-2, 2, 8, dtype=torch.float64))
    x = _x(8) * 3  # large keys stress the max trick
    with torch.no_grad():
        k, r, v = m._krv(x, _shift(x))
        w, u = torch.exp(m.time_decay), m.time_first
        rows = []
        for t in range(T):  # the WKV definition, summed out
            i = torch.arange(t, dtype=torch.float64)
            past = torch.exp(-(t - 1 - i)[:, None] * w + k[:, :t])
            now = torch.exp(u + k[:, t])
            rows.append(((past * v[:, :t]).sum(1) + now * v[:, t]) / (past.sum(1) + now))
        ref = m.output(r * torch.stack(rows, 1))
        torch.testing.assert_close(m(x), ref, rtol=1e-9, atol=1e-9)
        state, steps = m.init_state(2), []
        for t in range(T):
            y, state = m.step(x[:, t], state)
            steps.append(y)
        torch.testing.assert_close(torch.stack(steps, 1), ref, rtol=1e-9, atol=1e-9)


def test_mamba2_ssd_chunked_equals_recurrence():
    cfg = Mamba2Config(16, False, d_state=8, expand=2, head_dim=8, d_conv=4)
    torch.manual_seed(0)
    m = cfg.build().double()
    x = _x(16)
    with torch.no_grad():
        c = cfg
        z, xbc, dt = m.in_proj(x).split([c.d_inner, c.conv_width, c.heads], -1)
        xbc = F.silu(m.conv1d(F.pad(xbc.transpose(1, 2), (c.d_conv - 1, 0))).transpose(1, 2))
        u = xbc[..., : c.d_inner].unflatten(-1, (c.heads, c.head_dim))  # (B, T, H, P)
        Bm, Cm = xbc[..., c.d_inner : c.d_inner + c.d_state], xbc[..., c.d_inner + c.d_state :]
        delta = F.softplus(dt + m.dt_bias)
        A = -torch.exp(m.A_log)
        h = torch.zeros(2, c.heads, c.d_state, c.head_dim, dtype=torch.float64)
        ys = []
        for t in range(T):  # h_t = exp(Δ A) h + Δ B uᵀ ; y = hᵀ C + D u
            h = (
                torch.exp(delta[:, t] * A)[..., None, None] * h
                + delta[:, t, :, None, None] * Bm[:, t, None, :, None] * u[:, t, :, None, :]
            )
            ys.append(torch.einsum("bhnp,bn->bhp", h, Cm[:, t]) + m.D[:, None] * u[:, t])
        y = torch.stack(ys, 1).flatten(-2)
        ref = m.out_proj(m.norm(y * F.silu(z)))
        torch.testing.assert_close(m(x), ref, rtol=1e-9, atol=1e-9)


def test_rglru_equals_its_recurrence():
    cfg = RGLRUConfig(12, False, width=12, heads=3, d_conv=4)
    torch.manual_seed(0)
    m = cfg.build().double()
    x = _x(12)
    with torch.no_grad():
        g = F.gelu(m.gate_proj(x))
        u = m.conv1d(F.pad(m.in_proj(x).transpose(1, 2), (3, 0))).transpose(1, 2)
        blocks = u.unflatten(-1, (3, 4))
        r = torch.sigmoid(torch.einsum("bthi,hij->bthj", blocks, m.W_a).flatten(-2) + m.b_a)
        i = torch.sigmoid(torch.einsum("bthi,hij->bthj", blocks, m.W_x).flatten(-2) + m.b_x)
        a = torch.exp(-8 * r * F.softplus(m.a_param))
        h, hs = torch.zeros(2, 12, dtype=torch.float64), []
        for t in range(T):
            h = a[:, t] * h + torch.sqrt(1 - a[:, t] ** 2) * i[:, t] * u[:, t]
            hs.append(h)
        ref = m.out_proj(torch.stack(hs, 1) * g)
        torch.testing.assert_close(m(x), ref, rtol=1e-9, atol=1e-9)
