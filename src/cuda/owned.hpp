// Owned<Handle, Destroy>: one handle of a C library (a cuDNN descriptor, a cuBLAS or cuDNN handle,
// a CUDA stream) and the function that frees it, so that an object built from several of them
// frees the ones already made when a later create or set call throws halfway. Filled through
// put(): `VINF_CHECK_CUDNN(cudnnCreateTensorDescriptor(d.put()))`. Header-only and free of CUDA
// types, so its unit test runs in every build.
#pragma once

#include <utility>

namespace vinf::cuda {

template <class Handle, auto Destroy>
class Owned {
 public:
  Owned() = default;
  explicit Owned(Handle h) noexcept : h_(h) {}
  ~Owned() { reset(); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, Handle{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) reset(std::exchange(o.h_, Handle{}));
    return *this;
  }

  Handle get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != Handle{}; }

  // Frees the current handle (if any) and returns where a create function writes the new one.
  // A create call that fails leaves the null handle there, which is never destroyed.
  Handle* put() noexcept {
    reset();
    return &h_;
  }

  // Gives the handle up without freeing it.
  Handle release() noexcept { return std::exchange(h_, Handle{}); }

  // Frees the current handle (a destroy status is ignored: there is nothing left to do about it
  // while tearing down) and takes `h`.
  void reset(Handle h = Handle{}) noexcept {
    if (h_ != Handle{}) (void)Destroy(h_);
    h_ = h;
  }

 private:
  Handle h_{};
};

}  // namespace vinf::cuda
