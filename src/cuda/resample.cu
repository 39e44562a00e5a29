// Nearest upsampling, one thread per output element.
#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

struct Plane {
  void* data;
  DType dtype;
  std::int64_t n, c, h, w;
  std::int64_t sn, sc, sh, sw;
};

Plane plane(const Tensor& t) {
  return {t.data, t.dtype, t.size(0), t.size(1), t.size(2), t.size(3), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

__global__ void upsample_kernel(Plane x, Plane y, float sh, float sw) {
  const std::int64_t total = y.n * y.c * y.h * y.w;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = i % y.w, r = (i / y.w) % y.h, c = (i / (y.w * y.h)) % y.c, n = i / (y.w * y.h * y.c);
    const std::int64_t si = imin(static_cast<std::int64_t>(floorf(static_cast<float>(r) * sh)), x.h - 1);
    const std::int64_t sj = imin(static_cast<std::int64_t>(floorf(static_cast<float>(j) * sw)), x.w - 1);
    store_f(y.data, y.dtype, n * y.sn + c * y.sc + r * y.sh + j * y.sw,
            load_f(x.data, x.dtype, n * x.sn + c * x.sc + si * x.sh + sj * x.sw));
  }
}

}  // namespace

void upsample_nearest(ExecContext& ctx, const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  const float sh = static_cast<float>(x.size(2)) / static_cast<float>(y.size(2));
  const float sw = static_cast<float>(x.size(3)) / static_cast<float>(y.size(3));
  upsample_kernel<<<grid_for(y.numel()), kThreads, 0, stream_of(ctx)>>>(plane(x), plane(y), sh, sw);
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
