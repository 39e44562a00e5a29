#include "exec/host_copy.hpp"

#include <cstring>

#include "core/error.hpp"
#include "exec/loops.hpp"

namespace vinf::exec {
namespace {

// Elements are moved as unsigned integers of their size: no value is interpreted.
template <class T>
void copy_elements(const Tensor& src, const Tensor& dst) {
  const auto l = joint_layout<2>({&src, &dst});
  const T* s = static_cast<const T*>(src.data);
  T* d = static_cast<T*>(dst.data);
  if (l.rank == 1 && l.stride[0][0] == 1 && l.stride[1][0] == 1) {
    parallel_chunks(l.size[0], [&](std::int64_t b, std::int64_t e) {
      std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b) * sizeof(T));
    });
    return;
  }
  for_each_row<2>(l, [&](const std::array<std::int64_t, 2>& base, std::int64_t n, const std::array<std::int64_t, 2>& st) {
    const T* sp = s + base[0];
    T* dp = d + base[1];
    for (std::int64_t i = 0; i < n; ++i) dp[i * st[1]] = sp[i * st[0]];
  });
}

}  // namespace

void copy_host(const Tensor& src, const Tensor& dst) {
  VINF_CHECK(src.device.is_cpu() && dst.device.is_cpu() && src.dtype == dst.dtype && src.shape == dst.shape,
             "copy_host: ", src.describe(), " -> ", dst.describe(), " is not a copy between same host views");
  if (dst.numel() == 0) return;
  switch (dtype_size(src.dtype)) {
    case 2: copy_elements<std::uint16_t>(src, dst); break;
    case 4: copy_elements<std::uint32_t>(src, dst); break;
    default: copy_elements<std::uint64_t>(src, dst); break;
  }
}

}  // namespace vinf::exec
