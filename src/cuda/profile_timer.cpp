// --profile's marks on a GPU: CUDA events recorded on the context's stream, read after the call.
#include <cuda_runtime_api.h>

#include <vector>

#include "cuda/check.hpp"
#include "cuda/context.hpp"

namespace vinf::cuda {

namespace {

class EventProfileTimer final : public ProfileTimer {
 public:
  explicit EventProfileTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventProfileTimer() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }

  std::size_t mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      VINF_CHECK_CUDA(cudaEventCreate(&e));
      events_.push_back(e);
    }
    VINF_CHECK_CUDA(cudaEventRecord(events_[used_], stream_));
    return used_++;
  }

  std::vector<double> resolve() override {
    std::vector<double> s(used_);
    if (used_ == 0) return s;
    VINF_CHECK_CUDA(cudaEventSynchronize(events_[used_ - 1]));
    for (std::size_t i = 1; i < used_; ++i) {
      float ms = 0;
      VINF_CHECK_CUDA(cudaEventElapsedTime(&ms, events_[0], events_[i]));
      s[i] = 1e-3 * ms;
    }
    return s;
  }

  void clear() override { used_ = 0; }
  const char* clock_name() const override { return "CUDA events"; }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // kept for the next call
  std::size_t used_ = 0;
};

}  // namespace

std::unique_ptr<ProfileTimer> make_event_timer(CudaContext& cc) {
  return std::make_unique<EventProfileTimer>(cc.stream());
}

}  // namespace vinf::cuda
