// A caching allocator per device, so that a UNet step does not call malloc/cudaMalloc per op:
// freed blocks go to size-class free lists and are handed out again. On CUDA, blocks are reused in
// stream order (one arena serves one stream), which is what makes immediate reuse safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/tensor.hpp"

namespace vinf {

// Where an arena gets its memory from (host: aligned malloc; CUDA: cudaMalloc, in src/cuda).
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // throws vinf::Error when out of memory
  virtual void release(void* p) noexcept = 0;
  virtual Device device() const = 0;
};

// Host memory, labelled `device` (a CPU device: Device::cpu(), or a stand-in cpu:N of the tests).
std::unique_ptr<RawMemory> host_memory(Device device = Device::cpu());

struct ArenaStats {
  std::size_t in_use = 0;          // bytes handed out now (rounded sizes)
  std::size_t peak_in_use = 0;     // high-water mark of in_use since construction or reset_peak()
  std::size_t reserved = 0;        // bytes obtained from the system (in use + cached)
  std::size_t system_allocations = 0;  // how many times the system allocator was called
  std::size_t requests = 0;        // how many blocks were handed out
};

class Allocation;
class OwnedTensor;

class Arena {
 public:
  explicit Arena(std::unique_ptr<RawMemory> raw);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Device device() const { return device_; }
  Allocation allocate(std::size_t bytes);
  OwnedTensor empty(DType dtype, const Shape& shape);
  ArenaStats stats() const;
  void reset_peak();
  void release_cached();  // gives cached blocks back to the system

  // Size classes: multiples of 512 B up to 1 MiB, then steps of 1/8 of the power of two below.
  static std::size_t round_size(std::size_t bytes);

 private:
  friend class Allocation;
  void give_back(void* p, std::size_t bytes) noexcept;

  std::unique_ptr<RawMemory> raw_;
  Device device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // rounded size -> block
  ArenaStats stats_;
};

// A block from an Arena; returns itself to the arena when destroyed. Move-only.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Allocation&& o) noexcept { *this = std::move(o); }
  Allocation& operator=(Allocation&& o) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() { reset(); }

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  void reset() noexcept;

 private:
  friend class Arena;
  Allocation(Arena* arena, void* ptr, std::size_t bytes) : arena_(arena), ptr_(ptr), bytes_(bytes) {}
  Arena* arena_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A tensor that owns its memory. It is a Tensor (pass it wherever a view is expected); copying it
// into a plain Tensor makes a view that must not outlive it.
class OwnedTensor : public Tensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(Allocation mem, const Tensor& view) : Tensor(view), mem_(std::move(mem)) {}
  OwnedTensor(OwnedTensor&&) noexcept = default;
  OwnedTensor& operator=(OwnedTensor&&) noexcept = default;
  const Tensor& view() const { return *this; }

 private:
  Allocation mem_;
};

}  // namespace vinf
