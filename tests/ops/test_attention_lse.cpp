// attention()'s log-sum-exp output (what ring attention merges partial results with): each row's
// log sum_j exp(s_ij) over the keys it sees, local and global, with the scale, the token-count
// factor and the biases in the scores; -inf for a row that sees none. Against the definition in
// double, on both CPU implementations (head sizes for each of the fast kernel's paths) and on CUDA
// when a GPU is visible. The outputs are the same with and without it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../support.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

using namespace vinf;

namespace {

struct Case {
  const char* name;
  std::int64_t Lq, Lk, G, d;
  ops::AttentionParams p;
};

std::vector<Case> cases() {
  ops::AttentionParams full;
  full.scale = 0.3f;
  ops::AttentionParams banded = full;
  banded.band_lo = -3;
  banded.band_hi = 2;
  banded.local_bias = 0.7f;
  banded.global_bias = -1.5f;
  banded.token_count_log_base = 16.f;
  ops::AttentionParams empty_rows = full;  // rows 9.. see no local key, and there are no global ones
  empty_rows.band_lo = 2;
  empty_rows.band_hi = 4;
  return {{"full d16", 13, 19, 0, 16, full},   {"full d8", 13, 19, 0, 8, full},
          {"banded global d16", 150, 170, 4, 16, banded}, {"banded global d5", 21, 30, 3, 5, banded},
          {"empty rows d16", 12, 10, 0, 16, empty_rows}};
}

std::vector<float> host_of(Runtime& rt, const Tensor& t) {
  std::vector<float> h(static_cast<std::size_t>(t.numel()));
  OwnedTensor f = rt.arena().empty(DType::f32, t.shape);
  ops::copy(rt.ctx(), t, f);
  ops::copy(rt.ctx(), f, Tensor::wrap(h.data(), DType::f32, Device::cpu(), t.shape));
  rt.synchronize();
  return h;
}

void check_lse(Runtime& rt, DType dt, double tolerance) {
  const std::int64_t B = 2, H = 2;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    OwnedTensor q = rt.arena().empty(dt, {B, H, c.Lq, c.d}), k = rt.arena().empty(dt, {B, H, c.Lk, c.d});
    OwnedTensor v = rt.arena().empty(dt, k.shape), out = rt.arena().empty(dt, {B, H, c.Lq, c.d});
    OwnedTensor out2 = rt.arena().empty(dt, out.shape), lse = rt.arena().empty(DType::f32, {B, H, c.Lq});
    OwnedTensor kg = rt.arena().empty(dt, {B, H, std::max<std::int64_t>(c.G, 1), c.d}), vg = rt.arena().empty(dt, kg.shape);
    for (auto [t, seed] : {std::pair{&q, 1}, {&k, 2}, {&v, 3}, {&kg, 4}, {&vg, 5}})
      ops::normal(rt.ctx(), *t, static_cast<std::uint64_t>(seed), 0, 0);
    const Tensor kgv = kg.view(), vgv = vg.view(), lsev = lse.view();
    const Tensor* gk = c.G > 0 ? &kgv : nullptr;
    const Tensor* gv = c.G > 0 ? &vgv : nullptr;
    ops::attention(rt.ctx(), q, k, v, gk, gv, out, c.p, &lsev);
    ops::attention(rt.ctx(), q, k, v, gk, gv, out2, c.p);
    const std::vector<float> hq = host_of(rt, q), hk = host_of(rt, k), hkg = host_of(rt, kg), got = host_of(rt, lse);
    CHECK(host_of(rt, out) == host_of(rt, out2));
    double worst = 0;
    int empty = 0;
    for (std::int64_t bh = 0; bh < B * H; ++bh)
      for (std::int64_t i = 0; i < c.Lq; ++i) {
        std::int64_t lo = 0, hi = 0;
        ops::attention_band(c.p, i, c.Lk, lo, hi);
        const std::int64_t visible = std::max<std::int64_t>(0, hi - lo + 1) + c.G;
        const double factor = c.p.scale * (c.p.token_count_log_base > 0 && visible > 0
                                                ? std::log(static_cast<double>(visible)) / std::log(16.0)
                                                : 1.0);
        std::vector<double> s;
        auto dot = [&](const std::vector<float>& keys, std::int64_t n, std::int64_t j) {
          double acc = 0;
          for (std::int64_t e = 0; e < c.d; ++e)
            acc += static_cast<double>(hq[static_cast<std::size_t>((bh * c.Lq + i) * c.d + e)]) *
                   keys[static_cast<std::size_t>((bh * n + j) * c.d + e)];
          return acc;
        };
        for (std::int64_t j = lo; j <= hi; ++j) s.push_back(dot(hk, c.Lk, j) * factor + c.p.local_bias);
        for (std::int64_t j = 0; j < c.G; ++j) s.push_back(dot(hkg, kg.size(2), j) * factor + c.p.global_bias);
        const float g = got[static_cast<std::size_t>(bh * c.Lq + i)];
        if (s.empty()) {
          CHECK(g == -std::numeric_limits<float>::infinity());
          ++empty;
          continue;
        }
        double top = -1e300, sum = 0;
        for (double x : s) top = std::max(top, x);
        for (double x : s) sum += std::exp(x - top);
        worst = std::max(worst, std::fabs(g - (top + std::log(sum))));
      }
    INFO("max |lse - definition| " << worst);
    CHECK(worst <= tolerance);
    if (std::string(c.name).rfind("empty", 0) == 0) CHECK(empty > 0);
  }
}

}  // namespace

TEST_CASE("attention's log-sum-exp: each row's over the keys it sees (CPU reference and fast)") {
  for (CpuImpl impl : {CpuImpl::reference, CpuImpl::fast}) {
    CAPTURE(std::string(impl == CpuImpl::reference ? "reference" : "fast"));
    Runtime rt(Device::cpu(), impl);
    check_lse(rt, DType::f32, 2e-5);
  }
}

TEST_CASE("CUDA attention's log-sum-exp (f32, bf16): each row's over the keys it sees") {
  if (!test::gpu_or_skip("CUDA attention's log-sum-exp")) return;
  Runtime gpu(Device::cuda(0));
  // The scores of bf16 operands are computed from the rounded operands the test reads back.
  check_lse(gpu, DType::f32, 2e-5);
  check_lse(gpu, DType::bf16, 2e-3);
}
