// Fast convolutions: oneDNN, letting it pick blocked layouts and reordering our NCHW views in and
// out (the plan per shape is cached in the CpuContext); temporal_conv as a 2-D convolution.
#include <string>

#include "core/error.hpp"
#include "cpu/context.hpp"
#include "cpu/cpu.hpp"
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

// Stride and zero padding along the two spatial dims.
struct ConvGeometry {
  int stride = 1, pad_h = 0, pad_w = 0;
};

std::string geometry_key(const ConvGeometry& g) {
  return "|s" + std::to_string(g.stride) + "p" + std::to_string(g.pad_h) + "," + std::to_string(g.pad_w);
}

std::string plan_key(const Tensor& x, const Tensor& w, bool bias, const Tensor& y, const ConvGeometry& g) {
  return x.describe() + "|" + w.describe() + dtype_name(w.dtype) + "|" + y.describe() + geometry_key(g) +
         (bias ? "b" : "");
}

ConvPlan& get_plan(CpuContext& cc, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                   const ConvGeometry& g) {
  auto& plans = cc.conv_plans();
  const std::string key = plan_key(x, w, bias != nullptr, y, g);
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
  const memory::dims strides{g.stride, g.stride}, pad{g.pad_h, g.pad_w};
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

// y = the convolution of x (N, Ci, H, W) with w (Co, Ci, KH, KW), plus the bias: oneDNN with the
// layouts it picks, our strided views reordered in and out.
void convolve(ExecContext& ctx, const char* op, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
              const ConvGeometry& g) {
  VINF_CHECK(ctx.cpu != nullptr, op, ": the CPU fast path needs a CpuContext");
  CpuContext& cc = *ctx.cpu;
  try {
    ConvPlan& plan = get_plan(cc, x, w, bias, y, g);
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
    VINF_FAIL(op, ": oneDNN failed for x ", x.describe(), ", w ", w.describe(), ": ", e.what());
  }
}

// dst += src, both oneDNN memory descriptors (layouts may differ): a reorder with a sum post-op.
dnnl::reorder adding_reorder(CpuContext& cc, const memory::desc& src, const memory::desc& dst) {
  dnnl::post_ops sum;
  sum.append_sum(1.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(sum);
  return dnnl::reorder(dnnl::reorder::primitive_desc(cc.engine(), src, cc.engine(), dst, attr));
}

ConvBackwardPlan& get_backward_plan(CpuContext& cc, const Tensor& x, const Tensor& w, const Tensor& dy,
                                    const Tensor* dx, const Tensor* dw, bool bias, const ConvGeometry& g) {
  auto& plans = cc.conv_backward_plans();
  const std::string key = x.describe() + "|" + w.describe() + "|" + dy.describe() + "|" +
                          (dx ? dx->describe() : "-") + "|" + (dw ? dw->describe() : "-") + (bias ? "|b" : "|-") +
                          geometry_key(g);
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  auto plan = std::make_unique<ConvBackwardPlan>();
  plan->user_x = strided_desc(x);
  plan->user_w = strided_desc(w);
  plan->user_dy = strided_desc(dy);
  const memory::dims src_dims(x.shape.begin(), x.shape.end()), wei_dims(w.shape.begin(), w.shape.end()),
      dst_dims(dy.shape.begin(), dy.shape.end());
  const auto any = memory::format_tag::any;
  const auto f32 = memory::data_type::f32;
  const memory::desc src_any(src_dims, f32, any), wei_any(wei_dims, f32, any), dst_any(dst_dims, f32, any);
  const memory::dims strides{g.stride, g.stride}, pad{g.pad_h, g.pad_w};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  plan->hint = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any, strides,
                                      pad, pad),
      cc.engine());
  if (dx) {
    plan->user_dx = strided_desc(*dx);
    plan->data_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algo, src_any, wei_any, dst_any, strides, pad, pad), attr, cc.engine(),
        plan->hint);
    plan->data = dnnl::convolution_backward_data(plan->data_pd);
    plan->add_dx = adding_reorder(cc, plan->data_pd.diff_src_desc(), plan->user_dx);
  }
  if (dw || bias) {
    plan->bias_md = memory::desc({w.size(0)}, f32, memory::format_tag::a);
    const auto d = bias ? dnnl::convolution_backward_weights::desc(algo, src_any, wei_any, plan->bias_md, dst_any,
                                                                   strides, pad, pad)
                        : dnnl::convolution_backward_weights::desc(algo, src_any, wei_any, dst_any, strides, pad, pad);
    plan->weights_pd = dnnl::convolution_backward_weights::primitive_desc(d, attr, cc.engine(), plan->hint);
    plan->weights = dnnl::convolution_backward_weights(plan->weights_pd);
    if (dw) {
      plan->user_dw = strided_desc(*dw);
      plan->add_dw = adding_reorder(cc, plan->weights_pd.diff_weights_desc(), plan->user_dw);
    }
  }
  return *plans.emplace(key, std::move(plan)).first->second;
}

// memory of `want`'s layout over a fresh arena block.
memory scratch_memory(CpuContext& cc, Arena& arena, const memory::desc& want, Allocation& hold) {
  hold = arena.allocate(want.get_size());
  return memory(want, cc.engine(), hold.data());
}

}  // namespace

void conv_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h,
                   int pad_w, const Tensor* dx, const Tensor* dw, const Tensor* db) {
  VINF_CHECK(ctx.cpu != nullptr, "conv_backward: the CPU fast path needs a CpuContext");
  if (!dx && !dw && !db) return;
  CpuContext& cc = *ctx.cpu;
  Arena& arena = *ctx.arena;
  try {
    ConvBackwardPlan& plan = get_backward_plan(cc, x, w, dy, dx, dw, db != nullptr, {stride, pad_h, pad_w});
    if (dx) {
      Allocation hdy, hw, hdx, hscratch;
      memory ddst = staged(cc, arena, plan.data_pd.diff_dst_desc(), plan.user_dy, dy.data, true, hdy);
      memory wei = staged(cc, arena, plan.data_pd.weights_desc(), plan.user_w, w.data, true, hw);
      memory dsrc = scratch_memory(cc, arena, plan.data_pd.diff_src_desc(), hdx);
      memory scratch = scratch_memory(cc, arena, plan.data_pd.scratchpad_desc(), hscratch);
      plan.data.execute(cc.stream(), {{DNNL_ARG_DIFF_DST, ddst},
                                      {DNNL_ARG_WEIGHTS, wei},
                                      {DNNL_ARG_DIFF_SRC, dsrc},
                                      {DNNL_ARG_SCRATCHPAD, scratch}});
      memory user_dx(plan.user_dx, cc.engine(), dx->data);
      plan.add_dx.execute(cc.stream(), dsrc, user_dx);
      cc.stream().wait();
    }
    if (dw || db) {
      Allocation hx, hdy, hdw, hdb, hscratch;
      memory src = staged(cc, arena, plan.weights_pd.src_desc(), plan.user_x, x.data, true, hx);
      memory ddst = staged(cc, arena, plan.weights_pd.diff_dst_desc(), plan.user_dy, dy.data, true, hdy);
      memory dwei = scratch_memory(cc, arena, plan.weights_pd.diff_weights_desc(), hdw);
      memory scratch = scratch_memory(cc, arena, plan.weights_pd.scratchpad_desc(), hscratch);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei}, {DNNL_ARG_SCRATCHPAD, scratch}};
      memory dbias;
      if (db) {
        dbias = scratch_memory(cc, arena, plan.bias_md, hdb);
        args.emplace(DNNL_ARG_DIFF_BIAS, dbias);
      }
      plan.weights.execute(cc.stream(), args);
      if (dw) {
        memory user_dw(plan.user_dw, cc.engine(), dw->data);
        plan.add_dw.execute(cc.stream(), dwei, user_dw);
      }
      cc.stream().wait();
      if (db) {
        const float* from = static_cast<const float*>(dbias.get_data_handle());
        float* to = static_cast<float*>(db->data);
        for (std::int64_t o = 0; o < db->size(0); ++o) to[o * db->stride(0)] += from[o];
      }
    }
  } catch (const dnnl::error& e) {
    VINF_FAIL("conv_backward: oneDNN failed for x ", x.describe(), ", w ", w.describe(), ", dy ", dy.describe(), ": ",
              e.what());
  }
}

void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const exec::Conv2dParams& p) {
  convolve(ctx, "conv2d", x, w, bias, y, {p.stride, p.padding, p.padding});
}

// A temporal convolution is a 2-D one with a (kt, 1) kernel over (frames, pixels): oneDNN's
// convolution, which on the narrow model ran 3-4% faster per UNet call than the GEMM per output
// frame it replaces (perf/RESULTS.md), and packs the weights itself.
void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  convolve(ctx, "temporal_conv", x, w.unsqueeze(3), bias, y, {1, pad, 0});
}

}  // namespace fast
}  // namespace vinf::cpu
