// CUDA implementations behind src/ops (arguments already checked there). f32, f16 and bf16
// storage with f32 accumulation. Declared without CUDA types so host code can include it.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "exec/context.hpp"
#include "exec/params.hpp"

namespace vinf::cuda {

void copy(ExecContext& ctx, const Tensor& src, const Tensor& dst);
void fill(ExecContext& ctx, const Tensor& dst, double value);
void axpby(ExecContext& ctx, float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
void mul(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void activation(ExecContext& ctx, exec::Activation act, const Tensor& x, const Tensor& out);
void geglu(ExecContext& ctx, const Tensor& x, const Tensor& out);
void group_norm_sums(ExecContext& ctx, const Tensor& x, int groups, const Tensor& sums);
void group_norm_apply(ExecContext& ctx, const Tensor& x, const Tensor& sums, double count, const Tensor& gamma,
                      const Tensor& beta, const Tensor& y, const exec::GroupNormParams& p);
// GroupNorm (+ activation) in one kernel where each (sample, group) of x and y is one run of
// memory (VINF_GPU_KERNELS=group-norm); false (nothing done) for a layout or dtype it does not take.
bool group_norm_runs(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                     const exec::GroupNormParams& p);
void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, float eps);
void softmax(ExecContext& ctx, const Tensor& x, const Tensor& out);
void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& y, float eps);
void rotary(ExecContext& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out);
void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta);
void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const exec::Conv2dParams& p);
void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad);
void upsample_nearest(ExecContext& ctx, const Tensor& x, const Tensor& y);
void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p);
void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const exec::AttentionParams& p, const Tensor* lse = nullptr);
// Full attention on the tensor cores, no score matrix (flash_attention.cu): the arguments that
// ops::fused_attention_applies accepts, out in q's dtype.
void flash_attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     float scale);
// The shared memory one block of it takes at head dim d (0 for a head dim it does not take).
std::size_t flash_attention_shared_bytes(std::int64_t head_dim);
// The most shared memory a block may opt in to on the context's device.
std::size_t shared_memory_optin(const ExecContext& ctx);
void normal(ExecContext& ctx, const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset);

// The optimizer (ops/optim.hpp): AdamW on contiguous f32 buffers (step = lr / c1), and the sum of
// squares in double.
void adamw_update(ExecContext& ctx, double step, double beta1, double beta2, double eps, double decay, double c2,
                  double grad_scale, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const Tensor* copy);
double sum_squares(ExecContext& ctx, const Tensor& x);

// The backward passes (ops/backward.hpp; views as the CPU's in cpu/backward.hpp), f32, adding into
// their outputs.
namespace grad {
void activation(ExecContext& ctx, exec::Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx);
void geglu(ExecContext& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx);
void conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h, int pad_w,
          const Tensor* dx, const Tensor* dw, const Tensor* db);
void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                const exec::GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta);
void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, const Tensor* dx,
                const Tensor* dgamma, const Tensor* dbeta);
void softmax(ExecContext& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx);
void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
               const exec::AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv);
void upsample_nearest(ExecContext& ctx, const Tensor& dy, const Tensor& dx);
void accumulate(ExecContext& ctx, const Tensor& src, const Tensor& dst);
}  // namespace grad

}  // namespace vinf::cuda
