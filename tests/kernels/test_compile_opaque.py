"""The kernels' entry points are opaque to ``torch.compile`` (`kernels._dispatch.opaque_to_compile`):
compiled, a function calling one keeps the op out of its graph and gives what eager gives, and importing
the kernels does not import ``torch._dynamo`` (a driver that never trains does not pay for it)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from dogma_evolve.kernels.gated_linear_recurrence import gated_linear_recurrence
from dogma_evolve.kernels.recurrent import gru
from dogma_evolve.kernels.selective_scan import selective_scan
from dogma_evolve.kernels.wkv import wkv


def test_importing_the_kernels_and_blocks_leaves_dynamo_unimported() -> None:
    code = (
        "import sys\n"
        "import dogma_evolve.kernels, dogma_evolve.phenotype, dogma_evolve.evaluation\n"
        "from dogma_evolve.kernels import selective_scan, wkv, recurrent, gated_linear_recurrence\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def _calls() -> dict[str, Callable[[], torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    B, T, D, N, H = 2, 7, 4, 3, 5
    u, delta, A, Bm, C = r(B, D, T), r(B, D, T), -r(D, N).abs(), r(B, N, T), r(B, N, T)
    q, k, v, log_decay = r(B, 2, T, 3), r(B, 2, T, 3), r(B, 2, T, 4), -r(B, 2, T).abs()
    x, w_ih, w_hh, b_ih, b_hh = r(B, T, D), r(3 * H, D), r(3 * H, H), r(3 * H), r(3 * H)
    w, uu, kk, vv = r(D).abs(), r(D), r(B, T, D), r(B, T, D)
    return {
        "selective_scan": lambda: selective_scan(u, delta, A, Bm, C, delta_softplus=True),
        "gated_linear_recurrence": lambda: gated_linear_recurrence(q, k, v, log_decay)[0],
        "gru": lambda: gru(x, w_ih, w_hh, b_ih, b_hh),
        "wkv": lambda: wkv(w, uu, kk, vv),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
def test_a_compiled_caller_runs_the_op_outside_its_graph_and_matches_eager(name: str) -> None:
    call = _calls()[name]

    def caller() -> torch.Tensor:
        return torch.tanh(call()) * 2.0

    eager = caller()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(caller)()
    assert explained.op_count == 2  # tanh and mul: the op ran outside the graph, not traced into
    compiled = torch.compile(caller, backend="eager")()
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
