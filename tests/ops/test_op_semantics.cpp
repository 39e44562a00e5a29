// The naive references themselves, checked against hand-computed values and against compositions
// of other ops, so that "fast equals reference" means "fast is right".
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "cpu/vec.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/random.hpp"
#include "ops/resample.hpp"
#include "ops/softmax.hpp"

using namespace vinf;
using test::HostTensor;

namespace {

// Both CPU implementations run every check.
template <class Fn>
void for_each_cpu_context(Fn fn) {
  for (CpuImpl impl : {CpuImpl::reference, CpuImpl::fast}) {
    CAPTURE(impl == CpuImpl::reference ? "reference" : "fast");
    Runtime rt(Device::cpu(), impl);
    fn(rt.ctx());
  }
}

HostTensor random(ExecContext& ctx, const Shape& s, std::uint64_t seed, float scale = 1.f) {
  HostTensor t(s);
  ops::normal(ctx, t, seed, 0, 0);
  for (float& v : t.data) v *= scale;
  return t;
}

}  // namespace

TEST_CASE("conv2d on a hand-computed example (stride 2, padding 1, bias)") {
  for_each_cpu_context([](ExecContext& ctx) {
    // x = 1..16 on a 4x4 grid, kernel [[1,0,-1],[2,0,-2],[1,0,-1]] (Sobel-x), bias 0.5.
    std::vector<float> xv(16);
    for (int i = 0; i < 16; ++i) xv[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
    HostTensor x({1, 1, 4, 4}, xv), w({1, 1, 3, 3}, {1, 0, -1, 2, 0, -2, 1, 0, -1}), b({1}, {0.5f}), y({1, 1, 2, 2});
    ops::conv2d(ctx, x, w, &b.t, y, {2, 1});
    // Output (0,0) centred on x(0,0): zero padding left, columns x(.,1) = 2, 6 -> -(2*2 + 6) = -10.
    // (0,1) centred on x(0,2): 2*(2 - 4) + (6 - 8) = -6.  (1,0) centred on x(2,0): -(6 + 2*10 + 14) = -40.
    // (1,1) centred on x(2,2): (6-8) + 2*(10-12) + (14-16) = -8.
    CHECK(y.data == std::vector<float>{-9.5f, -5.5f, -39.5f, -7.5f});
  });
}

TEST_CASE("temporal conv equals a 3x1x1 Conv3d written out by hand") {
  for_each_cpu_context([](ExecContext& ctx) {
    // One channel, one pixel, frames 1..5, kernel (1, 2, 3), bias 1, padding 1:
    // y[t] = 1 + x[t-1] + 2 x[t] + 3 x[t+1] with zeros outside.
    HostTensor x({1, 1, 5, 1}, {1, 2, 3, 4, 5}), w({1, 1, 3}, {1, 2, 3}), b({1}, {1}), y({1, 1, 5, 1});
    ops::temporal_conv(ctx, x, w, &b.t, y, 1);
    CHECK(y.data == std::vector<float>{9, 15, 21, 27, 15});
  });
}

TEST_CASE("group norm output has zero mean and unit variance per (sample, group), affine applied after") {
  for_each_cpu_context([](ExecContext& ctx) {
    HostTensor x = random(ctx, {3, 8, 2, 10}, 1, 3.f);
    for (float& v : x.data) v += 5.f;
    HostTensor g({8}, std::vector<float>(8, 1.f)), b({8}, std::vector<float>(8, 0.f)), y({3, 8, 2, 10});
    ops::group_norm(ctx, x, g, b, y, {2, 0.f});
    for (int n = 0; n < 3; ++n)
      for (int grp = 0; grp < 2; ++grp) {
        double m = 0, v = 0;
        for (int c = grp * 4; c < grp * 4 + 4; ++c)
          for (int i = 0; i < 20; ++i) m += y.data[static_cast<std::size_t>((n * 8 + c) * 20 + i)];
        m /= 80;
        for (int c = grp * 4; c < grp * 4 + 4; ++c)
          for (int i = 0; i < 20; ++i) {
            const double d = y.data[static_cast<std::size_t>((n * 8 + c) * 20 + i)] - m;
            v += d * d;
          }
        v /= 80;
        CHECK(std::fabs(m) < 1e-5);
        CHECK(v == doctest::Approx(1.0).epsilon(1e-5));
      }
  });
}

TEST_CASE("layer norm, softmax and activations at known points") {
  for_each_cpu_context([](ExecContext& ctx) {
    HostTensor x({1, 4}, {1, 2, 3, 4}), g({4}, {1, 1, 1, 2}), b({4}, {0, 0, 0, 1}), y({1, 4});
    ops::layer_norm(ctx, x, g, b, y, 0.f);
    const float s = 1.f / std::sqrt(1.25f);
    CHECK(y.data[0] == doctest::Approx(-1.5f * s));
    CHECK(y.data[3] == doctest::Approx(2 * 1.5f * s + 1));

    HostTensor z({1, 3}, {0, std::log(2.f), std::log(5.f)}), p({1, 3});
    ops::softmax(ctx, z, p);
    CHECK(p.data[0] == doctest::Approx(0.125));
    CHECK(p.data[2] == doctest::Approx(0.625));

    HostTensor a({3}, {-1, 0, 2}), o({3});
    ops::activation(ctx, ops::Activation::gelu, a, o);
    CHECK(o.data[0] == doctest::Approx(-0.15865525));
    CHECK(o.data[2] == doctest::Approx(1.95449974));
    ops::activation(ctx, ops::Activation::silu, a, o);
    CHECK(o.data[0] == doctest::Approx(-0.26894142));
    ops::activation(ctx, ops::Activation::quick_gelu, a, o);
    CHECK(o.data[2] == doctest::Approx(2.0 / (1.0 + std::exp(-3.404))));
    HostTensor gg({1, 4}, {3, -1, 2, 0}), go({1, 2});
    ops::geglu(ctx, gg, go);  // value half first, gate second
    CHECK(go.data[0] == doctest::Approx(3 * 1.95449974));
    CHECK(go.data[1] == doctest::Approx(0.0));
  });
}

// f32 to bf16 on the CPU runs on VCVTNE2PS2BF16 where the CPU has it; the instruction reads
// denormals as zero, so blocks holding one are converted in software: every value, special ones
// included, must come out as the generic rounding's bits, in one run and in rows of a strided view.
TEST_CASE("f32 to bf16 copies round to nearest even bit for bit, denormals and NaN included") {
  std::vector<float> v;
  for (int i = 0; i < 150; ++i) v.push_back(std::ldexp(static_cast<float>((i * 7919) % 1000) - 500.f, (i % 40) - 20));
  // Denormals that bf16 keeps (2^-130, -1.5 * 2^-127) and ones it rounds to zero, in a block of 32
  // and in the tail; overflow, infinities, NaN and ties.
  const float specials[] = {0.f, -0.f, std::ldexp(1.f, -130), -std::ldexp(1.5f, -127),
                            std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.f + std::ldexp(1.f, -8),
                            1.f + 3 * std::ldexp(1.f, -8), std::ldexp(1.f, -127), std::numeric_limits<float>::min()};
  const std::size_t at[] = {3, 40, 41, 77, 100, 140, 145, 148, 149, 60, 61, 146, 5};  // blocks and the tail
  for (std::size_t i = 0; i < std::size(specials); ++i) v[at[i]] = specials[i];
  Runtime rt(Device::cpu(), CpuImpl::fast);
  auto check = [&](const Tensor& src, const Tensor& dst, const std::vector<std::uint16_t>& bits) {
    ops::copy(rt.ctx(), src, dst);
    int same = 0, checked = 0;
    for (std::int64_t r = 0; r < src.size(0); ++r)
      for (std::int64_t c = 0; c < src.size(1); ++c) {
        const float x = v[static_cast<std::size_t>(r * src.stride(0) + c)];
        same += bits[static_cast<std::size_t>(r * dst.stride(0) + c)] == f32_to_bf16_bits(x);
        ++checked;
      }
    CHECK(same == checked);
  };
  std::vector<std::uint16_t> one(150), rows(150);
  check(Tensor::wrap(v.data(), DType::f32, Device::cpu(), {1, 150}),
        Tensor::wrap(one.data(), DType::bf16, Device::cpu(), {1, 150}), one);
  // Rows of 37 of a 3 x 50 view (strides 50 and 1) into rows of 37 with stride 50.
  check(Tensor::wrap(v.data(), DType::f32, Device::cpu(), {3, 50}).slice(1, 0, 37),
        Tensor::wrap(rows.data(), DType::bf16, Device::cpu(), {3, 50}).slice(1, 0, 37), rows);
}

// --dtype bf16 on the CPU stores a LayerNorm's output in bf16 when only bf16 products read it: the
// f32 result rounded to nearest even, on both CPU implementations (a row of 37 takes the vector
// body and the scalar tail).
TEST_CASE("layer norm into a bf16 y is the f32 result rounded to bf16") {
  for_each_cpu_context([](ExecContext& ctx) {
    const HostTensor x = random(ctx, {5, 37}, 11, 2.f), g = random(ctx, {37}, 12), b = random(ctx, {37}, 13);
    HostTensor y({5, 37});
    ops::layer_norm(ctx, x, g, b, y, 1e-5f);
    std::vector<std::uint16_t> bits(5 * 37);
    const Tensor yb = Tensor::wrap(bits.data(), DType::bf16, Device::cpu(), {5, 37});
    ops::layer_norm(ctx, x, g, b, yb, 1e-5f);
    int exact = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      const float want = y.data[i], got = bf16_bits_to_f32(bits[i]);
      CHECK(std::abs(got - want) <= std::abs(want) * 0x1p-8f);  // one rounding: half a bf16 ulp, 2^-9
      exact += got == round_to_bf16(want);
    }
    CHECK(exact == static_cast<int>(bits.size()));  // the same f32 row, so the same rounding
  });
}

TEST_CASE("timestep embedding: diffusers' layout and frequencies") {
  for_each_cpu_context([](ExecContext& ctx) {
    std::vector<std::int64_t> tv{0, 900};
    const Tensor t = Tensor::wrap(tv.data(), DType::i64, Device::cpu(), {2});
    HostTensor y({2, 8});
    ops::timestep_embedding(ctx, t, y, {true, 0.f, 10000.f});
    // t = 0: [cos 0 x4 | sin 0 x4]. t = 900, j = 0: frequency 1.
    for (int j = 0; j < 4; ++j) {
      CHECK(y.data[static_cast<std::size_t>(j)] == 1.f);
      CHECK(y.data[static_cast<std::size_t>(4 + j)] == 0.f);
    }
    CHECK(y.data[8] == doctest::Approx(std::cos(900.0)).epsilon(1e-4));
    CHECK(y.data[12] == doctest::Approx(std::sin(900.0)).epsilon(1e-4));
    // j = 1: frequency 10000^(-1/4) = 0.1.
    CHECK(y.data[9] == doctest::Approx(std::cos(90.0)).epsilon(1e-4));
  });
}

TEST_CASE("nearest upsampling copies each pixel into a 2x2 block") {
  for_each_cpu_context([](ExecContext& ctx) {
    HostTensor x({1, 1, 2, 2}, {1, 2, 3, 4}), y({1, 1, 4, 4});
    ops::upsample_nearest(ctx, x, y);
    CHECK(y.data == std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  });
}

TEST_CASE("banded attention equals dense attention with an explicit mask and bias") {
  // Dense composition: scores = q k^T * scale (bmm) + bias, -inf outside the band, softmax, @ v.
  for_each_cpu_context([](ExecContext& ctx) {
    const std::int64_t Lq = 9, Lk = 13, G = 3, D = 8;
    ops::AttentionParams p;
    p.scale = 0.3f;
    p.band_lo = -1;
    p.band_hi = 4;
    p.local_bias = 1.5f;
    p.global_bias = -0.5f;
    p.token_count_log_base = 16.f;
    HostTensor q = random(ctx, {1, 1, Lq, D}, 1), k = random(ctx, {1, 1, Lk, D}, 2), v = random(ctx, {1, 1, Lk, D}, 3);
    HostTensor kg = random(ctx, {1, 1, G, D}, 4), vg = random(ctx, {1, 1, G, D}, 5), out({1, 1, Lq, D});
    ops::attention(ctx, q, k, v, &kg.t, &vg.t, out, p);

    HostTensor keys({1, Lk + G, D}), vals({1, Lk + G, D}), scores({1, Lq, Lk + G}), probs({1, Lq, Lk + G}),
        dense({1, Lq, D});
    const Tensor parts_k[] = {k.t.reshape({1, Lk, D}), kg.t.reshape({1, G, D})};
    const Tensor parts_v[] = {v.t.reshape({1, Lk, D}), vg.t.reshape({1, G, D})};
    ops::concat(ctx, parts_k, 1, keys);
    ops::concat(ctx, parts_v, 1, vals);
    ops::bmm(ctx, q.t.reshape({1, Lq, D}), keys.t.transpose(1, 2), scores, p.scale);
    for (std::int64_t i = 0; i < Lq; ++i) {
      const std::int64_t lo = std::max<std::int64_t>(0, i - 1), hi = std::min<std::int64_t>(Lk - 1, i + 4);
      const float f = std::log(static_cast<float>(hi - lo + 1 + G)) / std::log(16.f);
      for (std::int64_t j = 0; j < Lk + G; ++j) {
        float& s = scores.data[static_cast<std::size_t>(i * (Lk + G) + j)];
        if (j < Lk) s = (j >= lo && j <= hi) ? s * f + p.local_bias : -std::numeric_limits<float>::infinity();
        else s = s * f + p.global_bias;
      }
    }
    ops::softmax(ctx, scores, probs);
    ops::bmm(ctx, probs, vals, dense);
    for (std::size_t i = 0; i < dense.data.size(); ++i) CHECK(out.data[i] == doctest::Approx(dense.data[i]).epsilon(1e-5));
  });
}

TEST_CASE("GroupNorm from externally reduced sums of two parts equals GroupNorm of the whole") {
  // What the distributed temporal GroupNorm relies on: partial sums over frame ranges add up.
  for_each_cpu_context([](ExecContext& ctx) {
    HostTensor x = random(ctx, {2, 8, 6, 5}, 9, 2.f), g = random(ctx, {8}, 10), b = random(ctx, {8}, 11);
    HostTensor whole({2, 8, 6, 5}), split({2, 8, 6, 5});
    ops::group_norm(ctx, x, g, b, whole, {4, 1e-5f, ops::Activation::silu});
    std::vector<double> s0(16), s1(16);
    const Tensor t0 = Tensor::wrap(s0.data(), DType::f64, Device::cpu(), {2, 4, 2});
    const Tensor t1 = Tensor::wrap(s1.data(), DType::f64, Device::cpu(), {2, 4, 2});
    ops::group_norm_sums(ctx, x.t.slice(2, 0, 2), 4, t0);
    ops::group_norm_sums(ctx, x.t.slice(2, 2, 4), 4, t1);
    for (std::size_t i = 0; i < s0.size(); ++i) s0[i] += s1[i];
    ops::group_norm_apply(ctx, x, t0, 2.0 * 6 * 5, g, b, split, {4, 1e-5f, ops::Activation::silu});
    for (std::size_t i = 0; i < whole.data.size(); ++i) CHECK(split.data[i] == doctest::Approx(whole.data[i]).epsilon(1e-6));
  });
}

TEST_CASE("vector exp and erf of the CPU kernels agree with libm") {
  // exp to a few ulp over the range softmax and SiLU use, 0 below -87; erf to 6e-7 absolute. The
  // softmax's exp_nonpositive (one-part log2(e)): a few ulp on [-1, 0], to 4e-6 down to -87.
  double worst_exp = 0, worst_erf = 0, worst_near = 0, worst_far = 0;
  for (float x0 = -100.f; x0 < 88.f; x0 += 0.37f) {
    float xs[cpu::vec::kLanes];
    for (int i = 0; i < cpu::vec::kLanes; ++i) xs[i] = x0 + 0.0231f * static_cast<float>(i);
    float e[cpu::vec::kLanes], f[cpu::vec::kLanes], n[cpu::vec::kLanes];
    cpu::vec::store(e, cpu::vec::exp(cpu::vec::load(xs)));
    cpu::vec::store(f, cpu::vec::erf(cpu::vec::load(xs) * 0.05f));
    cpu::vec::store(n, cpu::vec::exp_nonpositive(cpu::vec::load(xs)));
    for (int i = 0; i < cpu::vec::kLanes; ++i) {
      const double want = std::exp(static_cast<double>(xs[i]));
      if (xs[i] < -87.f) {
        CHECK(e[i] == 0.f);
      } else if (xs[i] <= 88.f) {
        worst_exp = std::max(worst_exp, std::fabs(e[i] - want) / want);
      }
      if (xs[i] < -87.f) {
        CHECK(n[i] == 0.f);
      } else if (xs[i] <= 0.f) {
        double& worst = xs[i] >= -1.f ? worst_near : worst_far;
        worst = std::max(worst, std::fabs(n[i] - want) / want);
      }
      worst_erf = std::max(worst_erf, std::fabs(f[i] - std::erf(0.05 * xs[i])));
    }
  }
  MESSAGE("worst relative exp error " << worst_exp << ", worst erf error " << worst_erf
                                       << ", softmax exp on [-1, 0] " << worst_near << ", below " << worst_far);
  CHECK(worst_exp < 4e-7);
  CHECK(worst_near < 4e-7);
  CHECK(worst_far < 5e-6);
  CHECK(worst_erf < 6e-7);
  float inf_in[cpu::vec::kLanes], out[cpu::vec::kLanes];
  for (float& v : inf_in) v = -std::numeric_limits<float>::infinity();
  cpu::vec::store(out, cpu::vec::exp(cpu::vec::load(inf_in)));
  CHECK(out[0] == 0.f);
  cpu::vec::store(out, cpu::vec::exp_nonpositive(cpu::vec::load(inf_in)));
  CHECK(out[0] == 0.f);
  for (float& v : inf_in) v = std::numeric_limits<float>::quiet_NaN();
  cpu::vec::store(out, cpu::vec::exp_nonpositive(cpu::vec::load(inf_in)));
  CHECK(std::isnan(out[0]));  // a NaN score stays visible
}

namespace {

// The shuffle and reduction helpers, compiled for each x86-64 level the kernels are built for
// (AVX-512 lowers the 16-lane shuffles to one permute, AVX2 to pairs, the baseline to scalar code).
struct ShuffleResults {
  float t[16][16];
  float max, sum, max8, sum8;  // max and sum of 16 lanes, and of the last 8 as one 8-lane vector
};

#define VINF_SHUFFLE_PROBE(NAME, TARGET)                                                   \
  TARGET void NAME(const float (&in)[16][16], ShuffleResults& out) {                      \
    cpu::vec::f32x16 r[16];                                                                \
    for (int i = 0; i < 16; ++i) r[i] = cpu::vec::load(in[i]);                             \
    cpu::vec::transpose16(r);                                                              \
    for (int i = 0; i < 16; ++i) cpu::vec::store(out.t[i], r[i]);                          \
    out.max = cpu::vec::hmax(cpu::vec::load(in[3]));                                       \
    out.sum = cpu::vec::hsum(cpu::vec::load(in[5]));                                       \
    out.max8 = cpu::vec::hmax(cpu::vec::load_as<cpu::vec::f32x8>(in[3] + 8));              \
    out.sum8 = cpu::vec::hsum(cpu::vec::load_as<cpu::vec::f32x8>(in[5] + 8));              \
  }
#if defined(__x86_64__)
// The softmax's exponentials as the AVX-512 variant computes them (VSCALEFPS, masked) and as the
// generic code does, both built for that level.
__attribute__((target("arch=x86-64-v4"))) void softmax_exp_v4(const float* x, float* scaled, float* generic) {
  const cpu::vec::f32x16 v = cpu::vec::load(x);
  cpu::vec::store(scaled, cpu::vec::exp_nonpositive_at<cpu::vec::Level::v4>(v));
  cpu::vec::store(generic, cpu::vec::exp_nonpositive(v));
}
// The rows-in-lanes attention's exponentials in log2 units, masked and not, on 16 and 8 lanes.
__attribute__((target("arch=x86-64-v4"))) void softmax_exp2_v4(const float* t, float* masked, float* plain,
                                                                float* masked8, float* plain8) {
  const cpu::vec::f32x16 v = cpu::vec::load(t);
  cpu::vec::store(masked, cpu::vec::exp2_nonpositive_v4<true>(v));
  cpu::vec::store(plain, cpu::vec::exp2_nonpositive_v4<false>(v));
  const cpu::vec::f32x8 h = cpu::vec::load_as<cpu::vec::f32x8>(t + 8);
  cpu::vec::store_as(masked8, cpu::vec::exp2_nonpositive_v4<true>(h));
  cpu::vec::store_as(plain8, cpu::vec::exp2_nonpositive_v4<false>(h));
}
VINF_SHUFFLE_PROBE(shuffle_v4, __attribute__((target("arch=x86-64-v4"))))
VINF_SHUFFLE_PROBE(shuffle_v3, __attribute__((target("arch=x86-64-v3"))))
#endif
VINF_SHUFFLE_PROBE(shuffle_baseline, )
#undef VINF_SHUFFLE_PROBE

}  // namespace

TEST_CASE("vector transpose and reductions of the CPU kernels, at every x86-64 level the machine has") {
  float in[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) in[i][j] = static_cast<float>(100 * i + j) * (j % 3 == 1 ? -1.f : 1.f) + 0.25f;
  in[3][11] = 1e6f;  // the maximum of row 3, away from lane 0
  double want_sum = 0, want_sum8 = 0;
  for (int j = 0; j < 16; ++j) want_sum += in[5][j];
  for (int j = 8; j < 16; ++j) want_sum8 += in[5][j];
  std::vector<std::pair<const char*, void (*)(const float (&)[16][16], ShuffleResults&)>> probes{
      {"baseline", shuffle_baseline}};
#if defined(__x86_64__)
  // The levels the kernels' variants would run at on this machine (cpu::vec::cpu_level()).
  const cpu::vec::Level level = cpu::vec::cpu_level();
  if (level == cpu::vec::Level::v3 || level == cpu::vec::Level::v4) probes.push_back({"x86-64-v3", shuffle_v3});
  if (level == cpu::vec::Level::v4) probes.push_back({"x86-64-v4", shuffle_v4});
#endif
  for (const auto& [name, probe] : probes) {
    CAPTURE(name);
    ShuffleResults out{};
    probe(in, out);
    int wrong = 0;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) wrong += out.t[i][j] != in[j][i];
    CHECK(wrong == 0);
    CHECK(out.max == 1e6f);
    CHECK(out.sum == doctest::Approx(want_sum).epsilon(1e-7));
    CHECK(out.max8 == 1e6f);
    CHECK(out.sum8 == doctest::Approx(want_sum8).epsilon(1e-7));
  }
  MESSAGE(probes.size() << " x86-64 level(s) checked");
}

TEST_CASE("the AVX-512 softmax exponentials give the generic code's values") {
#if defined(__x86_64__)
  if (cpu::vec::cpu_level() != cpu::vec::Level::v4) {
    MESSAGE("skipped: this CPU has no AVX-512 (x86-64-v4)");
    return;
  }
  int checked = 0, differ = 0;
  for (float x0 = -90.f; x0 <= 0.f; x0 += 0.173f) {
    float x[16], scaled[16], generic[16];
    for (int i = 0; i < 16; ++i) x[i] = std::min(0.f, x0 + 0.0107f * static_cast<float>(i));
    x[15] = x0 < -45.f ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    softmax_exp_v4(x, scaled, generic);
    for (int i = 0; i < 16; ++i, ++checked) {
      const bool same = std::isnan(generic[i]) ? std::isnan(scaled[i]) : scaled[i] == generic[i];
      differ += !same;
    }
  }
  MESSAGE(checked << " exponentials compared");
  CHECK(differ == 0);
#else
  MESSAGE("skipped: not an x86-64 build");
#endif
}

TEST_CASE("the AVX-512 exponentials in log2 units against libm's exp2") {
#if defined(__x86_64__)
  if (cpu::vec::cpu_level() != cpu::vec::Level::v4) {
    MESSAGE("skipped: this CPU has no AVX-512 (x86-64-v4)");
    return;
  }
  double worst = 0;
  int checked = 0, wrong = 0;
  for (float t0 = -130.f; t0 <= 0.f; t0 += 0.0931f) {
    float t[16], masked[16], plain[16], masked8[8], plain8[8];
    for (int i = 0; i < 16; ++i) t[i] = std::min(0.f, t0 + 0.0113f * static_cast<float>(i));
    softmax_exp2_v4(t, masked, plain, masked8, plain8);
    for (int i = 0; i < 16; ++i, ++checked) {
      const double want = std::exp2(static_cast<double>(t[i]));
      wrong += masked[i] != plain[i] && t[i] >= -126.f;  // the mask only zeroes lanes below -126
      if (i >= 8) wrong += masked8[i - 8] != masked[i] || plain8[i - 8] != plain[i];  // 8 lanes, the same values
      if (t[i] < -126.f) {
        wrong += masked[i] != 0.f || !(plain[i] >= 0.f && plain[i] < 1.2e-38f);
      } else {
        worst = std::max(worst, std::fabs(plain[i] - want) / want);
      }
    }
  }
  MESSAGE(checked << " exponentials, worst relative error " << worst);
  CHECK(wrong == 0);
  CHECK(worst < 4e-7);
  float t[16], masked[16], plain[16], masked8[8], plain8[8];
  for (int i = 0; i < 16; ++i)
    t[i] = i % 2 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  softmax_exp2_v4(t, masked, plain, masked8, plain8);
  CHECK(masked[1] == 0.f);  // a masked score weighs 0
  CHECK(masked8[1] == 0.f);
  CHECK(std::isnan(masked[0]));  // a NaN score stays visible
  CHECK(std::isnan(plain[0]));
#else
  MESSAGE("skipped: not an x86-64 build");
#endif
}

TEST_CASE("copy_frames: index lists split into evenly stepping runs, one copy each, equal to a copy per index") {
  using ops::FrameRun;
  auto same = [](const FrameRun& a, const FrameRun& b) {
    return a.src == b.src && a.src_step == b.src_step && a.dst == b.dst && a.dst_step == b.dst_step &&
           a.count == b.count;
  };
  const std::vector<std::int64_t> src{0, 2, 4, 5, 6, 9}, dst{0, 1, 2, 3, 4, 5};
  const std::vector<FrameRun> runs = ops::frame_runs(src, dst);
  REQUIRE(runs.size() == 3);
  CHECK(same(runs[0], {0, 2, 0, 1, 3}));
  CHECK(same(runs[1], {5, 1, 3, 1, 2}));
  CHECK(same(runs[2], {9, 1, 5, 1, 1}));
  // A descending pair, and a repeated index, cannot share a run (steps are >= 1).
  CHECK(ops::frame_runs(std::vector<std::int64_t>{5, 3}, std::vector<std::int64_t>{0, 1}).size() == 2);
  CHECK(ops::frame_runs(std::vector<std::int64_t>{2, 2}, std::vector<std::int64_t>{0, 1}).size() == 2);
  CHECK(ops::frame_runs(std::vector<std::int64_t>{}, std::vector<std::int64_t>{}).empty());
  CHECK_THROWS_AS(ops::frame_runs(std::vector<std::int64_t>{1}, std::vector<std::int64_t>{}), Error);

  // Frames of dim 1 of a [2, 7, 3] tensor into dim 0 of a [5, 2, 3] one.
  Runtime rt(Device::cpu());
  HostTensor a({2, 7, 3}), b({5, 2, 3}), want({5, 2, 3});
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<float>(i) * 0.5f - 3.f;
  const std::vector<std::int64_t> from{6, 1, 3, 5, 0}, to{4, 0, 1, 2, 3};
  for (std::size_t i = 0; i < from.size(); ++i)
    ops::copy(rt.ctx(), a.t.select(1, from[i]), want.t.select(0, to[i]));
  const std::uint64_t before = rt.ctx().copy_calls;
  ops::copy_frames(rt.ctx(), a.t, 1, from, b.t, 0, to);
  CHECK(rt.ctx().copy_calls - before == ops::frame_runs(from, to).size());
  CHECK(ops::frame_runs(from, to).size() == 3);  // {6}, {1, 3, 5} -> {0, 1, 2}, {0}
  CHECK(b.data == want.data);
}
