// Host memory for the transports that move bytes through the host (MPI and the in-process
// threads): device tensors are staged through host buffers, host tensors are used in place.
// Internal to the communicators.
#pragma once

#include <memory>
#include <mutex>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::mpi {

// Host buffers for the images of device tensors: page-locked memory where the CUDA runtime gives
// it (the copies then run at the link's full speed), cached like any arena; plain host memory,
// with one warning, where pinning fails (a locked-memory limit, or a build without CUDA).
class Staging {
 public:
  Allocation allocate(std::size_t bytes);

 private:
  std::mutex m_;
  std::unique_ptr<Arena> pinned_, pageable_;
  bool fallback_ = false;
};

// A host image of a tensor: the tensor itself when it is in host memory, else a staged copy.
class HostImage {
 public:
  // load: copy the tensor's data into the image (what is sent); without it the image starts
  // undefined (what is received).
  HostImage(ExecContext& ctx, Staging& staging, const Tensor& t, bool load);
  char* data() const { return ptr_; }
  Tensor host() const { return Tensor::wrap(ptr_, t_.dtype, Device::cpu(), t_.shape); }
  // Writes the image back to the tensor (device tensors only) and, unless told otherwise, waits
  // for the copy: from page-locked memory it is asynchronous, and the buffer must not go back to
  // the cache before it is done (a caller that stores several images waits once, after the last).
  void store(bool wait = true);

 private:
  ExecContext& ctx_;
  Tensor t_;
  Allocation buf_;
  char* ptr_ = nullptr;
};

}  // namespace vinf::mpi
