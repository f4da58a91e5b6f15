// Fused CPU one-element-state gated linear recurrence (dk = dv = 1), forward and backward.
//
// Per channel: a_t = exp(g_t), s_t = a_t s_{t-1} + k_t v_t, o_t = q_t s_t (see cpu.py). One
// task owns one batch row and walks the T steps with the channel dimension innermost, so each
// step's loop over channels vectorises. Backward, with c_t the total gradient reaching s_t
// (from o_t and from the future), as in cpu.py:
//
//     c_t = q_t do_t + a_{t+1} c_{t+1}     (c_{T-1} = q_{T-1} do_{T-1} + d final state)
//     dk_t = c_t v_t,  dv_t = c_t k_t,  dq_t = do_t s_t,  dg_t = c_t s_{t-1} a_t,  ds_{-1} = a_0 c_0
//
// so nothing is divided by a decay. The decays are recomputed, the states saved by forward.
//
// Layout (contiguous, one floating dtype): g, k, v, q, o, states: (B, T, H); s0, final: (B, H).

// ATen and torch's pybind11 casters, not <torch/extension.h>: that one adds the whole C++
// frontend (nn, optim, data) and makes a cold build take about twice as long.
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace {

template <typename T>
const T* opt_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

// One forward step over the H channels of one batch row (restrict: the loop vectorises).
template <typename T>
void forward_step(int64_t H, const T* __restrict__ g, const T* __restrict__ k,
                  const T* __restrict__ v, const T* __restrict__ q, const T* __restrict__ prev,
                  T* __restrict__ s, T* __restrict__ o) {
  for (int64_t h = 0; h < H; ++h) {
    s[h] = std::exp(g[h]) * prev[h] + k[h] * v[h];
    o[h] = q[h] * s[h];
  }
}

template <typename T>
void forward_impl(int64_t B, int64_t L, int64_t H, const T* g, const T* k, const T* v,
                  const T* q, const T* s0, T* o, T* states, T* last) {
  at::parallel_for(0, B, 1, [=](int64_t begin, int64_t end) {
    std::vector<T> zeros(H, T(0));
    for (int64_t b = begin; b < end; ++b) {
      const T* prev = s0 ? s0 + b * H : zeros.data();
      for (int64_t t = 0; t < L; ++t) {
        const int64_t row = (b * L + t) * H;
        forward_step(H, g + row, k + row, v + row, q + row, prev, states + row, o + row);
        prev = states + row;
      }
      std::copy(prev, prev + H, last + b * H);
    }
  });
}

// One backward step: c_t from c_{t+1} (in place, with a_{t+1} in a_next, then a_t), and the
// step's gradients (dq and dk only when QK: the blocks pass constant ones there).
template <bool QK, typename T>
void backward_step(int64_t H, const T* __restrict__ g, const T* __restrict__ k,
                   const T* __restrict__ v, const T* __restrict__ q, const T* __restrict__ prev,
                   const T* __restrict__ s, const T* __restrict__ d_o, T* __restrict__ c,
                   T* __restrict__ a_next, T* __restrict__ dg, T* __restrict__ dk,
                   T* __restrict__ dv, T* __restrict__ dq) {
  for (int64_t h = 0; h < H; ++h) {
    const T ct = q[h] * d_o[h] + a_next[h] * c[h];
    const T a = std::exp(g[h]);
    if constexpr (QK) {
      dq[h] = d_o[h] * s[h];
      dk[h] = ct * v[h];
    }
    dv[h] = ct * k[h];
    dg[h] = ct * prev[h] * a;
    c[h] = ct;
    a_next[h] = a;
  }
}

template <typename T>
void backward_impl(int64_t B, int64_t L, int64_t H, const T* g, const T* k, const T* v,
                   const T* q, const T* s0, const T* states, const T* d_o, const T* dlast,
                   bool qk, T* dg, T* dk, T* dv, T* dq, T* ds0) {
  at::parallel_for(0, B, 1, [=](int64_t begin, int64_t end) {
    std::vector<T> c(H), a_next(H), zeros(H, T(0));
    for (int64_t b = begin; b < end; ++b) {
      if (dlast) {
        std::copy(dlast + b * H, dlast + (b + 1) * H, c.begin());
      } else {
        std::fill(c.begin(), c.end(), T(0));
      }
      std::fill(a_next.begin(), a_next.end(), T(1));  // so that c_{T-1} = q do + d final state
      for (int64_t t = L - 1; t >= 0; --t) {
        const int64_t row = (b * L + t) * H;
        const T* prev = t > 0 ? states + row - H : (s0 ? s0 + b * H : zeros.data());
        if (qk) {
          backward_step<true>(H, g + row, k + row, v + row, q + row, prev, states + row,
                              d_o + row, c.data(), a_next.data(), dg + row, dk + row, dv + row,
                              dq + row);
        } else {
          backward_step<false>(H, g + row, k + row, v + row, q + row, prev, states + row,
                               d_o + row, c.data(), a_next.data(), dg + row, dk, dv + row, dq);
        }
      }
      for (int64_t h = 0; h < H; ++h) ds0[b * H + h] = a_next[h] * c[h];
    }
  });
}

void check_all(const at::Tensor& g, std::initializer_list<std::optional<at::Tensor>> ts) {
  TORCH_CHECK(g.dim() == 3, "scalar scan cpu: g must be (B, T, H)");
  for (const auto& t : ts) {
    if (!t.has_value()) continue;
    TORCH_CHECK(t->device().is_cpu(), "scalar scan cpu: tensors must be on the CPU");
    TORCH_CHECK(t->is_contiguous(), "scalar scan cpu: tensors must be contiguous");
    TORCH_CHECK(t->scalar_type() == g.scalar_type(), "scalar scan cpu: mixed dtypes");
  }
}

}  // namespace

// Returns (o, states, final): o and every state s_t (B, T, H), the final state (B, H).
std::vector<at::Tensor> forward(const at::Tensor& g, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& q, const std::optional<at::Tensor>& s0) {
  check_all(g, {g, k, v, q, s0});
  const int64_t B = g.size(0), L = g.size(1), H = g.size(2);
  auto o = at::empty_like(g);
  auto states = at::empty_like(g);
  auto last = at::empty({B, H}, g.options());
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "scalar_scan_forward", [&] {
    forward_impl<scalar_t>(B, L, H, g.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                           v.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(), opt_ptr<scalar_t>(s0),
                           o.data_ptr<scalar_t>(), states.data_ptr<scalar_t>(),
                           last.data_ptr<scalar_t>());
  });
  return {o, states, last};
}

// Returns (dg, dk, dv, dq, ds0) given the cotangents of o and of the final state (either may
// be absent: zero); dk and dq are empty unless grad_qk.
std::vector<at::Tensor> backward(const at::Tensor& g, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& q, const std::optional<at::Tensor>& s0,
                                 const at::Tensor& states, const std::optional<at::Tensor>& d_o,
                                 const std::optional<at::Tensor>& dlast, bool grad_qk) {
  check_all(g, {g, k, v, q, s0, states, d_o, dlast});
  const int64_t B = g.size(0), L = g.size(1), H = g.size(2);
  auto dg = at::empty_like(g), dv = at::empty_like(g);
  auto dk = grad_qk ? at::empty_like(g) : at::empty({0}, g.options());
  auto dq = grad_qk ? at::empty_like(g) : at::empty({0}, g.options());
  auto ds0 = at::empty({B, H}, g.options());
  const at::Tensor grad_o = d_o.has_value() ? *d_o : at::zeros_like(g);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "scalar_scan_backward", [&] {
    backward_impl<scalar_t>(B, L, H, g.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                            v.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(), opt_ptr<scalar_t>(s0),
                            states.data_ptr<scalar_t>(), grad_o.data_ptr<scalar_t>(),
                            opt_ptr<scalar_t>(dlast), grad_qk, dg.data_ptr<scalar_t>(),
                            dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(),
                            dq.data_ptr<scalar_t>(), ds0.data_ptr<scalar_t>());
  });
  return {dg, dk, dv, dq, ds0};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "one-element-state gated linear recurrence forward (CPU)");
  m.def("backward", &backward, "one-element-state gated linear recurrence backward (CPU)");
}
