// CPU kernels, internal to the op library (src/ops dispatches here after checking arguments).
// `ref` holds the naive references: plain loops over any strides, double accumulation, kept simple
// and frozen; they are the oracle the fast paths and the CUDA kernels are tested against. The fast
// paths use oneDNN (convolutions and matrix products; OpenBLAS on request) and OpenMP loops, all
// on one OpenMP thread pool. Compute ops take f32 tensors; the weights of linear, conv2d and
// temporal_conv may also be bf16 (--dtype bf16, on CPUs with AVX-512 BF16: the fast paths round
// the input to bf16 and accumulate in f32; the references compute in f32 from widened weights);
// the fast attention takes bf16 products when AttentionParams::bf16_products asks for them;
// copy and fill take every dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.hpp"
#include "exec/context.hpp"
#include "exec/params.hpp"

namespace vinf::cpu {

// The OpenMP pool's size: the threads of every fast path the calling thread runs.
int thread_count();
// Sets it for the calling thread (and the kernels it runs from now on), at least 1.
void set_thread_count(int n);

// Whether this CPU multiplies bf16 natively (AVX-512 BF16, which the AMX-BF16 CPUs also have):
// what --dtype bf16 on the CPU needs. VINF_CPU_LEVEL=v3 or baseline hides it, as it hides AVX-512,
// and so does an ONEDNN_MAX_CPU_ISA below avx512_core_bf16.
bool bf16_supported();
// Whether the CPU itself has AVX-512 BF16, whatever the environment hides (for error messages).
bool bf16_hardware();
// Whether oneDNN's matrix products copy blocks of their weights into a scratchpad (its AVX-512
// kernels; ONEDNN_MAX_CPU_ISA can hold them back), which a memory estimate counts.
bool matmul_packs_weights();

namespace ref {
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);
void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
void activation(exec::Activation act, const Tensor& x, const Tensor& out);
void geglu(const Tensor& x, const Tensor& out);
void group_norm_sums(const Tensor& x, int groups, const Tensor& sums);  // x (N, C, T, S)
void group_norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                      const Tensor& y, const exec::GroupNormParams& p);
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, float eps);  // 2-D
void softmax(const Tensor& x, const Tensor& out);                                                       // 2-D
void rms_norm(const Tensor& x, const Tensor& gamma, const Tensor& y, float eps);                        // 2-D
void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out);                  // 4-D
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);                     // 2-D
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta);
void conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, const exec::Conv2dParams& p);
void temporal_conv(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad);
void upsample_nearest(const Tensor& x, const Tensor& y);
void timestep_embedding(const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const exec::AttentionParams& p, const Tensor* lse = nullptr);
void normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset);
}  // namespace ref

namespace fast {
// Any dtypes; f32 to bf16 (round to nearest even) runs on the CPU's own conversion where it has
// AVX-512 BF16 and the views have contiguous rows, with the same bits as the generic one.
void copy(const Tensor& src, const Tensor& dst);
// n floats to bf16 bits (round to nearest even), natively where the CPU has AVX-512 BF16.
void narrow_to_bf16(const float* src, std::uint16_t* dst, std::int64_t n);
void fill(const Tensor& dst, double value);
void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
void activation(exec::Activation act, const Tensor& x, const Tensor& out);
void geglu(const Tensor& x, const Tensor& out);
void group_norm_sums(const Tensor& x, int groups, const Tensor& sums);
void group_norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                      const Tensor& y, const exec::GroupNormParams& p);
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, float eps);
void softmax(const Tensor& x, const Tensor& out);
// y = x w^T (+ bias) + beta * y; x [..., K] and y [..., N] share their leading dims, in any strides
// (a permuted x is read transposed, a column-major y written as y^T = w x^T).
void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, float beta = 0.f);
// out = geglu(x w^T + bias) on rows (x [M, K], w [2F, K], out [M, F]): two products, the gate's with
// its GELU and the hidden half's with the multiplication as oneDNN post-ops; out f32, or bf16 with
// bf16 weights.
void linear_geglu(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta);
void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const exec::Conv2dParams& p);
void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad);
// The backward passes of a convolution of x (N, Ci, H, W) with w (Co, Ci, KH, KW) at a stride and
// zero padding, f32: dx, dw and db (each optional, any strides) have the gradients added into
// them (oneDNN's backward primitives; grad::conv is the reference).
void conv_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h,
                   int pad_w, const Tensor* dx, const Tensor* dw, const Tensor* db);
void upsample_nearest(const Tensor& x, const Tensor& y);
void timestep_embedding(const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p);
void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg,
               const Tensor* vg, const Tensor& out, const exec::AttentionParams& p, const Tensor* lse = nullptr);
std::size_t attention_workspace_bytes(std::int64_t head_dim, std::int64_t value_dim);
// One thread's share of it.
std::size_t attention_scratch_bytes_per_thread(std::int64_t head_dim, std::int64_t value_dim);
// Whether attention's products run in bf16 when AttentionParams::bf16_products asks for it: on a
// CPU with AVX-512 BF16, except for head dims of 8 and less on AVX-512 (an f32 kernel there).
bool attention_bf16_products(std::int64_t head_dim, std::int64_t value_dim);
void normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset);
}  // namespace fast

}  // namespace vinf::cpu
