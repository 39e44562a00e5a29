// CUDA numerics that the op table's small random cases do not reach (all skip without a GPU):
// attention logits beyond f16's range and finer than bf16's spacing, TF32 only when allowed, and
// tensors of more than 2^31 elements.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../support.hpp"
#include "model/temporal.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;
using test::download;
using test::HostTensor;

namespace {

OwnedTensor upload(Runtime& rt, const HostTensor& host, DType dtype) {
  OwnedTensor t = rt.arena().empty(dtype, host.t.shape);
  ops::copy(rt.ctx(), host, t);
  return t;
}

// Relative RMS difference ||a - b|| / ||b||.
double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

// Restores the process-wide TF32 setting however the test ends.
struct Tf32Setting {
  bool before = allow_tf32();
  ~Tf32Setting() { set_allow_tf32(before); }
};

}  // namespace

TEST_CASE("CUDA attention logits beyond f16's range (~1e5): f32 scores, finite results matching f32, both paths") {
  if (!test::gpu_or_skip("CUDA attention with large logits")) return;
  // Logits 0.25 * (512 * 800 + s) = 102400 + s / 4 with s = sum of small products: above f16's
  // 65504 (scores stored in f16 overflow to inf and the softmax gives NaN) and with differences
  // of order 1, far below bf16's spacing of 512 there (scores stored in bf16 make every key
  // equal). Every input is a multiple of 1/32 of at most 6 significant bits, exact in f16 and
  // bf16, and every partial sum is exact in f32, so all dtypes see the same problem and the f32
  // scores are exact: only the rounding of probabilities and outputs to the storage dtype differs.
  const std::int64_t R = 2, H = 2, L = 72, D = 32, Dv = 16;  // L * L >= 4096: the GEMM path's size
  Runtime cpu(Device::cpu()), gpu(Device::cuda(0));
  HostTensor q({R, L, H * D}), k({R, L, H * D}), v({R, L, H * Dv});
  ops::normal(cpu.ctx(), q, 1, 0, 0);
  ops::normal(cpu.ctx(), k, 2, 0, 0);
  ops::normal(cpu.ctx(), v, 3, 0, 0);
  auto grid = [](float x, float step, float limit) { return std::clamp(std::round(x / step) * step, -limit, limit); };
  for (std::size_t i = 0; i < q.data.size(); ++i) {
    const bool first = i % D == 0;  // channel 0 of each head carries the large common part
    q.data[i] = first ? 512.f : grid(q.data[i], 0.5f, 1.f);
    k.data[i] = first ? 800.f : grid(k.data[i], 1.f / 16, 4.f);
  }
  for (float& x : v.data) x = grid(x, 1.f / 16, 4.f);
  ops::AttentionParams p;
  p.scale = 0.25f;

  // Reference in double.
  std::vector<double> ref(static_cast<std::size_t>(R * L * H * Dv));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<double> s(static_cast<std::size_t>(L));
        double mx = -INFINITY;
        for (std::int64_t j = 0; j < L; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c)
            dot += static_cast<double>(q.data[static_cast<std::size_t>((r * L + i) * H * D + h * D + c)]) *
                   k.data[static_cast<std::size_t>((r * L + j) * H * D + h * D + c)];
          s[static_cast<std::size_t>(j)] = dot * p.scale;
          mx = std::max(mx, s[static_cast<std::size_t>(j)]);
        }
        REQUIRE(mx > 65504.0);
        double sum = 0;
        for (double& x : s) sum += x = std::exp(x - mx);
        for (std::int64_t c = 0; c < Dv; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < L; ++j)
            o += s[static_cast<std::size_t>(j)] * v.data[static_cast<std::size_t>((r * L + j) * H * Dv + h * Dv + c)];
          ref[static_cast<std::size_t>((r * L + i) * H * Dv + h * Dv + c)] = o / sum;
        }
      }

  // The rounding of probabilities (GEMM path) and outputs to the dtype, on values |v| <= 4.
  auto tolerance = [](DType dt) { return dt == DType::f32 ? 1e-5 : dt == DType::f16 ? 1e-2 : 4e-2; };
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (model::AttentionPath path : {model::AttentionPath::gemm, model::AttentionPath::kernel}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(path == model::AttentionPath::gemm ? "GEMM path" : "kernel");
      OwnedTensor qd = upload(gpu, q, dt), kd = upload(gpu, k, dt), vd = upload(gpu, v, dt);
      OwnedTensor od = gpu.arena().empty(dt, {R, L, H * Dv});
      model::attend(gpu.ctx(), model::split_heads(qd, static_cast<int>(H)), model::split_heads(kd, static_cast<int>(H)),
                    model::split_heads(vd, static_cast<int>(H)), model::split_heads(od, static_cast<int>(H)), p, path);
      const std::vector<float> got = download(gpu, od);
      double max_err = 0;
      bool finite = true;
      for (std::size_t i = 0; i < got.size(); ++i) {
        finite = finite && std::isfinite(got[i]);
        max_err = std::max(max_err, std::fabs(got[i] - ref[i]));
      }
      MESSAGE(std::string(dtype_name(dt)) << std::string(path == model::AttentionPath::gemm ? " GEMM path" : " kernel") << ": max |err| "
                             << max_err);
      CHECK(finite);
      CHECK(max_err <= tolerance(dt));
    }
  }
}

TEST_CASE("CUDA TF32 (--tf32): f32 GEMMs use it only when allowed, within 1e-2, convolutions stay within 1e-2") {
  if (!test::gpu_or_skip("CUDA TF32")) return;
  Tf32Setting restore;
  Runtime cpu(Device::cpu(), CpuImpl::reference), gpu(Device::cuda(0));
  // GEMM: 1 x (192 x 512) @ (512 x 160), N(0, 1) entries.
  HostTensor a({1, 192, 512}), b({1, 512, 160}), ref({1, 192, 160});
  ops::normal(cpu.ctx(), a, 21, 0, 0);
  ops::normal(cpu.ctx(), b, 22, 0, 0);
  ops::bmm(cpu.ctx(), a, b, ref);  // the naive reference accumulates in double
  OwnedTensor ad = upload(gpu, a, DType::f32), bd = upload(gpu, b, DType::f32), cd = gpu.arena().empty(DType::f32, ref.t.shape);
  auto gemm = [&](bool tf32) {
    set_allow_tf32(tf32);
    ops::bmm(gpu.ctx(), ad, bd, cd);
    return download(gpu, cd);
  };
  const double off = relative_rms(gemm(false), ref.data);
  const double on = relative_rms(gemm(true), ref.data);
  const double off_again = relative_rms(gemm(false), ref.data);
  MESSAGE("GEMM relative RMS error against double: TF32 off " << off << ", on " << on);
  // Full f32 over 512 products: ~1e-7. TF32 keeps 10 mantissa bits of each input: ~5e-4.
  CHECK(off < 1e-5);
  CHECK(off_again < 1e-5);
  CHECK(on > 2e-5);
  CHECK(on < 1e-2);

  // Convolution: 3x3, 64 -> 64 channels. cuDNN may or may not pick a TF32 kernel for a shape, so
  // only the bound is checked with TF32 allowed.
  HostTensor x({2, 64, 24, 24}), w({64, 64, 3, 3}), y({2, 64, 24, 24});
  ops::normal(cpu.ctx(), x, 23, 0, 0);
  ops::normal(cpu.ctx(), w, 24, 0, 0);
  ops::conv2d(cpu.ctx(), x, w, nullptr, y, {1, 1});
  OwnedTensor xd = upload(gpu, x, DType::f32), wd = upload(gpu, w, DType::f32), yd = gpu.arena().empty(DType::f32, y.t.shape);
  auto conv = [&](bool tf32) {
    set_allow_tf32(tf32);
    ops::conv2d(gpu.ctx(), xd, wd, nullptr, yd, {1, 1});
    return download(gpu, yd);
  };
  const double conv_off = relative_rms(conv(false), y.data), conv_on = relative_rms(conv(true), y.data);
  MESSAGE("conv2d relative RMS error against double: TF32 off " << conv_off << ", on " << conv_on);
  CHECK(conv_off < 1e-5);
  CHECK(conv_on < 1e-2);
}

TEST_CASE("CUDA ops over more than 2^31 elements: pointwise kernels and conv2d reach every element") {
  if (!test::gpu_or_skip("CUDA ops over more than 2^31 elements")) return;
  const std::int64_t big = (std::int64_t{1} << 31) + 777;
  {
    // Pointwise: grid-stride loops over 64-bit indices (f16, 4.3 GB per tensor).
    Runtime gpu(Device::cuda(0));
    OwnedTensor a = gpu.arena().empty(DType::f16, {big}), b = gpu.arena().empty(DType::f16, {big});
    ops::fill(gpu.ctx(), a, 1.5);
    ops::fill(gpu.ctx(), b, -1.0);
    ops::axpby(gpu.ctx(), 2.f, a, 0.5f, b, b);
    for (std::int64_t start : {std::int64_t{0}, (std::int64_t{1} << 31) - 500, big - 1000}) {
      CAPTURE(start);
      const std::vector<float> got = download(gpu, b.slice(0, start, 1000));
      for (float g : got) REQUIRE(g == 2.5f);
    }
  }
  {
    // conv2d: x and y of 2064 x 4 x 512 x 512 f16 elements each (> 2^31), more than one cuDNN
    // descriptor can count; samples at both ends and around the 2^31 boundary against the CPU.
    const std::int64_t N = 2064, C = 4, S = 512;
    Runtime cpu(Device::cpu()), gpu(Device::cuda(0));
    OwnedTensor x = gpu.arena().empty(DType::f16, {N, C, S, S}), y = gpu.arena().empty(DType::f16, {N, C, S, S});
    REQUIRE(x.numel() > 0x7fffffff);
    ops::normal(gpu.ctx(), x, 31, 0, 0);
    HostTensor w({C, C, 3, 3}), bias({C});
    ops::normal(cpu.ctx(), w, 32, 0, 0);
    ops::normal(cpu.ctx(), bias, 33, 0, 0);
    OwnedTensor wd = gpu.arena().empty(DType::f16, w.t.shape), bd = gpu.arena().empty(DType::f16, bias.t.shape);
    ops::copy(gpu.ctx(), w, wd);
    ops::copy(gpu.ctx(), bias, bd);
    ops::copy(gpu.ctx(), wd, w);  // the CPU sees the f16-rounded parameters
    ops::copy(gpu.ctx(), bd, bias);
    ops::conv2d(gpu.ctx(), x, wd, &bd.view(), y, {1, 1});
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{2047}, std::int64_t{2048}, N - 1}) {
      CAPTURE(n);
      HostTensor xn({1, C, S, S}), expect({1, C, S, S});
      ops::copy(gpu.ctx(), x.slice(0, n, 1), xn);
      ops::conv2d(cpu.ctx(), xn, w, &bias.t, expect, {1, 1});
      const std::vector<float> got = download(gpu, y.slice(0, n, 1));
      double max_err = 0;
      for (std::size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(double(got[i]) - expect.data[i]));
      // Outputs of 37 N(0, 1) x N(0, 1) terms reach ~30; f16 keeps 11 bits (spacing 1/64 there).
      CHECK(max_err < 0.05);
    }
  }
}
