#include "cpu/blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "cpu/context.hpp"
#include "cpu/cpu.hpp"
#include "cpu/vec.hpp"
#include "exec/activation_math.hpp"
#include "exec/layout.hpp"

namespace vinf::cpu {

bool as_blas_matrix(const Tensor& m, BlasMatrix& out) {
  out.data = m.data;
  out.bf16 = m.dtype == DType::bf16;
  exec::MatrixLayout l;
  if (!exec::matrix_layout(m, l)) return false;
  out.transposed = l.transposed;
  out.ld = l.ld;
  return true;
}

bool bf16_hardware() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_supported() {
#if defined(__x86_64__)
  static const bool yes = [] {
    if (!bf16_hardware()) return false;
    // oneDNN's own choice too: ONEDNN_MAX_CPU_ISA below avx512_core_bf16 leaves it no bf16 kernels.
    const auto bf16_isa = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    const bool onednn = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bf16_isa) == bf16_isa;
    return vec::cpu_level() == vec::Level::v4 && onednn;
  }();
  return yes;
#else
  return false;
#endif
}

bool matmul_packs_weights() {
  // The AVX-512 brgemm kernels pack blocks of B into their scratchpad; the AVX2 ones read it in place.
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx512) == avx512;
}

GemmLibrary gemm_library() {
  static const GemmLibrary lib = [] {
    const char* v = std::getenv("VINF_CPU_GEMM");
    return v != nullptr && std::strcmp(v, "openblas") == 0 ? GemmLibrary::openblas : GemmLibrary::onednn;
  }();
  return lib;
}

const char* gemm_library_name() {
  switch (gemm_library()) {
    case GemmLibrary::onednn: return "oneDNN matmul";
    case GemmLibrary::openblas: return openblas_get_parallel() == 2 ? "OpenBLAS (OpenMP)" : "OpenBLAS (its own threads)";
  }
  return "?";
}

namespace {

using dnnl::memory;

// The (batch, rows, cols) descriptor of a matrix view: row-major with leading dimension ld, or
// its transpose. A batch of one (or one matrix repeated) gets the stride of a whole matrix: with 0
// oneDNN sees the batch as the innermost dimension and falls back to its reference kernel.
memory::desc matrix_desc(std::int64_t batch, std::int64_t rows, std::int64_t cols, bool transposed, std::int64_t ld,
                         std::int64_t batch_stride, bool bf16 = false) {
  ld = std::max<std::int64_t>(ld, 1);
  if (batch == 1 || batch_stride == 0) batch_stride = ld * (transposed ? cols : rows);
  const memory::dims strides = transposed ? memory::dims{batch_stride, 1, ld} : memory::dims{batch_stride, ld, 1};
  return memory::desc({batch, rows, cols}, bf16 ? memory::data_type::bf16 : memory::data_type::f32, strides);
}

MatmulPlan& get_plan(CpuContext& cc, std::int64_t batch, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                     const BlasMatrix& a, std::int64_t a_batch, const BlasMatrix& b, std::int64_t b_batch, float beta,
                     std::int64_t ldc, std::int64_t c_batch, bool bias, std::int64_t bias_stride,
                     const GemmEpilogue& ep) {
  std::string key;
  key.reserve(200);
  for (const std::int64_t v : {batch, M, N, K, std::int64_t{a.transposed}, a.ld, a_batch, std::int64_t{b.transposed},
                               b.ld, b_batch, ldc, c_batch, std::int64_t{bias}, bias_stride, std::int64_t{a.bf16},
                               std::int64_t{ep.gelu}, std::int64_t{ep.mul != nullptr}, ep.ld_mul, ep.mul_batch,
                               std::int64_t{ep.bf16_out}}) {
    key += std::to_string(v);
    key += ',';
  }
  key += std::to_string(std::bit_cast<std::uint32_t>(alpha)) + ',' + std::to_string(std::bit_cast<std::uint32_t>(beta));
  auto& plans = cc.matmul_plans();
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  auto plan = std::make_unique<MatmulPlan>();
  // Batches of one matrix repeated (stride 0) are a broadcast dimension of size 1 to oneDNN.
  plan->a = matrix_desc(a_batch == 0 ? 1 : batch, M, K, a.transposed, a.ld, a_batch, a.bf16);
  plan->b = matrix_desc(b_batch == 0 ? 1 : batch, K, N, b.transposed, b.ld, b_batch, b.bf16);
  plan->c = matrix_desc(batch, M, N, false, ldc, c_batch, ep.bf16_out);
  if (bias) plan->bias = memory::desc({1, 1, N}, memory::data_type::f32, memory::dims{N, N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  dnnl::post_ops po;
  if (beta != 0.f) po.append_sum(beta);
  if (ep.gelu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  if (ep.mul) {
    plan->mul = matrix_desc(batch, M, N, false, ep.ld_mul, ep.mul_batch);
    po.append_binary(dnnl::algorithm::binary_mul, plan->mul);
  }
  if (po.len() > 0) attr.set_post_ops(po);
  const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(plan->a, plan->b, plan->bias, plan->c)
                                    : dnnl::matmul::desc(plan->a, plan->b, plan->c);
  plan->pd = dnnl::matmul::primitive_desc(d, attr, cc.engine());
  plan->prim = dnnl::matmul(plan->pd);
  return *plans.emplace(std::move(key), std::move(plan)).first->second;
}

// c = bias + beta * c on a batch of M x N results (c is not read when beta is 0): what the product
// adds onto in the OpenBLAS path, and the whole result when K is 0.
void bias_plus_beta_c(std::int64_t batch, std::int64_t M, std::int64_t N, float beta, float* c, std::int64_t ldc,
                      std::int64_t c_batch, const float* bias, std::int64_t bias_stride) {
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t m = 0; m < M; ++m) {
      float* row = c + i * c_batch + m * ldc;
      for (std::int64_t n = 0; n < N; ++n)
        row[n] = (bias ? bias[n * bias_stride] : 0.f) + (beta == 0.f ? 0.f : beta * row[n]);
    }
}

void openblas_gemm(std::int64_t batch, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BlasMatrix& a,
                   std::int64_t a_batch, const BlasMatrix& b, std::int64_t b_batch, float beta, float* c,
                   std::int64_t ldc, std::int64_t c_batch, const float* bias, std::int64_t bias_stride) {
  // OpenBLAS's OpenMP build is not safe to call from several threads at once (vinf forward
  // --emulate runs one Runtime per thread); its pthread build queues such calls itself.
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  constexpr std::int64_t kMax = 0x7fffffff;
  VINF_CHECK(M <= kMax && N <= kMax && K <= kMax && a.ld <= kMax && b.ld <= kMax && ldc <= kMax,
             "GEMM dimensions exceed the 32-bit BLAS interface (M=", M, ", N=", N, ", K=", K, ")");
  for (std::int64_t i = 0; i < batch; ++i) {
    float* ci = c + i * c_batch;
    float bi = beta;
    if (bias) {  // the product then accumulates onto bias + beta * c
      bias_plus_beta_c(1, M, N, beta, ci, ldc, 0, bias, bias_stride);
      bi = 1.f;
    }
    cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                static_cast<const float*>(a.data) + i * a_batch, static_cast<int>(std::max<std::int64_t>(a.ld, 1)),
                static_cast<const float*>(b.data) + i * b_batch,
                static_cast<int>(std::max<std::int64_t>(b.ld, 1)), bi, ci,
                static_cast<int>(std::max<std::int64_t>(ldc, 1)));
  }
}

// The epilogue on f32 results already stored (the OpenBLAS path and K = 0).
void apply_epilogue(std::int64_t batch, std::int64_t M, std::int64_t N, float* c, std::int64_t ldc,
                    std::int64_t c_batch, const GemmEpilogue& ep) {
  if (!ep.gelu && !ep.mul) return;
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t m = 0; m < M; ++m) {
      float* row = c + i * c_batch + m * ldc;
      const float* mul = ep.mul ? ep.mul + i * ep.mul_batch + m * ep.ld_mul : nullptr;
      for (std::int64_t n = 0; n < N; ++n) {
        if (ep.gelu) row[n] = exec::gelu(row[n]);
        if (mul) row[n] *= mul[n];
      }
    }
}

}  // namespace

void gemm(ExecContext& ctx, std::int64_t batch, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const BlasMatrix& a, std::int64_t a_batch, const BlasMatrix& b, std::int64_t b_batch, float beta, void* c_out,
          std::int64_t ldc, std::int64_t c_batch, const float* bias, std::int64_t bias_stride, const GemmEpilogue& ep) {
  if (batch == 0 || M == 0 || N == 0) return;
  VINF_CHECK(bias == nullptr || alpha == 1.f, "gemm: a bias with alpha != 1 (oneDNN would scale the bias too)");
  VINF_CHECK(a.bf16 == b.bf16, "gemm: one operand is bf16 and the other f32 (convert the activations first)");
  VINF_CHECK(!ep.bf16_out || (a.bf16 && beta == 0.f && K > 0),
             "gemm: a bf16 result needs bf16 operands, beta 0 and K > 0");
  float* c = static_cast<float*>(c_out);
  if (K == 0 && !ep.bf16_out) {  // no product (the libraries may leave c untouched)
    bias_plus_beta_c(batch, M, N, beta, c, ldc, c_batch, bias, bias_stride);
    apply_epilogue(batch, M, N, c, ldc, c_batch, ep);
    return;
  }
  if (gemm_library() == GemmLibrary::openblas && !a.bf16) {
    openblas_gemm(batch, M, N, K, alpha, a, a_batch, b, b_batch, beta, c, ldc, c_batch, bias, bias_stride);
    apply_epilogue(batch, M, N, c, ldc, c_batch, ep);
    return;
  }
  VINF_CHECK(ctx.cpu != nullptr, "gemm: the CPU fast path needs a CpuContext");
  CpuContext& cc = *ctx.cpu;
  // oneDNN's fast kernels read the bias as contiguous whatever its descriptor says.
  Allocation bias_hold;
  if (bias && bias_stride != 1) {
    bias_hold = ctx.arena->allocate(static_cast<std::size_t>(N) * sizeof(float));
    float* dense = static_cast<float*>(bias_hold.data());
    for (std::int64_t n = 0; n < N; ++n) dense[n] = bias[n * bias_stride];
    bias = dense;
    bias_stride = 1;
  }
  try {
    MatmulPlan& plan = get_plan(cc, batch, M, N, K, alpha, a, a_batch, b, b_batch, beta, ldc, c_batch, bias != nullptr,
                                bias_stride, ep);
    Allocation scratch_hold = ctx.arena->allocate(plan.pd.scratchpad_desc().get_size());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(plan.a, cc.engine(), const_cast<void*>(a.data))},
        {DNNL_ARG_WEIGHTS, memory(plan.b, cc.engine(), const_cast<void*>(b.data))},
        {DNNL_ARG_DST, memory(plan.c, cc.engine(), c)},
        {DNNL_ARG_SCRATCHPAD, memory(plan.pd.scratchpad_desc(), cc.engine(), scratch_hold.data())}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(plan.bias, cc.engine(), const_cast<float*>(bias)));
    if (ep.mul) {
      const int index = (beta != 0.f ? 1 : 0) + (ep.gelu ? 1 : 0);  // the multiplication's place among the post-ops
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
                   memory(plan.mul, cc.engine(), const_cast<float*>(ep.mul)));
    }
    plan.prim.execute(cc.stream(), args);
    cc.stream().wait();
  } catch (const dnnl::error& e) {
    VINF_FAIL("gemm: oneDNN matmul failed for batch ", batch, ", M ", M, ", N ", N, ", K ", K, a.bf16 ? " in bf16" : "",
              ": ", e.what());
  }
}

}  // namespace vinf::cpu
