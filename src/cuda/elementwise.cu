// Copies (with casts and host<->device staging), fills and pointwise kernels.
#include <cstring>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/ops.hpp"
#include "exec/activation_math.hpp"
#include "exec/host_copy.hpp"

namespace vinf::cuda {
namespace {

template <class T>
__global__ void copy_same_kernel(const T* src, Strided ss, T* dst, Strided ds, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[ds.offset(i)] = src[ss.offset(i)];
}

__global__ void copy_cast_kernel(const void* src, DType st, Strided ss, void* dst, DType dt, Strided ds,
                                 std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store_d(dst, dt, ds.offset(i), load_d(src, st, ss.offset(i)));
}

__global__ void fill_kernel(void* dst, DType dt, Strided ds, std::int64_t n, double value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store_d(dst, dt, ds.offset(i), value);
}

// The same three with 32-bit indices (VINF_GPU_KERNELS=index32; exec/index32.hpp).
template <class T>
__global__ void copy_same_kernel32(const T* src, T* dst, exec::Index32<2> ix) {
  for (std::uint32_t i = thread_index32(); i < ix.count; i += grid_step32()) {
    std::uint32_t off[2];
    ix.offsets(i, off);
    dst[off[1]] = src[off[0]];
  }
}

__global__ void copy_cast_kernel32(const void* src, DType st, void* dst, DType dt, exec::Index32<2> ix) {
  for (std::uint32_t i = thread_index32(); i < ix.count; i += grid_step32()) {
    std::uint32_t off[2];
    ix.offsets(i, off);
    store_d(dst, dt, off[1], load_d(src, st, off[0]));
  }
}

__global__ void fill_kernel32(void* dst, DType dt, exec::Index32<1> ix, double value) {
  for (std::uint32_t i = thread_index32(); i < ix.count; i += grid_step32()) {
    std::uint32_t off[1];
    ix.offsets(i, off);
    store_d(dst, dt, off[0], value);
  }
}

enum class Pointwise { axpby, mul, silu, gelu, quick_gelu, gelu_tanh, geglu };

__device__ __forceinline__ float pointwise_value(Pointwise op, float alpha, float beta, float x, float y) {
  switch (op) {
    case Pointwise::axpby: return beta == 0.f ? alpha * x : alpha * x + beta * y;
    case Pointwise::mul: return x * y;
    case Pointwise::silu: return exec::silu(x);
    case Pointwise::gelu: return exec::gelu(x);
    case Pointwise::quick_gelu: return exec::quick_gelu(x);
    case Pointwise::gelu_tanh: return exec::gelu_tanh(x);
    default: return x * exec::gelu(y);  // geglu: a = value, b = gate
  }
}

// Whether the op reads b (the 64-bit kernel reads it only then, too).
__device__ __forceinline__ bool reads_b(Pointwise op, float beta) {
  return (op == Pointwise::axpby && beta != 0.f) || op == Pointwise::mul || op == Pointwise::geglu;
}

__global__ void pointwise_kernel32(Pointwise op, float alpha, float beta, const void* a, DType at, const void* b,
                                   DType bt, void* out, DType ot, exec::Index32<3> ix) {
  for (std::uint32_t i = thread_index32(); i < ix.count; i += grid_step32()) {
    std::uint32_t off[3];
    ix.offsets(i, off);
    const float x = load_f(a, at, off[0]);
    const float y = reads_b(op, beta) ? load_f(b, bt, off[1]) : 0.f;
    store_f(out, ot, off[2], pointwise_value(op, alpha, beta, x, y));
  }
}

__global__ void pointwise_kernel(Pointwise op, float alpha, float beta, const void* a, DType at, Strided as,
                                 const void* b, DType bt, Strided bs, void* out, DType ot, Strided os, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = load_f(a, at, as.offset(i));
    float r;
    switch (op) {
      case Pointwise::axpby: r = beta == 0.f ? alpha * x : alpha * x + beta * load_f(b, bt, bs.offset(i)); break;
      case Pointwise::mul: r = x * load_f(b, bt, bs.offset(i)); break;
      case Pointwise::silu: r = exec::silu(x); break;
      case Pointwise::gelu: r = exec::gelu(x); break;
      case Pointwise::quick_gelu: r = exec::quick_gelu(x); break;
      case Pointwise::gelu_tanh: r = exec::gelu_tanh(x); break;
      default: r = x * exec::gelu(load_f(b, bt, bs.offset(i))); break;  // geglu: a = value, b = gate
    }
    store_f(out, ot, os.offset(i), r);
  }
}

void launch_pointwise(ExecContext& ctx, Pointwise op, float alpha, float beta, const Tensor& a, const Tensor& b,
                      const Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  exec::Index32<3> ix;
  if (joint_index32<3>(ctx, {&a, &b, &out}, ix)) {
    pointwise_kernel32<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(op, alpha, beta, a.data, a.dtype, b.data, b.dtype,
                                                                     out.data, out.dtype, ix);
    VINF_CHECK_LAUNCH();
    return;
  }
  const auto s = joint_strided<3>({&a, &b, &out});
  pointwise_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(op, alpha, beta, a.data, a.dtype, s[0], b.data,
                                                                 b.dtype, s[1], out.data, out.dtype, s[2], n);
  VINF_CHECK_LAUNCH();
}

// A device-to-device copy of same-shaped views on the context's device.
void copy_on_device(ExecContext& ctx, const Tensor& src, const Tensor& dst) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  const auto s = joint_strided<2>({&src, &dst});
  if (src.dtype == dst.dtype && s[0].rank == 1 && s[0].stride[0] == 1 && s[1].stride[0] == 1) {
    VINF_CHECK_CUDA(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  const unsigned grid = grid_for(n);
  exec::Index32<2> ix;
  if (joint_index32<2>(ctx, {&src, &dst}, ix)) {
    if (src.dtype != dst.dtype)
      copy_cast_kernel32<<<grid, kThreads, 0, stream_of(ctx)>>>(src.data, src.dtype, dst.data, dst.dtype, ix);
    else if (dtype_size(src.dtype) == 2)
      copy_same_kernel32<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint16_t*>(src.data),
                                                                static_cast<std::uint16_t*>(dst.data), ix);
    else if (dtype_size(src.dtype) == 4)
      copy_same_kernel32<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint32_t*>(src.data),
                                                                static_cast<std::uint32_t*>(dst.data), ix);
    else
      copy_same_kernel32<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint64_t*>(src.data),
                                                                static_cast<std::uint64_t*>(dst.data), ix);
    VINF_CHECK_LAUNCH();
    return;
  }
  if (src.dtype == dst.dtype) {
    switch (dtype_size(src.dtype)) {
      case 2:
        copy_same_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint16_t*>(src.data), s[0],
                                                                static_cast<std::uint16_t*>(dst.data), s[1], n);
        break;
      case 4:
        copy_same_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint32_t*>(src.data), s[0],
                                                                static_cast<std::uint32_t*>(dst.data), s[1], n);
        break;
      default:
        copy_same_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(static_cast<const std::uint64_t*>(src.data), s[0],
                                                                static_cast<std::uint64_t*>(dst.data), s[1], n);
    }
  } else {
    copy_cast_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(src.data, src.dtype, s[0], dst.data, dst.dtype, s[1], n);
  }
  VINF_CHECK_LAUNCH();
}

}  // namespace

void copy(ExecContext& ctx, const Tensor& src, const Tensor& dst) {
  const bool src_dev = src.device.is_cuda(), dst_dev = dst.device.is_cuda();
  VINF_CHECK(!src_dev || src.device == ctx.device, "copy: source ", src.describe(), " is not on ", ctx.device.name());
  VINF_CHECK(!dst_dev || dst.device == ctx.device, "copy: destination ", dst.describe(), " is not on ",
             ctx.device.name());
  if (src_dev && dst_dev) {
    copy_on_device(ctx, src, dst);
    return;
  }
  if (dst.numel() == 0) return;
  if (!src_dev) {
    // Host -> device: a contiguous host image in the source dtype, one transfer, then a device
    // copy into the destination view (cast and strides) unless the transfer already landed there.
    std::vector<char> host;
    const void* image = src.data;
    const bool cast = !(dst.dtype == src.dtype && dst.is_contiguous());
    OwnedTensor staged = cast ? ctx.arena->empty(src.dtype, src.shape) : OwnedTensor{};
    // With staged-uploads, a small source goes through the context's page-locked ring: the copy
    // from there is queued and the host goes on (from pageable memory the driver may make the host
    // wait). The piece is held until the copy has passed (CudaContext::staged).
    void* pinned = gpu_kernel_enabled(ctx, GpuKernel::staged_uploads) ? ctx.cuda->stage(src.nbytes()) : nullptr;
    struct Held {  // staged() on every way out once stage() gave space, failures included
      CudaContext* c;
      ~Held() {
        if (c) c->staged();
      }
    } held{pinned ? ctx.cuda : nullptr};
    if (pinned) {
      exec::copy_host(src, Tensor::wrap(pinned, src.dtype, Device::cpu(), src.shape));
      image = pinned;
    } else if (!src.is_contiguous()) {
      host.resize(src.nbytes());
      exec::copy_host(src, Tensor::wrap(host.data(), src.dtype, Device::cpu(), src.shape));
      image = host.data();
    }
    // From pageable memory the driver waits for the stream before it copies: a host synchronisation.
    if (!pinned) count_host_sync();
    if (!cast) {
      VINF_CHECK_CUDA(cudaMemcpyAsync(dst.data, image, dst.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
      return;
    }
    VINF_CHECK_CUDA(cudaMemcpyAsync(staged.data, image, staged.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
    copy_on_device(ctx, staged, dst);
    return;
  }
  // Device -> host: cast and compact on the device into the destination dtype, one transfer,
  // then a host copy into the destination view if it is strided. Waits for the data.
  OwnedTensor staged;
  Tensor compact = src;
  if (src.dtype != dst.dtype || !src.is_contiguous()) {
    staged = ctx.arena->empty(dst.dtype, src.shape);
    copy_on_device(ctx, src, staged);
    compact = staged;
  }
  if (dst.is_contiguous()) {
    VINF_CHECK_CUDA(cudaMemcpyAsync(dst.data, compact.data, dst.nbytes(), cudaMemcpyDeviceToHost, stream_of(ctx)));
    count_host_sync();
    VINF_CHECK_CUDA(cudaStreamSynchronize(stream_of(ctx)));
    return;
  }
  std::vector<char> host(dst.nbytes());
  VINF_CHECK_CUDA(cudaMemcpyAsync(host.data(), compact.data, host.size(), cudaMemcpyDeviceToHost, stream_of(ctx)));
  count_host_sync();
  VINF_CHECK_CUDA(cudaStreamSynchronize(stream_of(ctx)));
  exec::copy_host(Tensor::wrap(host.data(), dst.dtype, Device::cpu(), dst.shape), dst);
}

void fill(ExecContext& ctx, const Tensor& dst, double value) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  exec::Index32<1> ix;
  if (joint_index32<1>(ctx, {&dst}, ix)) {
    fill_kernel32<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dst.data, dst.dtype, ix, value);
    VINF_CHECK_LAUNCH();
    return;
  }
  const auto s = joint_strided<1>({&dst});
  fill_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dst.data, dst.dtype, s[0], n, value);
  VINF_CHECK_LAUNCH();
}

void axpby(ExecContext& ctx, float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out) {
  launch_pointwise(ctx, Pointwise::axpby, alpha, beta, a, b, out);
}

void mul(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_pointwise(ctx, Pointwise::mul, 1.f, 0.f, a, b, out);
}

void activation(ExecContext& ctx, exec::Activation act, const Tensor& x, const Tensor& out) {
  switch (act) {
    case exec::Activation::none: copy_on_device(ctx, x, out); return;
    case exec::Activation::silu: launch_pointwise(ctx, Pointwise::silu, 1.f, 0.f, x, x, out); return;
    case exec::Activation::gelu: launch_pointwise(ctx, Pointwise::gelu, 1.f, 0.f, x, x, out); return;
    case exec::Activation::quick_gelu: launch_pointwise(ctx, Pointwise::quick_gelu, 1.f, 0.f, x, x, out); return;
    case exec::Activation::gelu_tanh: launch_pointwise(ctx, Pointwise::gelu_tanh, 1.f, 0.f, x, x, out); return;
  }
}

void geglu(ExecContext& ctx, const Tensor& x, const Tensor& out) {
  const int last = out.rank() - 1;
  const std::int64_t d = out.size(last);
  launch_pointwise(ctx, Pointwise::geglu, 1.f, 0.f, x.slice(last, 0, d), x.slice(last, d, d), out);
}

}  // namespace vinf::cuda
