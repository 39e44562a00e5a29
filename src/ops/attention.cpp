#include "ops/attention.hpp"

#include "exec/gpu_kernels.hpp"
#include "ops/dispatch.hpp"

namespace vinf::ops {
namespace {

void check_operand(const ExecContext& ctx, const char* arg, const Tensor& t, std::int64_t b, std::int64_t h,
                   std::int64_t last) {
  const char* op = "attention";
  check_rank(op, arg, t, 4);
  VINF_CHECK(t.size(0) == b && t.size(1) == h && t.size(3) == last, op, ": ", arg, " ", t.describe(), " must be [", b,
             ",", h, ",*,", last, "]");
  VINF_CHECK(t.stride(3) == 1 || t.size(3) == 1, op, ": the last dim of ", arg, " ", t.describe(),
             " must be contiguous");
  check_on_device(ctx, op, arg, t);
  detail::check_compute_dtype(ctx, op, arg, t);
}

}  // namespace

void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const AttentionParams& p, const Tensor* lse) {
  const ProfileOp profile_op(ctx, "attention");
  const char* op = "attention";
  check_rank(op, "q", q, 4);
  const std::int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Dv = v.rank() == 4 ? v.size(3) : 0;
  check_operand(ctx, "q", q, B, H, D);
  check_operand(ctx, "k", k, B, H, D);
  check_operand(ctx, "v", v, B, H, Dv);
  VINF_CHECK(k.size(2) == v.size(2), op, ": k ", k.describe(), " and v ", v.describe(), " hold different key counts");
  check_operand(ctx, "out", out, B, H, Dv);
  VINF_CHECK(out.size(2) == Lq, op, ": out ", out.describe(), " must have ", Lq, " rows");
  VINF_CHECK((kg == nullptr) == (vg == nullptr), op, ": global keys and values come together");
  if (kg) {
    check_operand(ctx, "global k", *kg, B, H, D);
    check_operand(ctx, "global v", *vg, B, H, Dv);
    VINF_CHECK(kg->size(2) == vg->size(2), op, ": global k and v hold different key counts");
  }
  VINF_CHECK(p.band_lo <= p.band_hi, op, ": band [", p.band_lo, ", ", p.band_hi, "] is empty");
  VINF_CHECK(p.token_count_log_base >= 0.f && p.token_count_log_base != 1.f, op,
             ": token_count_log_base must be 0 (off) or a positive base other than 1");
  if (lse) {
    VINF_CHECK(lse->dtype == DType::f32 && lse->rank() == 3 && lse->size(0) == B && lse->size(1) == H &&
                   lse->size(2) == Lq && lse->is_contiguous(),
               op, ": lse ", lse->describe(), " must be f32 [", B, ",", H, ",", Lq, "], contiguous");
    check_on_device(ctx, op, "lse", *lse);
  }
  if (ctx.device.is_cuda()) {
    if (fused_attention_applies(ctx, q, k, v, kg, p, lse) && out.dtype == q.dtype) {
      VINF_ON_CUDA(cuda::flash_attention(ctx, q, k, v, out, p.scale));
      return;
    }
    VINF_ON_CUDA(cuda::attention(ctx, q, k, v, kg, vg, out, p, lse));
    return;
  }
  detail::reference(ctx) ? cpu::ref::attention(q, k, v, kg, vg, out, p, lse)
                         : cpu::fast::attention(ctx, q, k, v, kg, vg, out, p, lse);
}

bool fused_attention_applies(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* kg, const AttentionParams& p, const Tensor* lse) {
  if (!ctx.device.is_cuda() || !gpu_kernel_enabled(ctx, GpuKernel::flash_attention)) return false;
  if (q.dtype != DType::f16 && q.dtype != DType::bf16) return false;
  if (k.dtype != q.dtype || v.dtype != q.dtype || kg || lse) return false;
  const std::int64_t d = q.size(3), lq = q.size(2), lk = k.size(2);
  // Its blocks take 64 rows: shorter sequences (the temporal layers') stay with the banded kernel.
  if (v.size(3) != d || (d != 16 && d != 32 && d != 64 && d != 128) || lk == 0 || lq < 64) return false;
#if VINF_WITH_CUDA
  // Head dim 128 takes 137 KiB of shared memory per block: more than sm_86/sm_89 GPUs allow.
  // (Without a CUDA context, as in the host-side tests, the shapes alone decide.)
  if (ctx.cuda && cuda::flash_attention_shared_bytes(d) > cuda::shared_memory_optin(ctx)) return false;
#endif
  // Every row sees every key: row 0 reaches the last key and the last row the first.
  const bool all_visible = p.band_hi >= lk - 1 && p.band_lo <= -(lq - 1);
  return all_visible && p.local_bias == 0.f && p.token_count_log_base == 0.f;
}

std::size_t attention_workspace_bytes(const ExecContext& ctx, const Tensor& q, const Tensor& v) {
  if (ctx.device.is_cuda() || ctx.cpu_impl == CpuImpl::reference) return 0;
  return cpu::fast::attention_workspace_bytes(q.size(3), v.size(3));
}

std::size_t cpu_attention_scratch_bytes(std::int64_t head_dim, std::int64_t value_dim) {
  return cpu::fast::attention_scratch_bytes_per_thread(head_dim, value_dim);
}

}  // namespace vinf::ops
