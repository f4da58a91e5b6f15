"""S4D: diagonal structured state spaces (Gu et al., 2022), per channel h = 1..D:

    x'(t) = A x(t) + B u(t),  y(t) = Re(C x(t)) + D u(t),      A = diag(λ_1..λ_{N/2}) complex

discretised by zero-order hold with a learned step Δ_h: Ā = exp(ΔA), B̄ = (exp(ΔA) - 1)/A · B.
The N real state dimensions are N/2 complex modes (their conjugates are implicit, hence the
factor 2 below). Training convolves with the kernel

    K_l = 2·Re( Σ_n C_n B̄_n Ā_n^l ),   l = 0..L-1,     y = K * u + D ⊙ u

through an FFT of length n = 2L (no wrap-around, so causal); inference runs the recurrence
x_t = Ā x_{t-1} + B̄ u_t, y_t = 2·Re(C x_t) + D u_t. The block output is GELU(y) W_out.

Initialisations of λ:
- `legs` (S4D-LegS): the eigenvalues of the normal part of HiPPO-LegS,
  A_N = A + P Pᵀ with A_nk = -√(2n+1)√(2k+1) (n > k), -(n+1) (n = k), 0 (n < k) and
  P_n = √(n + 1/2), so A_N = -I/2 + skew: λ = -1/2 + iω; B is projected onto A_N's
  eigenvectors (V* B with B_n = √(2n+1)) and folded into C;
- `lin` (S4D-Lin): λ_n = -1/2 + iπn, B = 1.
Re λ is kept negative by parametrising it as -exp(A_log). FFT and scan work is declared in
`extra_flops_per_token` (≈ 8 real FLOPs per complex mode per token, the recurrence's cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params, no_weight_decay


def hippo_legs(n: int) -> torch.Tensor:
    """The HiPPO-LegS state matrix (n, n), float64."""
    q = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1)
    a = -q[:, None] * q[None, :]
    return torch.tril(a, -1) - torch.diag(torch.arange(1, n + 1, dtype=torch.float64))


def s4d_legs_init(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """λ (n/2,) complex and the projected B (n/2,) complex of S4D-LegS."""
    p = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    normal = hippo_legs(n) + p[:, None] * p[None, :]
    lam, vec = torch.linalg.eig(normal)
    keep = torch.argsort(lam.imag, descending=True)[: n // 2]  # one of each conjugate pair
    b = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1).to(vec.dtype)
    return lam[keep], (vec.conj().T @ b)[keep]


@dataclass(frozen=True)
class S4Config(BlockConfig, kind="s4", role="sequence"):
    d_state: int  # N real state dimensions per channel (N/2 complex modes)
    init: str  # legs | lin

    def build(self) -> S4D:
        return S4D(self)

    def num_params(self) -> int:
        h, n = self.d_model, self.d_state
        # log Δ, D (h each); A_log, A_imag (h·n/2 each); C (h·n/2 complex); output linear
        return 2 * h + 2 * h * n + linear_params(h, h, self.bias)

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * self.d_model * self.d_model + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return 8 * self.d_model * (self.d_state // 2) + 2 * self.d_model

    def state_fixed(self) -> int:
        return self.d_model * self.d_state


class S4D(Mixer[S4Config]):
    def __init__(self, cfg: S4Config):
        super().__init__()
        self.cfg = cfg
        h, m = cfg.d_model, cfg.d_state // 2
        with torch.device("cpu"):  # the eigensolver has no meta kernel
            if cfg.init == "legs":
                lam, b = s4d_legs_init(cfg.d_state)
            else:
                lam = torch.complex(
                    torch.full((m,), -0.5, dtype=torch.float64),
                    math.pi * torch.arange(m, dtype=torch.float64),
                )
                b = torch.ones(m, dtype=torch.complex128)
        dt = torch.exp(torch.rand(h) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.log_dt = nn.Parameter(torch.log(dt))
        device = self.log_dt.device
        self.A_log = nn.Parameter(torch.log(-lam.real).float().repeat(h, 1).to(device))
        self.A_imag = nn.Parameter(lam.imag.float().repeat(h, 1).to(device))
        b = b.to(torch.complex64).to(device)
        c = torch.randn(h, m, dtype=torch.complex64) * b * math.sqrt(0.5)
        self.C = nn.Parameter(torch.view_as_real(c).contiguous())
        self.D = nn.Parameter(torch.ones(h))
        self.out_proj = nn.Linear(h, h, bias=cfg.bias)
        no_weight_decay(self.log_dt, self.A_log, self.A_imag, self.D)

    def _discrete(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ā (h, n/2) and C·B̄ (h, n/2), complex."""
        a = torch.complex(-torch.exp(self.A_log), self.A_imag)
        dta = torch.exp(self.log_dt)[:, None] * a
        return torch.exp(dta), torch.view_as_complex(self.C) * torch.expm1(dta) / a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        T = x.shape[1]
        decay, cb = self._discrete()
        powers = torch.exp(torch.log(decay)[..., None] * torch.arange(T, device=x.device))
        kernel = 2 * (cb[..., None] * powers).sum(-2).real  # (D, T)
        u = x.transpose(1, 2)
        y = torch.fft.irfft(torch.fft.rfft(u, n=2 * T) * torch.fft.rfft(kernel, n=2 * T), n=2 * T)[..., :T]
        y = y + self.D[:, None] * u
        return self.out_proj(F.gelu(y.transpose(1, 2)))

    def init_state(self, batch: int) -> torch.Tensor:
        return self.D.new_zeros(batch, self.cfg.d_model, self.cfg.d_state // 2, 2)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: (B, D) -> (B, D); state: the complex modes as (B, D, N/2, 2) reals."""
        decay, cb = self._discrete()
        a = torch.complex(-torch.exp(self.A_log), self.A_imag)
        h = (
            decay * torch.view_as_complex(state)
            + (torch.expm1(torch.exp(self.log_dt)[:, None] * a) / a) * x_t[..., None]
        )
        c = torch.view_as_complex(self.C)
        y = 2 * (c * h).sum(-1).real + self.D * x_t
        return self.out_proj(F.gelu(y)), torch.view_as_real(h)

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
