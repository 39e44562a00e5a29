// The 32-bit index arithmetic of the CUDA kernels (exec/index32.hpp), checked on the host where
// the same code runs: division by multiply-high against the hardware's division, and 32-bit
// offsets of joint layouts against the 64-bit ones. The switch that turns those kernels on, and
// which attention calls the fused kernel takes.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "exec/gpu_kernels.hpp"
#include "exec/context.hpp"
#include "exec/index32.hpp"
#include "ops/attention.hpp"

using namespace vinf;

namespace {

// Counts the dividends where FastDivmod differs from / and %.
std::uint64_t divmod_errors(std::uint32_t d, const std::vector<std::uint32_t>& ns) {
  const exec::FastDivmod f(d);
  std::uint64_t wrong = 0;
  for (std::uint32_t n : ns) {
    std::uint32_t q, r;
    f.divmod(n, q, r);
    wrong += q != n / d || r != n % d;
  }
  return wrong;
}

// 64-bit offsets of element `linear` of a joint layout, as the 64-bit kernels compute them.
template <int N>
std::int64_t offset64(const exec::JointLayout<N>& l, int k, std::int64_t linear) {
  std::int64_t off = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    off += (linear % l.size[d]) * l.stride[k][d];
    linear /= l.size[d];
  }
  return off;
}

}  // namespace

TEST_CASE("FastDivmod: n / d and n % d for every d up to 2048 and chosen n, and random d up to 2^31") {
  constexpr std::uint32_t kMax = (std::uint32_t{1} << 31) - 1;  // the largest dividend allowed
  std::mt19937 rng(7);
  std::uint64_t wrong = 0, checked = 0;
  for (std::uint32_t d = 1; d <= 2048; ++d) {
    std::vector<std::uint32_t> ns;
    for (std::uint32_t n = 0; n < 4096; ++n) ns.push_back(n);
    for (std::uint32_t m : {kMax / d, kMax / d - 1, kMax / d / 2}) {  // multiples near the top, +-1
      const std::uint64_t base = static_cast<std::uint64_t>(m) * d;
      for (std::int64_t e = -1; e <= 1; ++e)
        if (base + e <= kMax && static_cast<std::int64_t>(base) + e >= 0)
          ns.push_back(static_cast<std::uint32_t>(base + e));
    }
    ns.push_back(kMax);
    for (int i = 0; i < 200; ++i) ns.push_back(rng() & kMax);
    wrong += divmod_errors(d, ns);
    checked += ns.size();
  }
  std::vector<std::uint32_t> big_d{kMax, kMax + 1u, 1u << 30, (1u << 30) + 1, 3u << 29, 46341, 65537};
  for (int i = 0; i < 2000; ++i) big_d.push_back(1 + (rng() & kMax));
  for (std::uint32_t d : big_d) {
    std::vector<std::uint32_t> ns{0, kMax, d - 1, d <= kMax ? d : 0};
    for (int i = 0; i < 200; ++i) ns.push_back(rng() & kMax);
    wrong += divmod_errors(d, ns);
    checked += ns.size();
  }
  CAPTURE(checked);
  CHECK(wrong == 0);
  CHECK(checked > 8'000'000);
}

TEST_CASE("Index32: 32-bit offsets of joint layouts equal the 64-bit ones, and too large a view keeps 64 bits") {
  std::vector<float> buf(2 * 3 * 5 * 7);
  const Tensor a = Tensor::wrap(buf.data(), DType::f32, Device::cpu(), {2, 3, 5, 7});
  // A permuted view, a sliced one, a broadcast one and a contiguous output: each a different walk.
  const Tensor p = a.permute({3, 1, 0, 2}).slice(0, 1, 5);  // [5, 3, 2, 5]
  const Tensor s = a.slice(3, 2, 5).permute({3, 1, 0, 2});  // [5, 3, 2, 5]
  const Tensor b = a.select(0, 1).select(0, 2).select(0, 3).slice(0, 0, 5);  // [5], stride 1
  std::vector<float> out_buf(5 * 3 * 2 * 5);
  const Tensor out = Tensor::wrap(out_buf.data(), DType::f32, Device::cpu(), {5, 3, 2, 5});
  const Tensor bx = b.unsqueeze(1).unsqueeze(2).unsqueeze(3).expand({5, 3, 2, 5});
  const auto l = exec::joint_layout<4>({&p, &s, &bx, &out});
  exec::Index32<4> ix;
  REQUIRE(exec::to_index32(l, ix));
  CHECK(ix.count == 150);
  std::uint64_t wrong = 0;
  for (std::uint32_t i = 0; i < ix.count; ++i) {
    std::uint32_t off[4];
    ix.offsets(i, off);
    for (int k = 0; k < 4; ++k) wrong += off[k] != offset64(l, k, i);
  }
  CHECK(wrong == 0);

  // 2^31 elements (a layout only: nothing is allocated), and a view whose last offset is 2^31.
  exec::JointLayout<1> huge;
  huge.rank = 2;
  huge.size = {1 << 16, 1 << 15};
  huge.stride[0] = {1 << 15, 1};
  exec::Index32<1> unused;
  CHECK_FALSE(exec::to_index32(huge, unused));
  huge.size = {1 << 16, (1 << 15) - 1};
  CHECK(exec::to_index32(huge, unused));
  huge.stride[0] = {(std::int64_t{1} << 31) / ((1 << 16) - 1) + 1, 1};  // (2^16 - 1) x that >= 2^31
  CHECK_FALSE(exec::to_index32(huge, unused));
}

TEST_CASE("VINF_GPU_KERNELS: names, all and none, and an unknown name is an input error that lists the names") {
  CHECK(parse_gpu_kernels("") == 0);
  CHECK(parse_gpu_kernels("none") == 0);
  CHECK(parse_gpu_kernels("all") == kAllGpuKernels);
  CHECK(parse_gpu_kernels(
            " index32 , temporal-attention,staged-uploads, flash-attention,gemm-epilogues,qkv-gemm,group-norm") ==
        kAllGpuKernels);
  CHECK(parse_gpu_kernels("index32") == static_cast<unsigned>(GpuKernel::index32));
  CHECK(gpu_kernels_text(0) == "none");
  CHECK(gpu_kernels_text(kAllGpuKernels) ==
        "temporal-attention,index32,staged-uploads,flash-attention,gemm-epilogues,qkv-gemm,group-norm");
  CHECK(parse_gpu_kernels(gpu_kernels_text(kAllGpuKernels)) == kAllGpuKernels);
  CHECK_THROWS_WITH_AS(
      parse_gpu_kernels("index32,flash"),
      doctest::Contains("no kernel is called 'flash'; the names are temporal-attention, index32, "
                        "staged-uploads, flash-attention, gemm-epilogues, qkv-gemm, group-norm, all, none"),
      InputError);
  ExecContext ctx;
  ctx.gpu_kernels = static_cast<unsigned>(GpuKernel::temporal_attention);
  CHECK(gpu_kernel_enabled(ctx, GpuKernel::temporal_attention));
  CHECK_FALSE(gpu_kernel_enabled(ctx, GpuKernel::index32));
}

TEST_CASE(
    "flash-attention takes only full attention in f16 or bf16 with head dims 16 to 128, on CUDA, when switched on") {
  // fused_attention_applies reads shapes, dtypes and parameters only: host tensors and a context
  // that names a GPU are enough to check which calls the fused kernel would take.
  std::vector<std::uint16_t> buf(2 * 2 * 300 * 128);
  auto t = [&](DType dt, std::int64_t l, std::int64_t d) {
    return Tensor::wrap(buf.data(), dt, Device::cpu(), {2, 2, l, d});
  };
  ExecContext gpu;
  gpu.device = Device::cuda(0);
  ExecContext cpu;
  const Tensor q = t(DType::bf16, 100, 64), k = t(DType::bf16, 77, 64), v = t(DType::bf16, 77, 64);
  ops::AttentionParams full;
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, nullptr, full, nullptr));  // off by default
  gpu.gpu_kernels = static_cast<unsigned>(GpuKernel::flash_attention);
  cpu.gpu_kernels = gpu.gpu_kernels;
  CHECK(ops::fused_attention_applies(gpu, q, k, v, nullptr, full, nullptr));
  CHECK_FALSE(ops::fused_attention_applies(cpu, q, k, v, nullptr, full, nullptr));
  CHECK(ops::fused_attention_applies(gpu, t(DType::f16, 64, 128), t(DType::f16, 300, 128), t(DType::f16, 300, 128),
                                     nullptr, full, nullptr));
  CHECK_FALSE(ops::fused_attention_applies(gpu, t(DType::f16, 63, 128), t(DType::f16, 300, 128),
                                           t(DType::f16, 300, 128), nullptr, full, nullptr));  // under a block of rows
  CHECK_FALSE(ops::fused_attention_applies(gpu, t(DType::f32, 100, 64), t(DType::f32, 77, 64), t(DType::f32, 77, 64),
                                           nullptr, full, nullptr));
  CHECK_FALSE(ops::fused_attention_applies(gpu, t(DType::bf16, 100, 40), t(DType::bf16, 77, 40), t(DType::bf16, 77, 40),
                                           nullptr, full, nullptr));  // head dim 40
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, t(DType::bf16, 77, 32), nullptr, full, nullptr));  // dv != d
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, &k, full, nullptr));  // global keys
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, nullptr, full, &q));  // log-sum-exp wanted
  // A band that still shows every key to every row (100 rows, 77 keys) is full attention; one
  // that hides a key from a row is not.
  ops::AttentionParams band = full;
  band.band_lo = -99;
  band.band_hi = 76;
  CHECK(ops::fused_attention_applies(gpu, q, k, v, nullptr, band, nullptr));
  band.band_lo = -98;
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, nullptr, band, nullptr));
  band.band_lo = -99;
  band.band_hi = 75;
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, nullptr, band, nullptr));
  ops::AttentionParams scaled = full;
  scaled.token_count_log_base = 16.f;
  CHECK_FALSE(ops::fused_attention_applies(gpu, q, k, v, nullptr, scaled, nullptr));
}
