"""Hot sequence operators: a PyTorch reference, a Triton fast path and, where it pays, a C++
CPU loop per op. Every public function takes ``backend="auto" | "torch" | "triton" | "cpu"``.
"""

from .gated_linear_recurrence import gated_linear_recurrence
from .selective_scan import selective_scan
from .wkv import WKVState, wkv, wkv_with_state

__all__ = ["WKVState", "gated_linear_recurrence", "selective_scan", "wkv", "wkv_with_state"]
