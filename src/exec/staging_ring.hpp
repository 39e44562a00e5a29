// Space in a fixed buffer for transfers that the device reads later (small host-to-device copies
// through page-locked memory): handed out in order around the ring, each piece held until the
// fence recorded after its transfer has passed. The host waits only when the ring has come round
// to a piece still in flight. The logic is here, without CUDA, so that the CPU tests check it with
// fences of their own; cuda::CudaContext uses it with events.
#pragma once

#include <cstddef>
#include <deque>

#include "core/error.hpp"

namespace vinf::exec {

// Fence: movable, with bool done() (never blocks) and void wait() (blocks until done).
template <class Fence>
class StagingRing {
 public:
  static constexpr std::size_t kAlign = 256;

  explicit StagingRing(std::size_t capacity) : capacity_(capacity / kAlign * kAlign) {}
  std::size_t capacity() const { return capacity_; }
  // Whether n bytes can ever be handed out (larger transfers go another way).
  bool fits(std::size_t n) const { return round_up(n) <= capacity_ && n > 0; }

  // The offset of n bytes that no transfer in flight still holds; waits for the oldest ones
  // while they overlap. Then hold() must follow, before the next acquire.
  std::size_t acquire(std::size_t n) {
    VINF_CHECK(fits(n) && !pending_, "staging ring: cannot hand out ", n, " bytes of ", capacity_);
    const std::size_t size = round_up(n);
    if (head_ + size > capacity_) head_ = 0;  // the tail is too short: start again at the front
    const std::size_t begin = head_, end = head_ + size;
    while (!held_.empty() && held_.front().fence.done()) held_.pop_front();
    // Pieces are held oldest first and their fences (on one stream) pass in that order: waiting
    // from the front frees every piece that is in the way, and a piece before one in the way costs
    // no wait of its own.
    while (overlaps(begin, end)) {
      held_.front().fence.wait();
      held_.pop_front();
    }
    head_ = end;
    pending_ = true;
    last_ = {begin, end};
    return begin;
  }
  // Holds the bytes acquired last until `fence` has passed.
  void hold(Fence fence) {
    VINF_CHECK(pending_, "staging ring: hold() without acquire()");
    pending_ = false;
    held_.push_back({last_.begin, last_.end, std::move(fence)});
  }
  // Gives back the bytes acquired last without holding them: only when nothing will read them.
  void drop() { pending_ = false; }
  // Pieces still held (for the tests).
  std::size_t held() const { return held_.size(); }

 private:
  struct Span {
    std::size_t begin = 0, end = 0;
  };
  struct Held {
    std::size_t begin, end;
    Fence fence;
  };
  static std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  bool overlaps(std::size_t begin, std::size_t end) const {
    for (const Held& h : held_)
      if (h.begin < end && begin < h.end) return true;
    return false;
  }
  std::size_t capacity_, head_ = 0;
  bool pending_ = false;
  Span last_;
  std::deque<Held> held_;
};

}  // namespace vinf::exec
