// The CPU's backward passes (ops/backward.hpp has the contracts). f32, any strides unless a
// function says otherwise; every gradient is added into its output (+=).
#pragma once

#include "core/tensor.hpp"
#include "exec/activation.hpp"
#include "exec/context.hpp"
#include "exec/params.hpp"

namespace vinf::cpu::grad {

void activation(exec::Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx);
// 2-D rows; overwrite: dx = the gradient, its old contents not read.
void geglu(const Tensor& x, const Tensor& dy, const Tensor& dx, bool overwrite = false);
// x (N, Cin, H, W), w contiguous (Cout, Cin, kh, kw), dy (N, Cout, Ho, Wo); padding per axis.
void conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h, int pad_w,
          const Tensor* dx, const Tensor* dw, const Tensor* db);
// x, dy (N, C, T, S).
void group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                const exec::GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta);
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, const Tensor* dx,
                const Tensor* dgamma, const Tensor* dbeta);  // 2-D rows, unit stride along them
void softmax(const Tensor& y, const Tensor& dy, const Tensor& dx);   // 2-D rows
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
               const exec::AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
               const Tensor* out = nullptr);  // out: the forward's output, optional
void upsample_nearest(const Tensor& dy, const Tensor& dx);
// dst += src; dims where dst has stride 0 are summed over.
void accumulate(const Tensor& src, const Tensor& dst);

}  // namespace vinf::cpu::grad
