// Fused CPU selective scan, forward and backward (see reference.py for the equations).
//
// One task owns a contiguous range of channels of one batch row and runs the recurrence over
// time with the state h (N values) in a small buffer, so the inner loop over N vectorises.
// The forward pass stores the state entering every chunk of K steps; the backward pass walks
// the chunks in reverse, recomputes the K states of a chunk from its checkpoint and then runs
// the adjoint recurrence dh_{t-1} = exp(dt_t A) * dh_t through it.
//
// The kernel sees the step sizes dt = softplus(delta + delta_bias) already computed and returns
// the ungated y = <C, h> + D u: the per-element transcendental functions (softplus, its
// derivative, the silu gate) run vectorised in ATen around it, leaving only exp(dt * A) here.
//
// Layout (all contiguous, one floating dtype): u, dt, y: (batch, dim, L); A: (dim, N);
// variable B, C: (batch, G, L, N) (time-major so a step reads N consecutive values);
// constant B, C: (dim, N).

// ATen and torch's pybind11 casters, not <torch/extension.h>: that one adds the whole C++
// frontend (nn, optim, data) and makes a cold build take about twice as long.
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace {

// Keeps GCC from unrolling a loop over a constant N into scalar code before the vectoriser
// sees it (it would then call the scalar exp N times instead of the vector one N / 8 times).
#define VECTOR_LOOP _Pragma("GCC unroll 1")

// Read-only view of B or C for one (batch, channel) row.
template <typename T>
struct Operand {
  const T* base;     // start of the row at t = 0
  int64_t t_stride;  // N when variable, 0 when constant over time
  inline const T* at(int64_t t) const { return base + t * t_stride; }
};

template <typename T>
Operand<T> operand_row(const at::Tensor& M, bool variable, int64_t b, int64_t d, int64_t dim,
                       int64_t L, int64_t N) {
  if (!variable) return {M.data_ptr<T>() + d * N, 0};
  const int64_t G = M.size(1);
  const int64_t g = d / (dim / G);
  return {M.data_ptr<T>() + ((b * G + g) * L) * N, N};
}

struct Problem {
  int64_t batch, dim, L, N, K, nchunks;
  bool var_B, var_C;
};

Problem make_problem(const at::Tensor& u, const at::Tensor& A, const at::Tensor& B,
                     const at::Tensor& C, int64_t K) {
  TORCH_CHECK(K > 0, "chunk length must be positive");
  const int64_t L = u.size(2);
  return {u.size(0), u.size(1), L, A.size(1), K, (L + K - 1) / K, B.dim() == 4, C.dim() == 4};
}

// exp for the decays exp(dt A): libmvec's vector exp for double; for float an inline
// polynomial (Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, degree-6 polynomial, times 2^n),
// within 2 ulp of expf, which GCC vectorises in place (no call, nothing spilled around one).
// Arguments below -87.3 (results under 1.2e-38) give 2^-126 instead of a denormal or 0.
template <typename T>
inline T exp_decay(T x) {
  return std::exp(x);
}

template <>
inline float exp_decay<float>(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// Per-row kernels. N is a compile-time constant NC when NC > 0 (the common state sizes: the
// loops over N unroll into whole vectors and the per-row state stays in registers), the
// runtime p.N when NC == 0. Every per-step loop over N reads and writes separate arrays
// (restrict), so it vectorises, exp included (glibc libmvec under -ffast-math).

// One forward step: h <- exp(dt A) h + dt u B; returns <C, h>.
template <typename T, int NC>
inline T forward_step(int64_t N_, T dt, T dtu, const T* __restrict__ A, const T* __restrict__ Bt,
                      const T* __restrict__ Ct, T* __restrict__ h) {
  const int64_t N = NC > 0 ? NC : N_;
  T y = T(0);
  VECTOR_LOOP
  for (int64_t n = 0; n < N; ++n) {
    h[n] = exp_decay(dt * A[n]) * h[n] + dtu * Bt[n];
    y += Ct[n] * h[n];
  }
  return y;
}

// Recomputes one step for the backward pass: dec = exp(dt A), dp = dec h_{t-1} (what the
// gradients of the exponent need), and h_t = dp + dt u B in place of h_{t-1}.
template <typename T, int NC>
inline void recompute_step(int64_t N_, T dt, T dtu, const T* __restrict__ A,
                           const T* __restrict__ Bt, T* __restrict__ h, T* __restrict__ dec,
                           T* __restrict__ dp) {
  const int64_t N = NC > 0 ? NC : N_;
  VECTOR_LOOP
  for (int64_t n = 0; n < N; ++n) {
    const T e = exp_decay(dt * A[n]);
    const T p = e * h[n];
    dec[n] = e;
    dp[n] = p;
    h[n] = p + dtu * Bt[n];
  }
}

// One adjoint step (see reference.py's README section): with dhn = dh + dy C the total
// gradient reaching h_t, accumulates dB_t, dC_t, dA and returns through r and s the sums
// sum_n dhn dp A (the exponent's part of ddt) and sum_n dhn B; dh <- dhn dec.
template <typename T, int NC>
inline void adjoint_step(int64_t N_, T dt, T dy, T dtu, const T* __restrict__ A,
                         const T* __restrict__ Bt, const T* __restrict__ Ct,
                         const T* __restrict__ dec, const T* __restrict__ dp,
                         T* __restrict__ dBt, T* __restrict__ dCt, T* __restrict__ dA,
                         T* __restrict__ dh, T& r_out, T& s_out) {
  const int64_t N = NC > 0 ? NC : N_;
  T r = T(0), s = T(0);
  VECTOR_LOOP
  for (int64_t n = 0; n < N; ++n) {
    const T dhn = dh[n] + dy * Ct[n];
    const T ddec = dhn * dp[n];  // gradient of the exponent dt * A
    dCt[n] += dy * (dp[n] + dtu * Bt[n]);  // dy h_t
    r += ddec * A[n];
    s += dhn * Bt[n];
    dA[n] += ddec * dt;
    dBt[n] += dhn * dtu;
    dh[n] = dhn * dec[n];
  }
  r_out = r;
  s_out = s;
}

// Pointers of one (batch, channel) row.
template <typename T>
struct Row {
  const T *u, *dt, *A;
  Operand<T> B, C;
  T D;
};

template <typename T>
Row<T> row_of(const Problem& p, const at::Tensor& u, const at::Tensor& dt, const at::Tensor& A,
              const at::Tensor& B, const at::Tensor& C, const T* D, int64_t b, int64_t d) {
  const int64_t row = b * p.dim + d;
  return {u.data_ptr<T>() + row * p.L, dt.data_ptr<T>() + row * p.L, A.data_ptr<T>() + d * p.N,
          operand_row<T>(B, p.var_B, b, d, p.dim, p.L, p.N),
          operand_row<T>(C, p.var_C, b, d, p.dim, p.L, p.N), D ? D[d] : T(0)};
}

// Scratch of fixed size NC on the stack (kept in registers once the loops unroll), or of the
// runtime N in `heap`.
template <typename T, int NC>
struct Scratch {
  alignas(64) T data[NC > 0 ? NC : 1];
  T* get(std::vector<T>& heap) { return NC > 0 ? data : heap.data(); }
};

template <typename T, int NC>
void forward_row(const Problem& p, const Row<T>& r, const T* h0, T* y, T* ck, T* last,
                 std::vector<T>& heap) {
  const int64_t N = NC > 0 ? NC : p.N, L = p.L;
  Scratch<T, NC> hs;
  T* __restrict__ h = hs.get(heap);
  for (int64_t n = 0; n < N; ++n) h[n] = h0 ? h0[n] : T(0);
  for (int64_t t = 0; t < L; ++t) {
    if (t % p.K == 0) std::copy(h, h + N, ck + (t / p.K) * N);
    const T dt = r.dt[t], ut = r.u[t];
    y[t] = forward_step<T, NC>(N, dt, dt * ut, r.A, r.B.at(t), r.C.at(t), h) + r.D * ut;
  }
  std::copy(h, h + N, last);
}

template <typename T, int NC>
void forward_rows(const Problem& p, const at::Tensor& u, const at::Tensor& dt_all,
                  const at::Tensor& A, const at::Tensor& B, const at::Tensor& C, const T* D,
                  const T* h0, at::Tensor& y_all, at::Tensor& last, at::Tensor& ckpt) {
  at::parallel_for(0, p.batch * p.dim, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> heap(p.N);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.dim, d = row % p.dim;
      forward_row<T, NC>(p, row_of<T>(p, u, dt_all, A, B, C, D, b, d),
                         h0 ? h0 + row * p.N : nullptr, y_all.data_ptr<T>() + row * p.L,
                         ckpt.data_ptr<T>() + row * p.nchunks * p.N,
                         last.data_ptr<T>() + row * p.N, heap);
    }
  });
}

// Gradient outputs of the backward pass. dA and constant dB / dC are per (batch, channel) rows;
// variable dB / dC are per-task partial sums (channels of a group share them). Python sums.
struct Grads {
  at::Tensor du, ddt, dA, dB, dC, dh0;
};

// Per-task buffers of the backward pass: a chunk's decays and dp = dec * h_{t-1} (K x N each).
template <typename T>
struct BackwardBuffers {
  std::vector<T> dec, dp, h, dh, dA;
  BackwardBuffers(int64_t K, int64_t N) : dec(K * N), dp(K * N), h(N), dh(N), dA(N) {}
};

// The adjoint of one row: chunks in reverse, each recomputed from its checkpoint, then walked
// backwards in time. dB, dC point at the row's (or its task's) gradient rows.
template <typename T, int NC>
void backward_row(const Problem& p, const Row<T>& r, const T* ck, const T* dy, const T* dlast,
                  T* dBrow, int64_t dB_t, T* dCrow, int64_t dC_t, T* du, T* ddt, T* dA_out,
                  T* dh0, BackwardBuffers<T>& buf) {
  const int64_t N = NC > 0 ? NC : p.N, L = p.L, K = p.K;
  Scratch<T, NC> h_s, dh_s, dA_s;
  T* __restrict__ h = h_s.get(buf.h);
  T* __restrict__ dh = dh_s.get(buf.dh);
  T* __restrict__ dA = dA_s.get(buf.dA);
  T* __restrict__ dec = buf.dec.data();
  T* __restrict__ dp = buf.dp.data();
  for (int64_t n = 0; n < N; ++n) {
    dh[n] = dlast ? dlast[n] : T(0);
    dA[n] = T(0);
  }
  for (int64_t c = p.nchunks - 1; c >= 0; --c) {
    const int64_t t0 = c * K, t1 = std::min(L, t0 + K);
    std::copy(ck + c * N, ck + (c + 1) * N, h);
    for (int64_t t = t0; t < t1; ++t) {
      const T dt = r.dt[t];
      recompute_step<T, NC>(N, dt, dt * r.u[t], r.A, r.B.at(t), h, dec + (t - t0) * N,
                            dp + (t - t0) * N);
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const T dt = r.dt[t], ut = r.u[t], dyt = dy[t];
      T sum_r, sum_s;
      adjoint_step<T, NC>(N, dt, dyt, dt * ut, r.A, r.B.at(t), r.C.at(t), dec + (t - t0) * N,
                          dp + (t - t0) * N, dBrow + t * dB_t, dCrow + t * dC_t, dA, dh, sum_r,
                          sum_s);
      ddt[t] = sum_r + ut * sum_s;
      du[t] = dt * sum_s + dyt * r.D;
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    dA_out[n] = dA[n];
    dh0[n] = dh[n];
  }
}

template <typename T, int NC>
void backward_rows(const Problem& p, int64_t splits, const at::Tensor& u,
                   const at::Tensor& dt_all, const at::Tensor& A, const at::Tensor& B,
                   const at::Tensor& C, const T* D, const at::Tensor& ckpt,
                   const at::Tensor& dy_all, const T* dlast, Grads& g) {
  const int64_t N = p.N, L = p.L;
  const int64_t per_split = (p.dim + splits - 1) / splits;
  at::parallel_for(0, p.batch * splits, 1, [&](int64_t begin, int64_t end) {
    BackwardBuffers<T> buf(p.K, N);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / splits, s = task % splits;
      const int64_t d_end = std::min(p.dim, (s + 1) * per_split);
      for (int64_t d = s * per_split; d < d_end; ++d) {
        const int64_t row = b * p.dim + d;
        T* dBrow = p.var_B ? g.dB.data_ptr<T>() +
                                 ((task * B.size(1) + d / (p.dim / B.size(1))) * L) * N
                           : g.dB.data_ptr<T>() + row * N;
        T* dCrow = p.var_C ? g.dC.data_ptr<T>() +
                                 ((task * C.size(1) + d / (p.dim / C.size(1))) * L) * N
                           : g.dC.data_ptr<T>() + row * N;
        backward_row<T, NC>(p, row_of<T>(p, u, dt_all, A, B, C, D, b, d),
                            ckpt.data_ptr<T>() + row * p.nchunks * N, dy_all.data_ptr<T>() + row * L,
                            dlast ? dlast + row * N : nullptr, dBrow, p.var_B ? N : 0, dCrow,
                            p.var_C ? N : 0, g.du.data_ptr<T>() + row * L,
                            g.ddt.data_ptr<T>() + row * L, g.dA.data_ptr<T>() + row * N,
                            g.dh0.data_ptr<T>() + row * N, buf);
      }
    }
  });
}

// Calls f.template operator()<NC>() with NC = N for the state sizes compiled as constants.
template <typename F>
void with_state_size(int64_t N, F&& f) {
  switch (N) {
    case 8: f.template operator()<8>(); break;
    case 16: f.template operator()<16>(); break;
    case 32: f.template operator()<32>(); break;
    default: f.template operator()<0>();
  }
}

template <typename T>
const T* opt_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

void check_all(const at::Tensor& u, std::initializer_list<std::optional<at::Tensor>> ts) {
  for (const auto& t : ts) {
    if (!t.has_value()) continue;
    TORCH_CHECK(t->device().is_cpu(), "selective_scan cpu: tensors must be on the CPU");
    TORCH_CHECK(t->is_contiguous(), "selective_scan cpu: tensors must be contiguous");
    TORCH_CHECK(t->scalar_type() == u.scalar_type(), "selective_scan cpu: mixed dtypes");
  }
}

}  // namespace

// Returns (y, last_state, checkpoints): y = <C, h> + D u ungated, checkpoints
// (batch, dim, ceil(L/K), N) the state entering each chunk of K steps.
std::vector<at::Tensor> forward(const at::Tensor& u, const at::Tensor& dt, const at::Tensor& A,
                                const at::Tensor& B, const at::Tensor& C,
                                const std::optional<at::Tensor>& D,
                                const std::optional<at::Tensor>& h0, int64_t K) {
  check_all(u, {u, dt, A, B, C, D, h0});
  const Problem p = make_problem(u, A, B, C, K);
  auto y = at::empty_like(u);
  auto last = at::empty({p.batch, p.dim, p.N}, u.options());
  auto ckpt = at::empty({p.batch, p.dim, p.nchunks, p.N}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "selective_scan_forward", [&] {
    with_state_size(p.N, [&]<int NC>() {
      forward_rows<scalar_t, NC>(p, u, dt, A, B, C, opt_ptr<scalar_t>(D), opt_ptr<scalar_t>(h0),
                                 y, last, ckpt);
    });
  });
  return {y, last, ckpt};
}

// Returns (du, ddt, dA, dB, dC, dh0) given dy (gradient of the ungated y) and optionally the
// gradient of the last state. dA and constant dB / dC come per batch row: (batch, dim, N);
// variable dB / dC as (batch, splits, G, L, N) partial sums over channel splits.
std::vector<at::Tensor> backward(const at::Tensor& u, const at::Tensor& dt, const at::Tensor& A,
                                 const at::Tensor& B, const at::Tensor& C,
                                 const std::optional<at::Tensor>& D, const at::Tensor& ckpt,
                                 const at::Tensor& dy, const std::optional<at::Tensor>& dlast,
                                 int64_t K, int64_t splits) {
  check_all(u, {u, dt, A, B, C, D, ckpt, dy, dlast});
  const Problem p = make_problem(u, A, B, C, K);
  TORCH_CHECK(splits >= 1 && splits <= std::max<int64_t>(p.dim, 1), "bad channel split");
  TORCH_CHECK(ckpt.size(2) == p.nchunks, "checkpoints do not match the chunk length");
  auto opts = u.options();
  auto operand_grad = [&](const at::Tensor& M, bool variable) {
    return variable ? at::zeros({p.batch, splits, M.size(1), p.L, p.N}, opts)
                    : at::zeros({p.batch, p.dim, p.N}, opts);
  };
  Grads g{at::empty_like(u),
          at::empty_like(u),
          at::zeros({p.batch, p.dim, p.N}, opts),
          operand_grad(B, p.var_B),
          operand_grad(C, p.var_C),
          at::empty({p.batch, p.dim, p.N}, opts)};
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "selective_scan_backward", [&] {
    with_state_size(p.N, [&]<int NC>() {
      backward_rows<scalar_t, NC>(p, splits, u, dt, A, B, C, opt_ptr<scalar_t>(D), ckpt, dy,
                                  opt_ptr<scalar_t>(dlast), g);
    });
  });
  return {g.du, g.ddt, g.dA, g.dB, g.dC, g.dh0};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "selective scan forward (CPU)");
  m.def("backward", &backward, "selective scan backward (CPU)");
}
