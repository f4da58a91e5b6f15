// Fused CPU RWKV-4 WKV, forward and backward (see cpu.py and triton.py for the equations).
//
// One task owns one batch row and walks the T steps with the channel dimension innermost, so
// every loop over channels (maxima, exponentials, the state update) vectorises. The state is
// (num, den, max) with true sums num e^max, den e^max: every exponential is of a non-positive
// number, exactly as in reference.py. The backward pass is cpu.py's two passes in one call:
//
// * pass 1 (forward in t) recomputes y_t, 1/den_t and the exponent of e^{u+k_t}, and
//   accumulates dL/du and dL/dw (through forward-mode derivatives of num and den in w);
// * pass 2 (reverse in t) carries G_num, G_den = dL/d(true num, den entering step t) and gives
//   dk_t, dv_t, and at the end the gradient of the incoming state.
//
// Layout (contiguous, one floating dtype): w, u: (C,); k, v, y: (B, T, C); state: (B, C).

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

constexpr double EMPTY_MAX = -1e38;  // reference.EMPTY_MAX: e^{EMPTY_MAX} == 0

// m = max(a, b), ea = e^{a - m}, eb = e^{b - m} with one exponential: the larger one's is
// e^0 = 1 exactly, the other's e^{-|a - b|}, the very numbers the two exponentials would give.
template <typename T>
inline void rescale(T a, T b, T& m, T& ea, T& eb) {
  const bool a_top = a >= b;
  const T e = std::exp(a_top ? b - a : a - b);
  m = a_top ? a : b;
  ea = a_top ? T(1) : e;
  eb = a_top ? e : T(1);
}

template <typename T>
const T* opt_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

// The state entering a batch row: the given one, or the empty state (0, 0, EMPTY_MAX).
template <typename T>
void initial_state(int64_t C, int64_t b, const T* num0, const T* den0, const T* max0, T* num,
                   T* den, T* top) {
  if (num0) {
    std::copy(num0 + b * C, num0 + (b + 1) * C, num);
    std::copy(den0 + b * C, den0 + (b + 1) * C, den);
    std::copy(max0 + b * C, max0 + (b + 1) * C, top);
  } else {
    std::fill(num, num + C, T(0));
    std::fill(den, den + C, T(0));
    std::fill(top, top + C, T(EMPTY_MAX));
  }
}

// One step of the forward recurrence over the C channels of one batch row: y_t from the
// state, then the state updated in place. Every pointer is a separate array (restrict), so the
// loop over channels vectorises, exp included.
template <typename T>
void forward_step(int64_t C, const T* __restrict__ w, const T* __restrict__ u,
                  const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ y,
                  T* __restrict__ num, T* __restrict__ den, T* __restrict__ top) {
  for (int64_t c = 0; c < C; ++c) {
    T m, old, fresh;
    rescale(top[c], u[c] + k[c], m, old, fresh);
    y[c] = (old * num[c] + fresh * v[c]) / (old * den[c] + fresh);
    rescale(top[c] - w[c], k[c], m, old, fresh);
    num[c] = old * num[c] + fresh * v[c];
    den[c] = old * den[c] + fresh;
    top[c] = m;
  }
}

template <typename T>
void forward_impl(int64_t B, int64_t L, int64_t C, const T* w, const T* u, const T* k,
                  const T* v, const T* num0, const T* den0, const T* max0, T* y, T* num,
                  T* den, T* top) {
  at::parallel_for(0, B, 1, [=](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      T* nb = num + b * C;
      T* db = den + b * C;
      T* tb = top + b * C;
      initial_state(C, b, num0, den0, max0, nb, db, tb);
      for (int64_t t = 0; t < L; ++t) {
        const int64_t row = (b * L + t) * C;
        forward_step(C, w, u, k + row, v + row, y + row, nb, db, tb);
      }
    }
  });
}

// The running quantities of the backward pass over one batch row, (C,) each.
template <typename T>
struct Row {
  T *num, *den, *top, *dnum_dw, *dden_dw, *gw, *gu;
};

// Pass 1, one step: y_t, 1/den_t and the bonus exponent u + k_t - max saved for pass 2; dL/dw
// (through forward-mode derivatives of num and den in w) and dL/du accumulated.
template <typename T>
void pass1_step(int64_t C, const T* __restrict__ w, const T* __restrict__ u,
                const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ gy,
                T* __restrict__ ys, T* __restrict__ idens, T* __restrict__ bonuses,
                T* __restrict__ num, T* __restrict__ den, T* __restrict__ top,
                T* __restrict__ dnum_dw, T* __restrict__ dden_dw, T* __restrict__ gw,
                T* __restrict__ gu) {
  for (int64_t c = 0; c < C; ++c) {
    T m, old, fresh;
    rescale(top[c], u[c] + k[c], m, old, fresh);
    const T iden = T(1) / (old * den[c] + fresh);
    const T y = (old * num[c] + fresh * v[c]) * iden;
    ys[c] = y;
    idens[c] = iden;
    bonuses[c] = u[c] + k[c] - m;
    gw[c] += gy[c] * (dnum_dw[c] - dden_dw[c] * y) * iden * old;
    gu[c] += gy[c] * (v[c] - y) * fresh * iden;
    rescale(top[c] - w[c], k[c], m, old, fresh);
    dnum_dw[c] = old * (dnum_dw[c] - num[c]);
    dden_dw[c] = old * (dden_dw[c] - den[c]);
    num[c] = old * num[c] + fresh * v[c];
    den[c] = old * den[c] + fresh;
    top[c] = m;
  }
}

// Pass 2, one step in reverse: dk_t, dv_t, and (G_num, G_den) carried to the step before, in
// units of e^{-scale}.
template <typename T>
void pass2_step(int64_t C, const T* __restrict__ w, const T* __restrict__ u,
                const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ gy,
                const T* __restrict__ ys, const T* __restrict__ idens,
                const T* __restrict__ bonuses, T* __restrict__ gk, T* __restrict__ gv,
                T* __restrict__ gnum, T* __restrict__ gden, T* __restrict__ scale) {
  for (int64_t c = 0; c < C; ++c) {
    const T g_self = gy[c] * idens[c] * std::exp(bonuses[c]);
    const T g_later = std::exp(k[c] + scale[c]);
    gk[c] = g_self * (v[c] - ys[c]) + g_later * (gnum[c] * v[c] + gden[c]);
    gv[c] = g_self + g_later * gnum[c];
    T m, old, e_self;
    rescale(scale[c] - w[c], bonuses[c] - k[c] - u[c], m, old, e_self);
    const T fresh = gy[c] * idens[c] * e_self;
    gnum[c] = old * gnum[c] + fresh;
    gden[c] = old * gden[c] - fresh * ys[c];
    scale[c] = m;
  }
}

template <typename T>
struct Grads {
  T *gw, *gu, *gk, *gv, *gnum0, *gden0, *gmax0;  // gw, gu per batch row: (B, C)
};

template <typename T>
void backward_impl(int64_t B, int64_t L, int64_t C, const T* w, const T* u, const T* k,
                   const T* v, const T* num0, const T* den0, const T* max0, const T* gy,
                   const T* gnum_last, const T* gden_last, const Grads<T>& g) {
  const bool state_cotangent = gnum_last || gden_last;
  at::parallel_for(0, B, 1, [=](int64_t begin, int64_t end) {
    std::vector<T> ys(L * C), idens(L * C), bonuses(L * C), buffer(8 * C);
    T* num = buffer.data();
    T *den = num + C, *top = den + C, *dnum_dw = top + C, *dden_dw = dnum_dw + C;
    T *gnum = dden_dw + C, *gden = gnum + C, *scale = gden + C;
    for (int64_t b = begin; b < end; ++b) {
      T* gw = g.gw + b * C;
      T* gu = g.gu + b * C;
      initial_state(C, b, num0, den0, max0, num, den, top);
      for (int64_t c = 0; c < C; ++c) dnum_dw[c] = dden_dw[c] = gw[c] = gu[c] = T(0);
      for (int64_t t = 0; t < L; ++t) {  // pass 1
        const int64_t row = (b * L + t) * C;
        pass1_step(C, w, u, k + row, v + row, gy + row, &ys[t * C], &idens[t * C],
                   &bonuses[t * C], num, den, top, dnum_dw, dden_dw, gw, gu);
      }
      // cotangents on the returned (num, den) are per scaled unit: true ones carry e^{-max}
      for (int64_t c = 0; c < C; ++c) {
        if (state_cotangent) {
          gnum[c] = gnum_last ? gnum_last[b * C + c] : T(0);
          gden[c] = gden_last ? gden_last[b * C + c] : T(0);
          gw[c] += gnum[c] * dnum_dw[c] + gden[c] * dden_dw[c];
          scale[c] = -top[c];
        } else {
          gnum[c] = gden[c] = T(0);
          scale[c] = T(EMPTY_MAX);
        }
      }
      for (int64_t t = L - 1; t >= 0; --t) {  // pass 2
        const int64_t row = (b * L + t) * C;
        pass2_step(C, w, u, k + row, v + row, gy + row, &ys[t * C], &idens[t * C],
                   &bonuses[t * C], g.gk + row, g.gv + row, gnum, gden, scale);
      }
      if (num0) {  // the incoming state's gradient, through (num e^max, den e^max)
        T* gn = g.gnum0 + b * C;
        T* gd = g.gden0 + b * C;
        T* gm = g.gmax0 + b * C;
        for (int64_t c = 0; c < C; ++c) {
          const T e = std::exp(scale[c] + max0[b * C + c]);
          gn[c] = gnum[c] * e;
          gd[c] = gden[c] * e;
          gm[c] = gn[c] * num0[b * C + c] + gd[c] * den0[b * C + c];
        }
      }
    }
  });
}

void check_all(const at::Tensor& k, std::initializer_list<std::optional<at::Tensor>> ts) {
  TORCH_CHECK(k.dim() == 3, "wkv cpu: k must be (B, T, C)");
  for (const auto& t : ts) {
    if (!t.has_value()) continue;
    TORCH_CHECK(t->device().is_cpu(), "wkv cpu: tensors must be on the CPU");
    TORCH_CHECK(t->is_contiguous(), "wkv cpu: tensors must be contiguous");
    TORCH_CHECK(t->scalar_type() == k.scalar_type(), "wkv cpu: mixed dtypes");
  }
}

}  // namespace

// Returns (y, num, den, max): y (B, T, C), the state after the last step (B, C) each. The
// state (num0, den0, max0) is all three or none (the empty state).
std::vector<at::Tensor> forward(const at::Tensor& w, const at::Tensor& u, const at::Tensor& k,
                                const at::Tensor& v, const std::optional<at::Tensor>& num0,
                                const std::optional<at::Tensor>& den0,
                                const std::optional<at::Tensor>& max0) {
  check_all(k, {w, u, k, v, num0, den0, max0});
  TORCH_CHECK(num0.has_value() == den0.has_value() && den0.has_value() == max0.has_value(),
              "wkv cpu: pass all of num, den and max or none");
  const int64_t B = k.size(0), L = k.size(1), C = k.size(2);
  auto y = at::empty_like(k);
  auto num = at::empty({B, C}, k.options());
  auto den = at::empty({B, C}, k.options());
  auto top = at::empty({B, C}, k.options());
  AT_DISPATCH_FLOATING_TYPES(k.scalar_type(), "wkv_forward", [&] {
    forward_impl<scalar_t>(B, L, C, w.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
                           k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                           opt_ptr<scalar_t>(num0), opt_ptr<scalar_t>(den0),
                           opt_ptr<scalar_t>(max0), y.data_ptr<scalar_t>(),
                           num.data_ptr<scalar_t>(), den.data_ptr<scalar_t>(),
                           top.data_ptr<scalar_t>());
  });
  return {y, num, den, top};
}

// Returns (gw (C,), gu (C,), gk, gv, gnum0, gden0, gmax0) given gy and the cotangents of the
// returned num and den (either may be absent: zero). Without an incoming state the last three
// are empty.
std::vector<at::Tensor> backward(const at::Tensor& w, const at::Tensor& u, const at::Tensor& k,
                                 const at::Tensor& v, const std::optional<at::Tensor>& num0,
                                 const std::optional<at::Tensor>& den0,
                                 const std::optional<at::Tensor>& max0, const at::Tensor& gy,
                                 const std::optional<at::Tensor>& gnum_last,
                                 const std::optional<at::Tensor>& gden_last) {
  check_all(k, {w, u, k, v, num0, den0, max0, gy, gnum_last, gden_last});
  TORCH_CHECK(num0.has_value() == den0.has_value() && den0.has_value() == max0.has_value(),
              "wkv cpu: pass all of num, den and max or none");
  const int64_t B = k.size(0), L = k.size(1), C = k.size(2);
  auto opts = k.options();
  const bool state = num0.has_value();
  auto gw = at::empty({B, C}, opts), gu = at::empty({B, C}, opts);
  auto gk = at::empty_like(k), gv = at::empty_like(v);
  const std::vector<int64_t> state_shape = state ? std::vector<int64_t>{B, C} : std::vector<int64_t>{0};
  auto gnum0 = at::empty(state_shape, opts), gden0 = at::empty(state_shape, opts);
  auto gmax0 = at::empty(state_shape, opts);
  AT_DISPATCH_FLOATING_TYPES(k.scalar_type(), "wkv_backward", [&] {
    backward_impl<scalar_t>(B, L, C, w.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
                            k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                            opt_ptr<scalar_t>(num0), opt_ptr<scalar_t>(den0),
                            opt_ptr<scalar_t>(max0), gy.data_ptr<scalar_t>(),
                            opt_ptr<scalar_t>(gnum_last), opt_ptr<scalar_t>(gden_last),
                            Grads<scalar_t>{gw.data_ptr<scalar_t>(), gu.data_ptr<scalar_t>(),
                                            gk.data_ptr<scalar_t>(), gv.data_ptr<scalar_t>(),
                                            gnum0.data_ptr<scalar_t>(), gden0.data_ptr<scalar_t>(),
                                            gmax0.data_ptr<scalar_t>()});
  });
  return {gw.sum(0), gu.sum(0), gk, gv, gnum0, gden0, gmax0};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "RWKV-4 WKV forward (CPU)");
  m.def("backward", &backward, "RWKV-4 WKV backward (CPU)");
}
