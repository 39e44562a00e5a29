#include "ops/backward.hpp"

#include "core/arena.hpp"
#include "cpu/backward.hpp"
#include "ops/dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/views.hpp"

namespace vinf::ops {
namespace {

// Every tensor is f32 on the context's device (training computes in f32).
void check_f32(const ExecContext& ctx, const char* op,
               std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  for (const auto& [name, t] : ts) {
    if (!t) continue;
    check_on_device(ctx, op, name, *t);
    check_dtype(op, name, *t, DType::f32);
  }
}

void check_shape(const char* op, const char* name, const Tensor* t, const Shape& shape) {
  if (t) VINF_CHECK(t->shape == shape, op, ": ", name, " must be ", shape.str(), ", got ", t->describe());
}

void no_broadcast(const char* op, const char* name, const Tensor& t) {
  for (int i = 0; i < t.rank(); ++i)
    VINF_CHECK(t.strides[i] != 0 || t.shape[i] <= 1, op, ": the gradient ", name, " ", t.describe(),
               " is a broadcast view; give a tensor of its own and sum it with accumulate()");
}

}  // namespace

void activation_backward(ExecContext& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const ProfileOp profile_op(ctx, "activation_backward");
  const char* op = "activation_backward";
  check_f32(ctx, op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  check_same_shape(op, "x", x, "dy", dy);
  check_same_shape(op, "x", x, "dx", dx);
  no_broadcast(op, "dx", dx);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::activation(ctx, act, x, dy, dx));
    return;
  }
  cpu::grad::activation(act, x, dy, dx);
}

void geglu_backward(ExecContext& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx, bool dx_overwrite) {
  const ProfileOp profile_op(ctx, "geglu_backward");
  const char* op = "geglu_backward";
  check_f32(ctx, op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  check_same_shape(op, "x", x, "dx", dx);
  const Tensor xr = detail::as_rows(op, "x", x), dyr = detail::as_rows(op, "dy", dy),
               dxr = detail::as_rows(op, "dx", dx);
  VINF_CHECK(xr.size(0) == dyr.size(0) && xr.size(1) == 2 * dyr.size(1), op, ": x ", x.describe(),
             " must be twice as wide as dy ", dy.describe());
  no_broadcast(op, "dx", dx);
  if (ctx.device.is_cuda()) {
    if (dx_overwrite) fill(ctx, dx, 0.0);
    VINF_ON_CUDA(cuda::grad::geglu(ctx, xr, dyr, dxr));
    return;
  }
  cpu::grad::geglu(xr, dyr, dxr, dx_overwrite);
}

void linear_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                     const Tensor* dw, const Tensor* db, bool dx_overwrite) {
  const ProfileOp profile_op(ctx, "linear_backward");
  const char* op = "linear_backward";
  check_f32(ctx, op, {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", dx}, {"dw", dw}, {"db", db}});
  check_rank(op, "w", w, 2);
  const Tensor xr = detail::as_rows(op, "x", x), dyr = detail::as_rows(op, "dy", dy);
  VINF_CHECK(xr.size(0) == dyr.size(0) && xr.size(1) == w.size(1) && dyr.size(1) == w.size(0), op, ": x ", x.describe(),
             ", w ", w.describe(), " and dy ", dy.describe(), " do not fit y = x w^T");
  check_shape(op, "dx", dx, x.shape);
  check_shape(op, "dw", dw, w.shape);
  check_shape(op, "db", db, Shape{w.size(0)});
  const std::int64_t m = xr.size(0);
  if (m == 0) return;
  if (dx)
    bmm(ctx, dyr.unsqueeze(0), w.unsqueeze(0), detail::as_rows(op, "dx", *dx).unsqueeze(0), 1.f,
        dx_overwrite ? 0.f : 1.f);
  if (dw) bmm(ctx, dyr.transpose(0, 1).unsqueeze(0), xr.unsqueeze(0), dw->unsqueeze(0), 1.f, 1.f);
  if (db) {
    OwnedTensor ones = ctx.arena->empty(DType::f32, {1, 1, m});
    fill(ctx, ones, 1.0);
    bmm(ctx, ones, dyr.unsqueeze(0), db->reshape({1, 1, w.size(0)}), 1.f, 1.f);
  }
}

void conv2d_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                     const Tensor* dx, const Tensor* dw, const Tensor* db) {
  const ProfileOp profile_op(ctx, "conv2d_backward");
  const char* op = "conv2d_backward";
  check_f32(ctx, op, {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", dx}, {"dw", dw}, {"db", db}});
  check_rank(op, "x", x, 4);
  check_rank(op, "w", w, 4);
  VINF_CHECK(w.is_contiguous(), op, ": w must be contiguous, got ", w.describe());
  VINF_CHECK(x.size(1) == w.size(1), op, ": x ", x.describe(), " does not fit w ", w.describe());
  std::int64_t ho = 0, wo = 0;
  conv2d_output_size(x, w, p, ho, wo);
  check_shape(op, "dy", &dy, Shape{x.size(0), w.size(0), ho, wo});
  check_shape(op, "dx", dx, x.shape);
  check_shape(op, "dw", dw, w.shape);
  check_shape(op, "db", db, Shape{w.size(0)});
  if (dx) no_broadcast(op, "dx", *dx);
  if (ctx.device.is_cuda()) {
    VINF_CHECK(!dw || dw->is_contiguous(), op, ": on CUDA dw must be contiguous, got ", dw->describe());
    VINF_ON_CUDA(cuda::grad::conv(ctx, x, w, dy, p.stride, p.padding, p.padding, dx, dw, db));
    return;
  }
  if (detail::reference(ctx))
    cpu::grad::conv(ctx, x, w, dy, p.stride, p.padding, p.padding, dx, dw, db);
  else
    cpu::fast::conv_backward(ctx, x, w, dy, p.stride, p.padding, p.padding, dx, dw, db);
}

void temporal_conv_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int pad,
                            const Tensor* dx, const Tensor* dw, const Tensor* db) {
  const ProfileOp profile_op(ctx, "temporal_conv_backward");
  const char* op = "temporal_conv_backward";
  check_f32(ctx, op, {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", dx}, {"dw", dw}, {"db", db}});
  check_rank(op, "x", x, 4);
  check_rank(op, "w", w, 3);
  VINF_CHECK(w.is_contiguous(), op, ": w must be contiguous, got ", w.describe());
  VINF_CHECK(x.size(1) == w.size(1) && pad >= 0, op, ": x ", x.describe(), " does not fit w ", w.describe());
  check_shape(op, "dy", &dy, Shape{x.size(0), w.size(0), x.size(2) + 2 * pad - w.size(2) + 1, x.size(3)});
  check_shape(op, "dx", dx, x.shape);
  check_shape(op, "dw", dw, w.shape);
  check_shape(op, "db", db, Shape{w.size(0)});
  if (dx) no_broadcast(op, "dx", *dx);
  // A convolution with a (kt, 1) kernel over the (T, S) plane.
  const Tensor w4 = w.reshape({w.size(0), w.size(1), w.size(2), 1});
  Tensor dw4;
  if (dw) dw4 = dw->is_contiguous() ? dw->reshape(w4.shape) : dw->unsqueeze(3);
  if (ctx.device.is_cuda()) {
    VINF_CHECK(!dw || dw->is_contiguous(), op, ": on CUDA dw must be contiguous, got ", dw->describe());
    VINF_ON_CUDA(cuda::grad::conv(ctx, x, w4, dy, 1, pad, 0, dx, dw ? &dw4 : nullptr, db));
    return;
  }
  if (detail::reference(ctx))
    cpu::grad::conv(ctx, x, w4, dy, 1, pad, 0, dx, dw ? &dw4 : nullptr, db);
  else
    cpu::fast::conv_backward(ctx, x, w4, dy, 1, pad, 0, dx, dw ? &dw4 : nullptr, db);
}

void group_norm_backward(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                         const GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta) {
  const ProfileOp profile_op(ctx, "group_norm_backward");
  const char* op = "group_norm_backward";
  check_f32(
      ctx, op,
      {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"dy", &dy}, {"dx", dx}, {"dgamma", dgamma}, {"dbeta", dbeta}});
  check_same_shape(op, "x", x, "dy", dy);
  check_shape(op, "dx", dx, x.shape);
  const Tensor xv = detail::as_nc_ts(op, "x", x, &dy);
  const Tensor dyv = detail::as_nc_ts(op, "dy", dy, &x);
  const std::int64_t c = xv.size(1);
  VINF_CHECK(p.groups > 0 && c % p.groups == 0, op, ": ", c, " channels do not split into ", p.groups, " groups");
  for (const auto& [name, t] : {std::pair{"gamma", &gamma}, std::pair{"beta", &beta}})
    check_shape(op, name, t, Shape{c});
  check_shape(op, "dgamma", dgamma, Shape{c});
  check_shape(op, "dbeta", dbeta, Shape{c});
  if (dx) no_broadcast(op, "dx", *dx);
  Tensor dxv;
  if (dx) dxv = detail::as_nc_ts(op, "dx", *dx, &x);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::group_norm(ctx, xv, gamma, beta, dyv, p, dx ? &dxv : nullptr, dgamma, dbeta));
    return;
  }
  cpu::grad::group_norm(xv, gamma, beta, dyv, p, dx ? &dxv : nullptr, dgamma, dbeta);
}

void layer_norm_backward(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                         const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta) {
  const ProfileOp profile_op(ctx, "layer_norm_backward");
  const char* op = "layer_norm_backward";
  check_f32(ctx, op, {{"x", &x}, {"gamma", &gamma}, {"dy", &dy}, {"dx", dx}, {"dgamma", dgamma}, {"dbeta", dbeta}});
  check_same_shape(op, "x", x, "dy", dy);
  check_shape(op, "dx", dx, x.shape);
  const Tensor xr = detail::as_rows(op, "x", x), dyr = detail::as_rows(op, "dy", dy);
  check_shape(op, "gamma", &gamma, Shape{xr.size(1)});
  check_shape(op, "dgamma", dgamma, Shape{xr.size(1)});
  check_shape(op, "dbeta", dbeta, Shape{xr.size(1)});
  if (dx) no_broadcast(op, "dx", *dx);
  Tensor dxr;
  if (dx) dxr = detail::as_rows(op, "dx", *dx);
  VINF_CHECK(xr.stride(1) == 1 && dyr.stride(1) == 1 && (!dx || dxr.stride(1) == 1), op,
             ": the last dim of x, dy and dx must be contiguous (as the forward op's), got x ", x.describe(), ", dy ",
             dy.describe());
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::layer_norm(ctx, xr, gamma, dyr, eps, dx ? &dxr : nullptr, dgamma, dbeta));
    return;
  }
  cpu::grad::layer_norm(xr, gamma, dyr, eps, dx ? &dxr : nullptr, dgamma, dbeta);
}

void softmax_backward(ExecContext& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const ProfileOp profile_op(ctx, "softmax_backward");
  const char* op = "softmax_backward";
  check_f32(ctx, op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  check_same_shape(op, "y", y, "dy", dy);
  check_same_shape(op, "y", y, "dx", dx);
  no_broadcast(op, "dx", dx);
  const Tensor yr = detail::as_rows(op, "y", y), dyr = detail::as_rows(op, "dy", dy),
               dxr = detail::as_rows(op, "dx", dx);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::softmax(ctx, yr, dyr, dxr));
    return;
  }
  cpu::grad::softmax(yr, dyr, dxr);
}

void attention_backward(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                        const AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor* out) {
  const ProfileOp profile_op(ctx, "attention_backward");
  const char* op = "attention_backward";
  check_f32(ctx, op, {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"dout", &dout},
                                std::pair{"dq", &dq}, std::pair{"dk", &dk}, std::pair{"dv", &dv}}) {
    check_rank(op, name, *t, 4);
    VINF_CHECK(t->strides[3] == 1 || t->shape[3] == 1, op, ": the last dimension of ", name,
               " must be contiguous, got ", t->describe());
  }
  VINF_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3) && v.size(0) == q.size(0) &&
                 v.size(1) == q.size(1) && v.size(2) == k.size(2),
             op, ": q ", q.describe(), ", k ", k.describe(), " and v ", v.describe(), " do not fit");
  check_shape(op, "dout", &dout, Shape{q.size(0), q.size(1), q.size(2), v.size(3)});
  check_shape(op, "out", out, dout.shape);
  if (out) {
    check_f32(ctx, op, {{"out", out}});
    VINF_CHECK(out->strides[3] == 1 || out->shape[3] == 1, op, ": the last dimension of out must be contiguous, got ",
               out->describe());
  }
  check_shape(op, "dq", &dq, q.shape);
  check_shape(op, "dk", &dk, k.shape);
  check_shape(op, "dv", &dv, v.shape);
  for (const auto& [name, t] : {std::pair{"dq", &dq}, std::pair{"dk", &dk}, std::pair{"dv", &dv}})
    no_broadcast(op, name, *t);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::attention(ctx, q, k, v, dout, p, dq, dk, dv));
    return;
  }
  cpu::grad::attention(q, k, v, dout, p, dq, dk, dv, out);
}

void upsample_nearest_backward(ExecContext& ctx, const Tensor& dy, const Tensor& dx) {
  const ProfileOp profile_op(ctx, "upsample_nearest_backward");
  const char* op = "upsample_nearest_backward";
  check_f32(ctx, op, {{"dy", &dy}, {"dx", &dx}});
  check_rank(op, "dy", dy, 4);
  check_rank(op, "dx", dx, 4);
  VINF_CHECK(dy.size(0) == dx.size(0) && dy.size(1) == dx.size(1), op, ": dy ", dy.describe(), " and dx ",
             dx.describe(), " differ in images or channels");
  no_broadcast(op, "dx", dx);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::upsample_nearest(ctx, dy, dx));
    return;
  }
  cpu::grad::upsample_nearest(dy, dx);
}

void accumulate(ExecContext& ctx, const Tensor& src, const Tensor& dst) {
  const ProfileOp profile_op(ctx, "accumulate");
  const char* op = "accumulate";
  check_f32(ctx, op, {{"src", &src}, {"dst", &dst}});
  check_same_shape(op, "src", src, "dst", dst);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::grad::accumulate(ctx, src, dst));
    return;
  }
  cpu::grad::accumulate(src, dst);
}

}  // namespace vinf::ops
