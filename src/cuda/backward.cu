// The backward passes on CUDA (ops/backward.hpp has the contracts), f32. Written for correctness
// first: a thread per output element or row, a block per reduction; where several threads add
// into one gradient element (the keys and values of the attention, the parameters of the norms,
// a broadcast's sum, the upsampling's sources) they add with atomics, so those sums are not in a
// fixed order from run to run.
#include "cuda/common.cuh"
#include "cuda/ops.hpp"
#include "exec/activation_math.hpp"

namespace vinf::cuda::grad {
namespace {

// A view of up to kMaxDims dims, indexed by its row-major linear index.
struct View {
  float* data;
  int rank;
  std::int64_t size[kMaxDims];
  std::int64_t stride[kMaxDims];

  __device__ __forceinline__ std::int64_t offset(std::int64_t linear) const {
    std::int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (linear % size[d]) * stride[d];
      linear /= size[d];
    }
    return off;
  }
  __device__ __forceinline__ float& at(std::int64_t i0, std::int64_t i1, std::int64_t i2 = 0, std::int64_t i3 = 0) const {
    return data[i0 * stride[0] + i1 * stride[1] + (rank > 2 ? i2 * stride[2] : 0) + (rank > 3 ? i3 * stride[3] : 0)];
  }
};

View view(const Tensor& t) {
  View v{static_cast<float*>(t.data), t.rank(), {}, {}};
  for (int d = 0; d < t.rank(); ++d) {
    v.size[d] = t.shape[d];
    v.stride[d] = t.strides[d];
  }
  return v;
}

#define VINF_GRID_LOOP(i, n)                                                                   \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ double dsum(double a, double b) { return a + b; }

__global__ void activation_kernel(View x, View dy, View dx, exec::Activation act, std::int64_t n) {
  VINF_GRID_LOOP(i, n) {
    dx.data[dx.offset(i)] += dy.data[dy.offset(i)] * exec::activate_grad<float>(act, x.data[x.offset(i)]);
  }
}

__global__ void geglu_kernel(View x, View dy, View dx) {
  const std::int64_t m = dy.size[0], d = dy.size[1];
  VINF_GRID_LOOP(i, m * d) {
    const std::int64_t r = i / d, j = i % d;
    const float a = x.at(r, j), g = x.at(r, d + j), up = dy.at(r, j);
    dx.at(r, j) += up * exec::gelu(g);
    dx.at(r, d + j) += up * a * exec::activate_grad<float>(exec::Activation::gelu, g);
  }
}

// One block per (n, group) of (N, C, T, S) views.
__global__ void group_norm_kernel(View x, View dy, const float* gamma, std::int64_t gs, const float* beta,
                                  std::int64_t bs, int groups, float eps, exec::Activation act, View dx, bool has_dx,
                                  float* dgamma, std::int64_t dgs, float* dbeta, std::int64_t dbs) {
  __shared__ double shared[32];
  const std::int64_t n = blockIdx.x / groups, g = blockIdx.x % groups;
  const std::int64_t cg = x.size[1] / groups, ts = x.size[2] * x.size[3], total = cg * ts;
  auto at = [&](const View& v, std::int64_t e) -> float& {
    const std::int64_t c = g * cg + e / ts, rem = e % ts;
    return v.at(n, c, rem / v.size[3], rem % v.size[3]);
  };
  double s1 = 0, s2 = 0;
  for (std::int64_t e = threadIdx.x; e < total; e += blockDim.x) {
    const double v = at(x, e);
    s1 += v;
    s2 += v * v;
  }
  s1 = block_reduce<double>(s1, dsum, 0.0, shared);
  s2 = block_reduce<double>(s2, dsum, 0.0, shared);
  const double mean = s1 / static_cast<double>(total);
  const double rstd = 1.0 / sqrt(fmax(s2 / static_cast<double>(total) - mean * mean, 0.0) + eps);
  auto dz = [&](std::int64_t e, double& xh, double& gam) {
    const std::int64_t c = g * cg + e / ts;
    gam = gamma[c * gs];
    xh = (at(x, e) - mean) * rstd;
    return at(dy, e) * exec::activate_grad<double>(act, xh * gam + beta[c * bs]);
  };
  double a1 = 0, a2 = 0;
  for (std::int64_t c = 0; c < cg; ++c) {
    double dg = 0, db = 0;
    for (std::int64_t k = threadIdx.x; k < ts; k += blockDim.x) {
      double xh, gam;
      const double d = dz(c * ts + k, xh, gam);
      dg += d * xh;
      db += d;
      a1 += d * gam;
      a2 += d * gam * xh;
    }
    dg = block_reduce<double>(dg, dsum, 0.0, shared);
    db = block_reduce<double>(db, dsum, 0.0, shared);
    if (threadIdx.x == 0) {
      if (dgamma) atomicAdd(dgamma + (g * cg + c) * dgs, static_cast<float>(dg));
      if (dbeta) atomicAdd(dbeta + (g * cg + c) * dbs, static_cast<float>(db));
    }
  }
  if (!has_dx) return;
  a1 = block_reduce<double>(a1, dsum, 0.0, shared) / static_cast<double>(total);
  a2 = block_reduce<double>(a2, dsum, 0.0, shared) / static_cast<double>(total);
  for (std::int64_t e = threadIdx.x; e < total; e += blockDim.x) {
    double xh, gam;
    const double d = dz(e, xh, gam);
    at(dx, e) += static_cast<float>(rstd * (d * gam - a1 - xh * a2));
  }
}

// One block per row of (M, D) views.
__global__ void layer_norm_kernel(View x, const float* gamma, std::int64_t gs, View dy, float eps, View dx, bool has_dx,
                                  float* dgamma, std::int64_t dgs, float* dbeta, std::int64_t dbs) {
  __shared__ double shared[32];
  const std::int64_t r = blockIdx.x, d = x.size[1];
  double s1 = 0, s2 = 0;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double v = x.at(r, j);
    s1 += v;
    s2 += v * v;
  }
  s1 = block_reduce<double>(s1, dsum, 0.0, shared);
  s2 = block_reduce<double>(s2, dsum, 0.0, shared);
  const double mean = s1 / static_cast<double>(d);
  const double rstd = 1.0 / sqrt(fmax(s2 / static_cast<double>(d) - mean * mean, 0.0) + eps);
  double a1 = 0, a2 = 0;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double xh = (x.at(r, j) - mean) * rstd, up = dy.at(r, j);
    a1 += up * gamma[j * gs];
    a2 += up * gamma[j * gs] * xh;
    if (dgamma) atomicAdd(dgamma + j * dgs, static_cast<float>(up * xh));
    if (dbeta) atomicAdd(dbeta + j * dbs, static_cast<float>(up));
  }
  if (!has_dx) return;
  a1 = block_reduce<double>(a1, dsum, 0.0, shared) / static_cast<double>(d);
  a2 = block_reduce<double>(a2, dsum, 0.0, shared) / static_cast<double>(d);
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double xh = (x.at(r, j) - mean) * rstd;
    dx.at(r, j) += static_cast<float>(rstd * (dy.at(r, j) * gamma[j * gs] - a1 - xh * a2));
  }
}

__global__ void softmax_kernel(View y, View dy, View dx) {
  __shared__ double shared[32];
  const std::int64_t r = blockIdx.x, d = y.size[1];
  double dot = 0;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += static_cast<double>(y.at(r, j)) * dy.at(r, j);
  dot = block_reduce<double>(dot, dsum, 0.0, shared);
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x)
    dx.at(r, j) += static_cast<float>(y.at(r, j) * (dy.at(r, j) - dot));
}

// A thread per query row (b, h, i): the row's probabilities recomputed (three passes over its
// keys), its dq written, its share of dk and dv added atomically.
__global__ void attention_kernel(View q, View k, View v, View dout, exec::AttentionParams p, double log_base, View dq,
                                 View dk, View dv) {
  const std::int64_t nb = q.size[0], nh = q.size[1], lq = q.size[2], lk = k.size[2], d = q.size[3], dvn = v.size[3];
  VINF_GRID_LOOP(row, nb * nh * lq) {
    const std::int64_t b = row / (nh * lq), h = row / lq % nh, i = row % lq;
    // attention_band's range (row i sees local keys i + band_lo .. i + band_hi, clamped).
    const std::int64_t lo = imax(0, i + p.band_lo), hi = imin(lk - 1, i + p.band_hi);
    if (lo > hi) continue;
    const double f = log_base > 0 ? log(static_cast<double>(hi - lo + 1)) / log_base : 1.0;
    const double c = p.scale * f;
    auto score = [&](std::int64_t j) {
      double s = 0;
      for (std::int64_t e = 0; e < d; ++e) s += static_cast<double>(q.at(b, h, i, e)) * k.at(b, h, j, e);
      return s * c;
    };
    auto dprob = [&](std::int64_t j) {
      double s = 0;
      for (std::int64_t e = 0; e < dvn; ++e) s += static_cast<double>(dout.at(b, h, i, e)) * v.at(b, h, j, e);
      return s;
    };
    double mx = -INFINITY, sum = 0, dot = 0;
    for (std::int64_t j = lo; j <= hi; ++j) mx = fmax(mx, score(j));
    for (std::int64_t j = lo; j <= hi; ++j) sum += exp(score(j) - mx);
    for (std::int64_t j = lo; j <= hi; ++j) dot += exp(score(j) - mx) / sum * dprob(j);
    for (std::int64_t j = lo; j <= hi; ++j) {
      const double pj = exp(score(j) - mx) / sum;
      const double ds = pj * (dprob(j) - dot) * c;
      for (std::int64_t e = 0; e < dvn; ++e) atomicAdd(&dv.at(b, h, j, e), static_cast<float>(pj * dout.at(b, h, i, e)));
      for (std::int64_t e = 0; e < d; ++e) {
        dq.at(b, h, i, e) += static_cast<float>(ds * k.at(b, h, j, e));
        atomicAdd(&dk.at(b, h, j, e), static_cast<float>(ds * q.at(b, h, i, e)));
      }
    }
  }
}

// The CUDA forward's source index (floor of dst * in / out in float), sent back.
__global__ void upsample_kernel(View dy, View dx, float sh, float sw) {
  const std::int64_t c = dy.size[1], ho = dy.size[2], wo = dy.size[3];
  VINF_GRID_LOOP(i, dy.size[0] * c * ho * wo) {
    const std::int64_t j = i % wo, r = i / wo % ho, ch = i / (wo * ho) % c, n = i / (wo * ho * c);
    const std::int64_t si = imin(static_cast<std::int64_t>(floorf(static_cast<float>(r) * sh)), dx.size[2] - 1);
    const std::int64_t sj = imin(static_cast<std::int64_t>(floorf(static_cast<float>(j) * sw)), dx.size[3] - 1);
    atomicAdd(&dx.at(n, ch, si, sj), dy.at(n, ch, r, j));
  }
}

__global__ void accumulate_kernel(View src, View dst, std::int64_t n) {
  VINF_GRID_LOOP(i, n) { atomicAdd(dst.data + dst.offset(i), src.data[src.offset(i)]); }
}

// Convolution backward, x (N, Cin, H, W), w (Cout, Cin, kh, kw) contiguous, dy (N, Cout, Ho, Wo).
struct ConvShape {
  std::int64_t cin, h, w, cout, kh, kw, ho, wo;
  int stride, ph, pw;
};

__global__ void conv_dx_kernel(View w, View dy, View dx, ConvShape s) {
  VINF_GRID_LOOP(idx, dx.size[0] * s.cin * s.h * s.w) {
    const std::int64_t xo = idx % s.w, yo = idx / s.w % s.h, i = idx / (s.w * s.h) % s.cin, n = idx / (s.w * s.h * s.cin);
    float acc = 0.f;
    for (std::int64_t a = 0; a < s.kh; ++a) {
      const std::int64_t t = yo + s.ph - a;
      if (t < 0 || t % s.stride != 0 || t / s.stride >= s.ho) continue;
      for (std::int64_t bb = 0; bb < s.kw; ++bb) {
        const std::int64_t u = xo + s.pw - bb;
        if (u < 0 || u % s.stride != 0 || u / s.stride >= s.wo) continue;
        for (std::int64_t o = 0; o < s.cout; ++o) acc += w.at(o, i, a, bb) * dy.at(n, o, t / s.stride, u / s.stride);
      }
    }
    dx.at(n, i, yo, xo) += acc;
  }
}

// A block per weight element (o, i, a, b): the sum over images and output pixels.
__global__ void conv_dw_kernel(View x, View dy, float* dw, ConvShape s, std::int64_t images) {
  __shared__ double shared[32];
  const std::int64_t e = blockIdx.x, bb = e % s.kw, a = e / s.kw % s.kh, i = e / (s.kw * s.kh) % s.cin,
                     o = e / (s.kw * s.kh * s.cin);
  const std::int64_t per = s.ho * s.wo;
  double acc = 0;
  for (std::int64_t k = threadIdx.x; k < images * per; k += blockDim.x) {
    const std::int64_t n = k / per, yo = k % per / s.wo, xo = k % s.wo;
    const std::int64_t yi = yo * s.stride + a - s.ph, xi = xo * s.stride + bb - s.pw;
    if (yi >= 0 && yi < s.h && xi >= 0 && xi < s.w) acc += static_cast<double>(x.at(n, i, yi, xi)) * dy.at(n, o, yo, xo);
  }
  acc = block_reduce<double>(acc, dsum, 0.0, shared);
  if (threadIdx.x == 0) dw[e] += static_cast<float>(acc);
}

__global__ void conv_db_kernel(View dy, float* db, std::int64_t dbs) {
  __shared__ double shared[32];
  const std::int64_t o = blockIdx.x, per = dy.size[2] * dy.size[3];
  double acc = 0;
  for (std::int64_t k = threadIdx.x; k < dy.size[0] * per; k += blockDim.x)
    acc += dy.at(k / per, o, k % per / dy.size[3], k % dy.size[3]);
  acc = block_reduce<double>(acc, dsum, 0.0, shared);
  if (threadIdx.x == 0) db[o * dbs] += static_cast<float>(acc);
}

float* f32(const Tensor* t) { return t ? static_cast<float*>(t->data) : nullptr; }

}  // namespace

void activation(ExecContext& ctx, exec::Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  if (x.numel() == 0) return;
  activation_kernel<<<grid_for(x.numel()), kThreads, 0, stream_of(ctx)>>>(view(x), view(dy), view(dx), act, x.numel());
  VINF_CHECK_LAUNCH();
}

void geglu(ExecContext& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  if (dy.numel() == 0) return;
  geglu_kernel<<<grid_for(dy.numel()), kThreads, 0, stream_of(ctx)>>>(view(x), view(dy), view(dx));
  VINF_CHECK_LAUNCH();
}

void conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h, int pad_w,
          const Tensor* dx, const Tensor* dw, const Tensor* db) {
  const ConvShape s{x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), dy.size(2), dy.size(3),
                    stride,    pad_h,     pad_w};
  cudaStream_t st = stream_of(ctx);
  if (dx && dx->numel() > 0) {
    conv_dx_kernel<<<grid_for(dx->numel()), kThreads, 0, st>>>(view(w), view(dy), view(*dx), s);
    VINF_CHECK_LAUNCH();
  }
  if (dw && dw->numel() > 0) {  // dw contiguous (checked by the caller), one block per element
    conv_dw_kernel<<<static_cast<unsigned>(dw->numel()), kThreads, 0, st>>>(view(x), view(dy), f32(dw), s, x.size(0));
    VINF_CHECK_LAUNCH();
  }
  if (db && db->numel() > 0) {
    conv_db_kernel<<<static_cast<unsigned>(db->numel()), kThreads, 0, st>>>(view(dy), f32(db), db->strides[0]);
    VINF_CHECK_LAUNCH();
  }
}

void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                const exec::GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta) {
  if (x.numel() == 0) return;
  const View dxv = dx ? view(*dx) : view(x);
  group_norm_kernel<<<static_cast<unsigned>(x.size(0) * p.groups), kThreads, 0, stream_of(ctx)>>>(
      view(x), view(dy), f32(&gamma), gamma.strides[0], f32(&beta), beta.strides[0], p.groups, p.eps, p.act, dxv,
      dx != nullptr, f32(dgamma), dgamma ? dgamma->strides[0] : 0, f32(dbeta), dbeta ? dbeta->strides[0] : 0);
  VINF_CHECK_LAUNCH();
}

void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, const Tensor* dx,
                const Tensor* dgamma, const Tensor* dbeta) {
  if (x.numel() == 0) return;
  const View dxv = dx ? view(*dx) : view(x);
  layer_norm_kernel<<<static_cast<unsigned>(x.size(0)), kThreads, 0, stream_of(ctx)>>>(
      view(x), f32(&gamma), gamma.strides[0], view(dy), eps, dxv, dx != nullptr, f32(dgamma),
      dgamma ? dgamma->strides[0] : 0, f32(dbeta), dbeta ? dbeta->strides[0] : 0);
  VINF_CHECK_LAUNCH();
}

void softmax(ExecContext& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  if (y.numel() == 0) return;
  softmax_kernel<<<static_cast<unsigned>(y.size(0)), kThreads, 0, stream_of(ctx)>>>(view(y), view(dy), view(dx));
  VINF_CHECK_LAUNCH();
}

void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
               const exec::AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const std::int64_t rows = q.size(0) * q.size(1) * q.size(2);
  if (rows == 0 || k.size(2) == 0) return;
  const double log_base = p.token_count_log_base > 0 ? std::log(static_cast<double>(p.token_count_log_base)) : 0;
  attention_kernel<<<grid_for(rows, 128), 128, 0, stream_of(ctx)>>>(view(q), view(k), view(v), view(dout), p, log_base,
                                                                      view(dq), view(dk), view(dv));
  VINF_CHECK_LAUNCH();
}

void upsample_nearest(ExecContext& ctx, const Tensor& dy, const Tensor& dx) {
  if (dy.numel() == 0) return;
  const float sh = static_cast<float>(dx.size(2)) / static_cast<float>(dy.size(2));
  const float sw = static_cast<float>(dx.size(3)) / static_cast<float>(dy.size(3));
  upsample_kernel<<<grid_for(dy.numel()), kThreads, 0, stream_of(ctx)>>>(view(dy), view(dx), sh, sw);
  VINF_CHECK_LAUNCH();
}

void accumulate(ExecContext& ctx, const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  accumulate_kernel<<<grid_for(src.numel()), kThreads, 0, stream_of(ctx)>>>(view(src), view(dst), src.numel());
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda::grad
