#include "exec/tf32.hpp"

#include <atomic>

namespace vinf {
namespace {
std::atomic<bool> tf32_allowed{false};
}  // namespace

void set_allow_tf32(bool on) { tf32_allowed.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

}  // namespace vinf
