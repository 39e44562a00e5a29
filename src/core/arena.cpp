#include "core/arena.hpp"

#include <cstdlib>
#include <new>

#include "core/error.hpp"

namespace vinf {
namespace {

class HostMemory final : public RawMemory {
 public:
  explicit HostMemory(Device device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    // 64-byte alignment serves AVX-512 loads and keeps blocks on separate cache lines.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    VINF_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  Device device() const override { return device_; }

 private:
  Device device_;
};

}  // namespace

std::unique_ptr<RawMemory> host_memory(Device device) {
  VINF_CHECK(device.is_cpu(), "host_memory: ", device.name(), " is not a CPU device");
  return std::make_unique<HostMemory>(device);
}

Arena::Arena(std::unique_ptr<RawMemory> raw) : raw_(std::move(raw)), device_(raw_->device()) {}

Arena::~Arena() {
  // Allocations that outlive their arena are a bug; their memory is reclaimed with the cache.
  release_cached();
}

std::size_t Arena::round_size(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr std::size_t kSmall = 512, kLarge = std::size_t{1} << 20;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  std::size_t pow2 = kLarge;
  while (pow2 * 2 <= bytes) pow2 *= 2;
  const std::size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

Allocation Arena::allocate(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  void* p = nullptr;
  // Reuse a cached block of exactly this size class, or one at most 2x larger (bounded waste).
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    const std::size_t block = it->first;
    p = it->second;
    free_.erase(it);
    stats_.in_use += block;
    stats_.requests += 1;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return Allocation(this, p, block);
  }
  try {
    p = raw_->allocate(size);
  } catch (const Error&) {
    // Out of memory: drop the cache and try once more before failing.
    for (auto& [sz, q] : free_) {
      raw_->release(q);
      stats_.reserved -= sz;
    }
    free_.clear();
    p = raw_->allocate(size);
  }
  stats_.reserved += size;
  stats_.system_allocations += 1;
  stats_.in_use += size;
  stats_.requests += 1;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return Allocation(this, p, size);
}

OwnedTensor Arena::empty(DType dtype, const Shape& shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  Allocation mem = allocate(bytes);
  Tensor view = Tensor::wrap(mem.data(), dtype, device_, shape);
  return OwnedTensor(std::move(mem), view);
}

void Arena::give_back(void* p, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  stats_.in_use -= bytes;
  free_.emplace(bytes, p);
}

ArenaStats Arena::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Arena::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
}

void Arena::release_cached() {
  std::lock_guard lock(mutex_);
  for (auto& [size, p] : free_) {
    raw_->release(p);
    stats_.reserved -= size;
  }
  free_.clear();
}

Allocation& Allocation::operator=(Allocation&& o) noexcept {
  if (this != &o) {
    reset();
    arena_ = o.arena_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.arena_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Allocation::reset() noexcept {
  if (arena_ && ptr_) arena_->give_back(ptr_, bytes_);
  arena_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace vinf
