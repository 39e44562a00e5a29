// Internal to src/ops: how an op reaches its CPU or CUDA implementation.
#pragma once

#include <initializer_list>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "cpu/cpu.hpp"
#include "ops/context.hpp"

#if VINF_WITH_CUDA
#include "cuda/ops.hpp"
#define VINF_ON_CUDA(call) call
#else
#define VINF_ON_CUDA(call) \
  VINF_FAIL(__func__, ": this vinf was built without CUDA (configure with -DVINF_WITH_CUDA=ON on a machine with nvcc)")
#endif

namespace vinf::ops::detail {

inline bool reference(const ExecContext& ctx) { return ctx.cpu_impl == CpuImpl::reference; }

// The CPU path computes in f32; CUDA also takes f16 and bf16.
inline void check_compute_dtype(const ExecContext& ctx, const char* op, const char* arg, const Tensor& t) {
  if (ctx.device.is_cpu()) check_dtype(op, arg, t, DType::f32);
  else check_float(op, arg, t);
}

// The weights of a matrix product or convolution: the compute dtype, or on the CPU also bf16
// beside f32 activations (--dtype bf16 there), where the CPU multiplies bf16.
inline void check_weights(const ExecContext& ctx, const char* op, const Tensor& w) {
  check_on_device(ctx, op, "w", w);
  if (ctx.device.is_cpu() && w.dtype == DType::bf16) {
    VINF_CHECK(cpu::bf16_supported(), op, ": bf16 weights on the CPU need AVX-512 BF16, which this CPU lacks");
    return;
  }
  check_compute_dtype(ctx, op, "w", w);
}

// A product's input x (or, with `out`, its result): the compute dtype, or on the CPU also bf16
// where the weights w are bf16 (an activation stored rounded for the product).
inline void check_product_operand(const ExecContext& ctx, const char* op, const char* arg, const Tensor& x,
                                  const Tensor& w) {
  check_on_device(ctx, op, arg, x);
  if (ctx.device.is_cpu() && w.dtype == DType::bf16 && x.dtype == DType::bf16) return;
  check_compute_dtype(ctx, op, arg, x);
}

// What the CPU references compute with: bf16 weights (or activations) widened to f32 (held in
// `hold`), else w.
inline Tensor widened_weights(ExecContext& ctx, const Tensor& w, OwnedTensor& hold) {
  if (w.dtype != DType::bf16 || !ctx.device.is_cpu()) return w;
  hold = ctx.arena->empty(DType::f32, w.shape);
  cpu::ref::copy(w, hold);
  return hold;
}

// Every tensor is on the context's device and of a dtype the backend computes in.
inline void check_operands(const ExecContext& ctx, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    check_on_device(ctx, op, "argument", *t);
    check_compute_dtype(ctx, op, "argument", *t);
  }
}

}  // namespace vinf::ops::detail
