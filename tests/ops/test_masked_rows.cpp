// Softmax and attention over rows with -inf scores (what a -inf bias or mask makes): a row that is
// all -inf gives zeros, not NaN; a row whose first scores are -inf and later ones finite gives the
// softmax of the finite ones. Both CPU implementations here, CUDA in f32, f16 and bf16 when a GPU
// is visible, all against references computed below in double.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../support.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/softmax.hpp"

using namespace vinf;
using test::download;
using test::HostTensor;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs fn(rt, f32) on the reference and the fast CPU path.
template <class Fn>
void for_each_cpu_impl(Fn fn) {
  for (CpuImpl impl : {CpuImpl::reference, CpuImpl::fast}) {
    CAPTURE(std::string(impl == CpuImpl::reference ? "CPU reference" : "CPU fast"));
    Runtime rt(Device::cpu(), impl);
    fn(rt, DType::f32);
  }
}

// Runs fn(rt, dtype) on CUDA in each dtype; skips with a message without a GPU.
template <class Fn>
void for_each_cuda_dtype(const char* what, Fn fn) {
  if (!test::gpu_or_skip(what)) return;
  Runtime gpu(Device::cuda(0));
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(std::string(dtype_name(dt)));
    fn(gpu, dt);
  }
}

// Largest |error| allowed against a double reference of magnitude <= ~3, by storage dtype: the
// result is computed in f32 and rounded once to the dtype (f16 2^-11, bf16 2^-8 relative).
double masked_tolerance(DType dt) { return dt == DType::f32 ? 1e-5 : dt == DType::f16 ? 4e-3 : 3e-2; }

// `host` on rt's device in `dtype`, with host's values replaced by what the dtype kept, so the
// reference sees exactly the inputs the backend sees.
OwnedTensor upload(Runtime& rt, HostTensor& host, DType dtype) {
  OwnedTensor t = rt.arena().empty(dtype, host.t.shape);
  ops::copy(rt.ctx(), host, t);
  ops::copy(rt.ctx(), t, host);
  return t;
}

// Softmax of a row in double; all -inf gives zeros.
std::vector<double> softmax_ref(const std::vector<float>& row) {
  double mx = -INFINITY;
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(row.size(), 0.0);
  if (mx == -INFINITY) return p;
  double sum = 0;
  for (std::size_t j = 0; j < row.size(); ++j) sum += p[j] = std::exp(row[j] - mx);
  for (double& v : p) v /= sum;
  return p;
}

// Every value finite and within `tol` of the reference.
void check_close(const std::vector<float>& got, const std::vector<double>& ref, double tol) {
  std::size_t nonfinite = 0;
  double max_err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++nonfinite;
    else max_err = std::max(max_err, std::fabs(got[i] - ref[i]));
  }
  CHECK(nonfinite == 0);
  CHECK(max_err <= tol);
}

void check_softmax(Runtime& rt, DType dt) {
  const std::int64_t M = 5, D = 9;
  // Values exact in bf16 and f16, so every dtype sees the same input.
  HostTensor x({M, D}, {
      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,  // fully masked
      -kInf, -kInf, -kInf, 0.5f, -1.f, 2.f, 0.25f, -kInf, 1.5f,       // first scores masked
      -kInf, 1.f, -kInf, 3.f, -kInf, -2.f, -kInf, 0.f, -kInf,         // masked in between
      0.5f, -0.75f, 1.25f, 2.f, -3.f, 0.f, 1.f, -1.5f, 0.125f,        // nothing masked
      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, 40.f,   // one finite score
  });
  OwnedTensor xd = upload(rt, x, dt), yd = rt.arena().empty(dt, {M, D});
  ops::softmax(rt.ctx(), xd, yd);
  const std::vector<float> y = download(rt, yd);
  for (std::int64_t m = 0; m < M; ++m) {
    CAPTURE(m);
    const std::vector<double> ref =
        softmax_ref(std::vector<float>(x.data.begin() + m * D, x.data.begin() + (m + 1) * D));
    const std::vector<float> got(y.begin() + m * D, y.begin() + (m + 1) * D);
    check_close(got, ref, masked_tolerance(dt));
  }
}

// Attention of one (batch, head) pair in double: local keys in the band with local_bias, every
// global key with global_bias; a row whose visible scores are all -inf (or that sees no key) is 0.
std::vector<double> attention_ref(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor* kg,
                                  const HostTensor* vg, const ops::AttentionParams& p) {
  const std::int64_t B = q.t.size(0), H = q.t.size(1), Lq = q.t.size(2), D = q.t.size(3);
  const std::int64_t Lk = k.t.size(2), Dv = v.t.size(3), G = kg ? kg->t.size(2) : 0;
  std::vector<double> out(static_cast<std::size_t>(B * H * Lq * Dv), 0.0);
  auto at = [](const HostTensor& t, std::int64_t bh, std::int64_t row, std::int64_t c) {
    return static_cast<double>(t.data[static_cast<std::size_t>((bh * t.t.size(2) + row) * t.t.size(3) + c)]);
  };
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < Lq; ++i) {
      std::int64_t lo, hi;
      ops::attention_band(p, i, Lk, lo, hi);
      std::vector<float> scores;
      std::vector<const HostTensor*> vals;
      std::vector<std::int64_t> rows;
      auto add = [&](const HostTensor& keys, const HostTensor& values, std::int64_t j, float bias) {
        double s = 0;
        for (std::int64_t c = 0; c < D; ++c) s += at(q, bh, i, c) * at(keys, bh, j, c);
        scores.push_back(static_cast<float>(s * p.scale + bias));
        vals.push_back(&values);
        rows.push_back(j);
      };
      for (std::int64_t j = lo; j <= hi; ++j) add(k, v, j, p.local_bias);
      for (std::int64_t j = 0; j < G; ++j) add(*kg, *vg, j, p.global_bias);
      const std::vector<double> w = softmax_ref(scores);
      for (std::size_t n = 0; n < w.size(); ++n)
        for (std::int64_t c = 0; c < Dv; ++c)
          out[static_cast<std::size_t>((bh * Lq + i) * Dv + c)] += w[n] * at(*vals[n], bh, rows[n], c);
    }
  return out;
}

HostTensor random_host(Runtime& cpu, const Shape& s, std::uint64_t seed) {
  HostTensor t(s);
  ops::normal(cpu.ctx(), t, seed, 0, 0);
  return t;
}

void check_attention(Runtime& rt, DType dt) {
  Runtime cpu(Device::cpu());
  const std::int64_t B = 1, H = 2, Lq = 7, Lk = 9, G = 3, D = 16, Dv = 8;
  HostTensor q = random_host(cpu, {B, H, Lq, D}, 1), k = random_host(cpu, {B, H, Lk, D}, 2),
             v = random_host(cpu, {B, H, Lk, Dv}, 3), kg = random_host(cpu, {B, H, G, D}, 4),
             vg = random_host(cpu, {B, H, G, Dv}, 5);
  OwnedTensor qd = upload(rt, q, dt), kd = upload(rt, k, dt), vd = upload(rt, v, dt), kgd = upload(rt, kg, dt),
              vgd = upload(rt, vg, dt);
  struct Case {
    const char* name;
    ops::AttentionParams p;
    bool global;
  };
  auto params = [](float local, float global, std::int64_t lo, std::int64_t hi) {
    ops::AttentionParams p;
    p.scale = 0.25f;
    p.local_bias = local;
    p.global_bias = global;
    p.band_lo = lo;
    p.band_hi = hi;
    return p;
  };
  const std::int64_t U = ops::AttentionParams::kUnbounded;
  const Case cases[] = {
      {"every key masked, no global keys", params(-kInf, 0.f, -U, U), false},
      {"every local and global key masked", params(-kInf, -kInf, -2, 1), true},
      {"local keys (streamed first) masked, global keys finite", params(-kInf, 0.5f, -U, U), true},
      {"local keys masked in a band, global keys finite", params(-kInf, -0.25f, -1, 2), true},
      {"local keys finite, global keys (streamed last) masked", params(0.75f, -kInf, -2, 3), true},
      {"nothing masked", params(0.f, 1.f, -3, 0), true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    OwnedTensor out = rt.arena().empty(dt, {B, H, Lq, Dv});
    ops::attention(rt.ctx(), qd, kd, vd, c.global ? &kgd.view() : nullptr, c.global ? &vgd.view() : nullptr, out, c.p);
    const std::vector<float> got = download(rt, out);
    const std::vector<double> ref = attention_ref(q, k, v, c.global ? &kg : nullptr, c.global ? &vg : nullptr, c.p);
    check_close(got, ref, masked_tolerance(dt));
  }
}

}  // namespace

TEST_CASE("softmax of masked rows: all -inf gives zeros, leading -inf gives the softmax of the rest") {
  for_each_cpu_impl(check_softmax);
}

TEST_CASE("CUDA softmax of masked rows (f32, f16, bf16): all -inf gives zeros, leading -inf the rest's softmax") {
  for_each_cuda_dtype("CUDA softmax of masked rows", check_softmax);
}

TEST_CASE("attention with -inf biases: fully masked rows give zeros, masked first keys do not poison the row") {
  for_each_cpu_impl(check_attention);
}

TEST_CASE("CUDA attention with -inf biases (f32, f16, bf16): fully masked rows give zeros, masked first keys do not poison the row") {
  for_each_cuda_dtype("CUDA attention with -inf biases", check_attention);
}
