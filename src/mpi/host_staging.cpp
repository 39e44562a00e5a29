#include "mpi/host_staging.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::mpi {

Allocation Staging::allocate(std::size_t bytes) {
  std::lock_guard lock(m_);
  if (!pinned_ && !fallback_) {
    std::unique_ptr<RawMemory> raw = pinned_host_memory();
    if (raw) pinned_ = std::make_unique<Arena>(std::move(raw));
    else fallback_ = true;
  }
  if (pinned_ && !fallback_) {
    try {
      return pinned_->allocate(bytes);
    } catch (const Error& e) {
      std::fprintf(stderr,
                   "vinf: warning: %s; the MPI transport stages device buffers through pageable memory instead "
                   "(slower copies; raise 'ulimit -l' to pin)\n",
                   e.what());
      fallback_ = true;
    }
  }
  if (!pageable_) pageable_ = std::make_unique<Arena>(host_memory());
  return pageable_->allocate(bytes);
}

HostImage::HostImage(ExecContext& ctx, Staging& staging, const Tensor& t, bool load) : ctx_(ctx), t_(t) {
  if (!t.device.is_cuda()) {
    ptr_ = static_cast<char*>(t.data);
    return;
  }
  buf_ = staging.allocate(t.nbytes());
  ptr_ = static_cast<char*>(buf_.data());
  if (load) ops::copy(ctx, t, host());  // a device-to-host copy returns with the data in place
}

void HostImage::store(bool wait) {
  if (!t_.device.is_cuda()) return;
  ops::copy(ctx_, host(), t_);
  if (wait) synchronize(ctx_);
}

}  // namespace vinf::mpi
