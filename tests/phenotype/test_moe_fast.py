"""The MoE's routing in one pass (a stable sort of the assignments, one gather, one
index_add; `MoE._routed`) computes the function of the loop over experts it replaced, checked
against a frozen copy of that loop in float64 on perturbed weights: the output, the balancing
loss and every parameter's gradient (None for an expert no token reached, as before)."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.phenotype.blocks.moe import MoE, MoEConfig, load_balancing_loss

RTOL = 1e-10


def _ref_forward(moe: MoE, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = x.reshape(-1, x.shape[-1])
    probs = torch.softmax(moe.router(flat), dim=-1)
    top_p, top_idx = probs.topk(moe.cfg.top_k, dim=-1)
    if moe.cfg.top_k > 1:
        top_p = top_p / top_p.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e, expert in enumerate(moe.experts):
        token, slot = (top_idx == e).nonzero(as_tuple=True)
        if token.numel():
            y = expert(flat[token][None])[0] * top_p[token, slot, None]
            out = out.index_add(0, token, y.to(out.dtype))
    if moe.shared is not None:
        out = out + moe.shared(flat[None])[0]
    return out.view_as(x), moe.cfg.aux_weight * load_balancing_loss(probs, top_idx)


CASES = [
    ({"experts": 5, "top_k": 2, "hidden": 12, "expert": "swiglu", "shared": 1}, 7),
    ({"experts": 8, "top_k": 1, "hidden": 10, "expert": "gelu", "shared": 0}, 9),
    ({"experts": 4, "top_k": 3, "hidden": 8, "expert": "geglu", "shared": 0}, 11),
    ({"experts": 16, "top_k": 2, "hidden": 6, "expert": "relu", "shared": 2}, 2),  # experts left idle
]


@pytest.mark.parametrize(("params", "T"), CASES)
def test_moe_equals_the_frozen_loop(params: dict, T: int) -> None:
    torch.manual_seed(T)
    moe = MoEConfig.of(16, bias=True, **params).build().double()
    with torch.no_grad():
        for p in moe.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(3, T, 16, dtype=torch.float64)
    weight = torch.randn_like(x)
    results = []
    for forward in (lambda x: (moe(x), moe.last_aux_loss), lambda x: _ref_forward(moe, x)):
        moe.zero_grad(set_to_none=True)
        y, aux = forward(x)
        assert aux is not None
        ((y * weight).sum() + aux).backward()
        grads = {n: p.grad.clone() for n, p in moe.named_parameters() if p.grad is not None}
        results.append((y.detach(), aux.detach(), grads))
    (y_new, aux_new, g_new), (y_old, aux_old, g_old) = results
    assert torch.equal(y_new, y_old)  # the experts see the same rows; one index_add, same order
    assert torch.equal(aux_new, aux_old)
    assert g_new.keys() == g_old.keys()
    if params["experts"] == 16:
        assert len(g_old) < len(list(moe.parameters()))  # some expert had no token
    for name in g_old:
        err = float((g_new[name] - g_old[name]).abs().max() / g_old[name].abs().max().clamp_min(1e-300))
        assert err < RTOL, f"grad {name}: relative difference {err:.3e}"
