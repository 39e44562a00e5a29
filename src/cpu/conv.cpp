// Fast convolutions. conv2d: oneDNN, letting it pick blocked layouts and reordering our NCHW views
// in and out (the plan per shape is cached in the CpuContext). temporal_conv: GEMMs over frames,
// one GEMM with K = kt * Cin per output frame when the input is stored frame-major.
#include <string>

#include "core/error.hpp"
#include "cpu/blas.hpp"
#include "cpu/context.hpp"
#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"
#include "exec/context.hpp"

namespace vinf::cpu {

namespace fast {
namespace {

using dnnl::memory;

memory::data_type dnnl_type(DType t) { return t == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32; }

memory::desc strided_desc(const Tensor& t) {
  memory::dims dims(t.shape.begin(), t.shape.end());
  memory::dims strides(t.strides.begin(), t.strides.begin() + t.rank());
  return memory::desc(dims, dnnl_type(t.dtype), strides);
}

std::string plan_key(const Tensor& x, const Tensor& w, bool bias, const Tensor& y, const exec::Conv2dParams& p) {
  std::string k = x.describe() + "|" + w.describe() + dtype_name(w.dtype) + "|" + y.describe();
  k += "|s" + std::to_string(p.stride) + "p" + std::to_string(p.padding) + (bias ? "b" : "");
  return k;
}

ConvPlan& get_plan(CpuContext& cc, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                   const exec::Conv2dParams& p) {
  auto& plans = cc.conv_plans();
  const std::string key = plan_key(x, w, bias != nullptr, y, p);
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  auto plan = std::make_unique<ConvPlan>();
  plan->user_src = strided_desc(x);
  plan->user_wei = strided_desc(w);
  plan->user_dst = strided_desc(y);
  const memory::dims src_dims(x.shape.begin(), x.shape.end()), wei_dims(w.shape.begin(), w.shape.end()),
      dst_dims(y.shape.begin(), y.shape.end());
  // bf16 weights (--dtype bf16): the input is rounded to bf16 by the reorder into the primitive's
  // layout, the products accumulate in f32 and the output stays f32.
  const auto any = memory::format_tag::any;
  const memory::data_type in_type = dnnl_type(w.dtype);
  const memory::desc src_any(src_dims, in_type, any), wei_any(wei_dims, in_type, any),
      dst_any(dst_dims, memory::data_type::f32, any);
  const memory::dims strides{p.stride, p.stride}, pad{p.padding, p.padding};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (bias) {
    plan->bias_md = memory::desc({w.size(0)}, memory::data_type::f32, memory::dims{bias->stride(0)});
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                            src_any, wei_any, plan->bias_md, dst_any, strides, pad, pad);
    plan->pd = dnnl::convolution_forward::primitive_desc(d, attr, cc.engine());
  } else {
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                            src_any, wei_any, dst_any, strides, pad, pad);
    plan->pd = dnnl::convolution_forward::primitive_desc(d, attr, cc.engine());
  }
  plan->conv = dnnl::convolution_forward(plan->pd);
  return *plans.emplace(key, std::move(plan)).first->second;
}

// Memory in the primitive's layout: the user's own when the layouts agree, else a reordered copy
// in an arena block.
memory staged(CpuContext& cc, Arena& arena, const memory::desc& want, const memory::desc& user, void* data,
              bool copy_in, Allocation& hold) {
  memory user_mem(user, cc.engine(), data);
  if (want == user) return user_mem;
  hold = arena.allocate(want.get_size());
  memory m(want, cc.engine(), hold.data());
  if (copy_in) dnnl::reorder(user_mem, m).execute(cc.stream(), user_mem, m);
  return m;
}

}  // namespace

void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const exec::Conv2dParams& p) {
  VINF_CHECK(ctx.cpu != nullptr, "conv2d: the CPU fast path needs a CpuContext");
  CpuContext& cc = *ctx.cpu;
  try {
    ConvPlan& plan = get_plan(cc, x, w, bias, y, p);
    Allocation hs, hw, hd, hscratch;
    memory src = staged(cc, *ctx.arena, plan.pd.src_desc(), plan.user_src, x.data, true, hs);
    memory wei = staged(cc, *ctx.arena, plan.pd.weights_desc(), plan.user_wei, w.data, true, hw);
    memory dst = staged(cc, *ctx.arena, plan.pd.dst_desc(), plan.user_dst, y.data, false, hd);
    hscratch = ctx.arena->allocate(plan.pd.scratchpad_desc().get_size());
    memory scratch(plan.pd.scratchpad_desc(), cc.engine(), hscratch.data());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(plan.bias_md, cc.engine(), bias->data));
    plan.conv.execute(cc.stream(), args);
    if (!(plan.pd.dst_desc() == plan.user_dst)) {
      memory user_dst(plan.user_dst, cc.engine(), y.data);
      dnnl::reorder(dst, user_dst).execute(cc.stream(), dst, user_dst);
    }
    cc.stream().wait();
  } catch (const dnnl::error& e) {
    VINF_FAIL("conv2d: oneDNN failed for x ", x.describe(), ", w ", w.describe(), ": ", e.what());
  }
}

void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  const std::int64_t N = x.size(0), Ci = x.size(1), T = x.size(2), S = x.size(3);
  const std::int64_t Co = w.size(0), KT = w.size(2), To = y.size(2);
  // Weights as a (Cout, kt * Cin) matrix with column k * Cin + i = w[o, i, k].
  const DType wt = w.dtype;  // bf16 with --dtype bf16: the input is rounded to bf16 too
  const std::size_t elt = dtype_size(wt);
  OwnedTensor wk = ctx.arena->empty(wt, {Co, KT, Ci});
  copy(w.permute({0, 2, 1}), wk);
  // BLAS wants unit-stride pixel rows; copy the rare views that are not, and bf16's inputs (in
  // the same frame-major or channel-major order).
  OwnedTensor hx, hy;
  Tensor xs = x, ys = y;
  if (x.stride(3) != 1 || x.dtype != wt) {
    if (x.stride(2) == Ci * x.stride(1)) {
      hx = ctx.arena->empty(wt, {N, T, Ci, S});
      xs = Tensor(hx).permute({0, 2, 1, 3});
    } else {
      hx = ctx.arena->empty(wt, x.shape);
      xs = hx;
    }
    copy(x, xs);
  }
  if (y.stride(3) != 1) {
    hy = ctx.arena->empty(DType::f32, y.shape);
    ys = hy;
  }
  if (bias) copy(bias->unsqueeze(1).unsqueeze(0).unsqueeze(3).expand(ys.shape), ys);
  // Frame-major input: the channels of consecutive frames form one matrix of kt * Cin rows.
  const bool fused = xs.stride(2) == Ci * xs.stride(1);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t t = 0; t < To; ++t) {
      // Taps that read real frames: ti = t + k - pad in [0, T).
      const std::int64_t k0 = std::max<std::int64_t>(0, pad - t), k1 = std::min<std::int64_t>(KT, T + pad - t);
      float* c = ys.ptr<float>() + n * ys.stride(0) + t * ys.stride(2);
      float beta = bias ? 1.f : 0.f;
      if (k1 <= k0) {
        if (!bias) fill(ys.select(0, n).select(1, t), 0.0);
        continue;
      }
      const bool bf16 = wt == DType::bf16;
      auto at = [](const void* base, std::int64_t elements, std::size_t size) {
        return static_cast<const void*>(static_cast<const char*>(base) + elements * static_cast<std::int64_t>(size));
      };
      const void* frame0 = at(xs.data, n * xs.stride(0) + (t + k0 - pad) * xs.stride(2), elt);
      if (fused) {
        const BlasMatrix a{at(wk.data, k0 * Ci, elt), false, KT * Ci, bf16};
        const BlasMatrix b{frame0, false, xs.stride(1), bf16};
        sgemm(ctx, Co, S, (k1 - k0) * Ci, 1.f, a, b, beta, c, ys.stride(1));
      } else {
        for (std::int64_t k = k0; k < k1; ++k) {
          const BlasMatrix a{at(wk.data, k * Ci, elt), false, KT * Ci, bf16};
          const BlasMatrix b{at(frame0, (k - k0) * xs.stride(2), elt), false, xs.stride(1), bf16};
          sgemm(ctx, Co, S, Ci, 1.f, a, b, beta, c, ys.stride(1));
          beta = 1.f;
        }
      }
    }
  if (y.stride(3) != 1) copy(ys, y);
}

}  // namespace fast
}  // namespace vinf::cpu
