"""State-space families against independent references."""

from __future__ import annotations

import math

import torch

from dogma_evolve.phenotype.blocks.s4 import S4Config, hippo_legs, s4d_legs_init


def test_hippo_legs_matches_its_closed_form():
    n = 9
    ref = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for k in range(n):
            if i > k:
                ref[i, k] = -math.sqrt(2 * i + 1) * math.sqrt(2 * k + 1)
            elif i == k:
                ref[i, k] = -(i + 1)
    torch.testing.assert_close(hippo_legs(n), ref, rtol=0, atol=0)
    # Normal plus low rank: A + P Pᵀ = -I/2 + a skew-symmetric matrix.
    p = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    normal = ref + p[:, None] * p[None, :]
    torch.testing.assert_close(normal + normal.T, -torch.eye(n, dtype=torch.float64))


def test_s4d_legs_eigenvalues_are_the_normal_parts():
    lam, _ = s4d_legs_init(8)
    assert lam.shape == (4,)
    torch.testing.assert_close(lam.real, torch.full((4,), -0.5, dtype=torch.float64))
    assert (lam.imag > 0).all()
    p = torch.sqrt(torch.arange(8, dtype=torch.float64) + 0.5)
    full = torch.linalg.eigvals(hippo_legs(8) + p[:, None] * p[None, :])
    for value in lam:
        assert (full - value).abs().min() < 1e-9


def test_s4d_fft_convolution_equals_its_recurrence():
    for init in ("legs", "lin"):
        cfg = S4Config(6, False, d_state=8, init=init)
        torch.manual_seed(0)
        s4 = cfg.build().double()
        x = torch.randn(2, 37, 6, dtype=torch.float64)
        a = torch.complex(-torch.exp(s4.A_log), s4.A_imag)
        dt = torch.exp(s4.log_dt)[:, None]
        c = torch.view_as_complex(s4.C)
        with torch.no_grad():
            h = torch.zeros(2, 6, 4, dtype=torch.complex128)
            ys = []
            for t in range(37):  # x_t = exp(ΔA) x_{t-1} + (exp(ΔA) - 1)/A · u_t
                h = torch.exp(dt * a) * h + (torch.exp(dt * a) - 1) / a * x[:, t, :, None]
                ys.append(2 * (c * h).sum(-1).real + s4.D * x[:, t])
            ref = s4.out_proj(torch.nn.functional.gelu(torch.stack(ys, 1)))
            torch.testing.assert_close(s4(x), ref, rtol=1e-10, atol=1e-10)
