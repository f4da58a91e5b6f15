// Fused CPU GRU training path, forward and backward (see cpu.py and reference.py for the
// equations). PyTorch's GRU layout: gates [r, z, n] stacked along the rows of
// W_ih (3H, D), W_hh (3H, H), b_ih, b_hh (3H); the initial state is zero.
//
//   gi = x W_ih^T + b_ih                              one GEMM over all B*T rows
//   gh_t = h_{t-1} W_hh^T + b_hh                      one (B, H) x (H, 3H) GEMM a step
//   r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n)
//   h_t = (1 - z) ⊙ n + z ⊙ h_{t-1}
//
// The gate arithmetic is plain loops over the H channels (vectorised; exp and tanh through
// glibc's libmvec under -ffast-math). The forward saves r, z, n and gh_n of every step,
// (B, T, 4H), and the outputs h (B, T, H), which are also the h_{t-1} of the next step.
//
// Backward, with dh_t the whole gradient reaching h_t (dy_t plus what step t+1 sends back):
//
//   dn = dh (1 - z)      da_n = dn (1 - n^2)       dgh_n = da_n r
//   da_r = da_n gh_n r (1 - r)                    da_z = dh (h_{t-1} - n) z (1 - z)
//   dgi_t = [da_r, da_z, da_n]    dgh_t = [da_r, da_z, dgh_n]
//   dh_{t-1} = dy_{t-1} + dh z + dgh_t W_hh        one (B, 3H) x (3H, H) GEMM a step
//
// then dx = dgi W_ih, dW_ih = dgi^T x, dW_hh = sum_t dgh_t^T h_{t-1}: three GEMMs over all
// rows. dgh_t is stored at row (b, t - 1) of a (B, T, 3H) buffer whose rows (b, T - 1) are
// zero, so that dW_hh is one GEMM against the outputs h as they are (row (b, t) holds h_t).
// The biases' gradients are sums over rows, accumulated in the loop.

// ATen and torch's pybind11 casters, not <torch/extension.h>: that one adds the whole C++
// frontend (nn, optim, data) and makes a cold build take about twice as long.
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

// Clamp of exp's argument: no overflow to inf (-ffast-math assumes finite values); the
// clamped values' sigmoid / tanh equal the true ones to the type's precision.
template <typename T>
constexpr T exp_limit() {
  return sizeof(T) == 4 ? T(80) : T(700);
}

template <typename T>
inline T sigmoid(T a) {
  const T lim = exp_limit<T>();
  a = std::min(std::max(a, -lim), lim);
  return T(1) / (T(1) + std::exp(-a));
}

// tanh(a) = 1 - 2 / (e^{2a} + 1): the same exp as the sigmoid, vectorised alike.
template <typename T>
inline T tanh_(T a) {
  const T lim = exp_limit<T>() / 2;
  a = std::min(std::max(a, -lim), lim);
  return T(1) - T(2) / (std::exp(T(2) * a) + T(1));
}

// One batch row of one forward step: gi (3H) the input projection, gh (3H) the hidden one
// (biases included), hp the previous state, h the new state, s (4H) the saved
// r, z, n, gh_n. hp is never null (zeros at the first step): a conditional load would keep
// GCC from vectorising the loop.
template <typename T>
void gru_cell(int64_t H, const T* __restrict__ gi, const T* __restrict__ gh,
              const T* __restrict__ hp, T* __restrict__ h, T* __restrict__ s) {
  for (int64_t j = 0; j < H; ++j) {
    const T r = sigmoid(gi[j] + gh[j]);
    const T z = sigmoid(gi[H + j] + gh[H + j]);
    const T n = tanh_(gi[2 * H + j] + r * gh[2 * H + j]);
    h[j] = n + z * (hp[j] - n);
    s[j] = r;
    s[H + j] = z;
    s[2 * H + j] = n;
    s[3 * H + j] = gh[2 * H + j];
  }
}

// One batch row of one backward step. dh (H) in: the gradient reaching h_t; out: the part of
// dh_{t-1} that skips the GEMM (dh z). dgi, dgh (3H) out.
template <typename T>
void gru_cell_backward(int64_t H, const T* __restrict__ s, const T* __restrict__ hp,
                       T* __restrict__ dh, T* __restrict__ dgi, T* __restrict__ dgh) {
  for (int64_t j = 0; j < H; ++j) {
    const T r = s[j], z = s[H + j], n = s[2 * H + j], ghn = s[3 * H + j];
    const T g = dh[j];
    const T dan = g * (T(1) - z) * (T(1) - n * n);
    const T dar = dan * ghn * r * (T(1) - r);
    const T daz = g * (hp[j] - n) * z * (T(1) - z);
    dh[j] = g * z;
    dgi[j] = dar;
    dgi[H + j] = daz;
    dgi[2 * H + j] = dan;
    dgh[j] = dar;
    dgh[H + j] = daz;
    dgh[2 * H + j] = dan * r;
  }
}

void check(const at::Tensor& x, std::initializer_list<at::Tensor> all) {
  for (const auto& t : all) {
    TORCH_CHECK(t.device().is_cpu(), "recurrent cpu: CPU tensors only");
    TORCH_CHECK(t.scalar_type() == x.scalar_type(), "recurrent cpu: one dtype for every tensor");
    TORCH_CHECK(t.is_contiguous(), "recurrent cpu: contiguous tensors only");
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "recurrent cpu: float32 or float64");
}

// Work per parallel task: at least this many channel updates, so that small steps stay on
// one thread (a step's cell work is a few microseconds).
constexpr int64_t GRAIN = 1 << 14;

}  // namespace

// x (B, T, D), w_ih (3H, D), w_hh (3H, H), b_ih, b_hh (3H) -> y (B, T, H), saved (B, T, 4H).
std::vector<at::Tensor> gru_forward(const at::Tensor& x, const at::Tensor& w_ih,
                                    const at::Tensor& w_hh, const at::Tensor& b_ih,
                                    const at::Tensor& b_hh) {
  check(x, {x, w_ih, w_hh, b_ih, b_hh});
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), H = w_hh.size(1);
  TORCH_CHECK(w_ih.size(0) == 3 * H && w_ih.size(1) == D && w_hh.size(0) == 3 * H,
              "gru cpu: weight shapes");
  auto gi = at::addmm(b_ih, x.reshape({B * T, D}), w_ih.t()).view({B, T, 3 * H});
  auto y = at::empty({B, T, H}, x.options());
  auto saved = at::empty({B, T, 4 * H}, x.options());
  auto gh = at::empty({B, 3 * H}, x.options());
  auto zeros = at::zeros({H}, x.options());  // h_{-1}
  const int64_t grain = std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gru_forward", [&] {
    const scalar_t* gi_p = gi.data_ptr<scalar_t>();
    scalar_t* y_p = y.data_ptr<scalar_t>();
    scalar_t* s_p = saved.data_ptr<scalar_t>();
    scalar_t* gh_p = gh.data_ptr<scalar_t>();
    const scalar_t* zero_p = zeros.data_ptr<scalar_t>();
    const scalar_t* bhh_p = b_hh.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0) {
        at::addmm_out(gh, b_hh, y.select(1, t - 1), w_hh.t());
      }
      at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t row = b * T + t;
          gru_cell<scalar_t>(H, gi_p + row * 3 * H, t > 0 ? gh_p + b * 3 * H : bhh_p,
                             t > 0 ? y_p + (row - 1) * H : zero_p, y_p + row * H,
                             s_p + row * 4 * H);
        }
      });
    }
  });
  return {y, saved};
}

// Gradients of gru_forward's y: dy (B, T, H) -> dx (or an empty tensor when !need_dx),
// dw_ih, dw_hh, db_ih, db_hh.
std::vector<at::Tensor> gru_backward(const at::Tensor& dy, const at::Tensor& x,
                                     const at::Tensor& w_ih, const at::Tensor& w_hh,
                                     const at::Tensor& y, const at::Tensor& saved,
                                     bool need_dx) {
  check(x, {dy, x, w_ih, w_hh, y, saved});
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), H = w_hh.size(1);
  auto opts = x.options();
  auto dgi = at::empty({B, T, 3 * H}, opts);
  auto dgh = at::empty({B, T, 3 * H}, opts);  // row (b, t - 1): dgh_t; rows (b, T - 1): 0
  dgh.select(1, T - 1).zero_();
  auto dh = at::empty({B, H}, opts);     // gradient reaching h_t, then its skip part
  auto rec = at::empty({B, H}, opts);    // dgh_t W_hh
  auto dgh0 = at::empty({B, 3 * H}, opts);  // dgh_0 (no h_{-1} to pair with): biases only
  auto zeros = at::zeros({H}, opts);        // h_{-1}
  const int64_t grain = std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gru_backward", [&] {
    const scalar_t* dy_p = dy.data_ptr<scalar_t>();
    const scalar_t* y_p = y.data_ptr<scalar_t>();
    const scalar_t* s_p = saved.data_ptr<scalar_t>();
    scalar_t* dgi_p = dgi.data_ptr<scalar_t>();
    scalar_t* dgh_p = dgh.data_ptr<scalar_t>();
    scalar_t* dgh0_p = dgh0.data_ptr<scalar_t>();
    scalar_t* dh_p = dh.data_ptr<scalar_t>();
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* zero_p = zeros.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t row = b * T + t;
          scalar_t* __restrict__ g = dh_p + b * H;
          const scalar_t* __restrict__ dyr = dy_p + row * H;
          const scalar_t* __restrict__ rr = rec_p + b * H;
          if (t == T - 1) {
            std::copy(dyr, dyr + H, g);
          } else {
            for (int64_t j = 0; j < H; ++j) g[j] += dyr[j] + rr[j];
          }
          gru_cell_backward<scalar_t>(H, s_p + row * 4 * H, t > 0 ? y_p + (row - 1) * H : zero_p,
                                      g, dgi_p + row * 3 * H,
                                      t > 0 ? dgh_p + (row - 1) * 3 * H : dgh0_p + b * 3 * H);
        }
      });
      if (t > 0) {
        at::mm_out(rec, dgh.select(1, t - 1), w_hh);
      }
    }
  });
  auto dgi2 = dgi.view({B * T, 3 * H});
  auto dgh2 = dgh.view({B * T, 3 * H});
  auto dw_ih = at::mm(dgi2.t(), x.reshape({B * T, D}));
  auto dw_hh = at::mm(dgh2.t(), y.reshape({B * T, H}));
  auto db_ih = dgi2.sum(0);
  auto db_hh = dgh2.sum(0).add_(dgh0.sum(0));
  auto dx = need_dx ? at::mm(dgi2, w_ih).view({B, T, D}) : at::empty({0}, opts);
  return {dx, dw_ih, dw_hh, db_ih, db_hh};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gru_forward", &gru_forward, "GRU forward, zero initial state (CPU)");
  m.def("gru_backward", &gru_backward, "GRU backward (CPU)");
}
