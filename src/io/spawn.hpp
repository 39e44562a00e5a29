// posix_spawn attributes for the helper programs vinf starts (ffmpeg, ffprobe): the child begins
// with no signal blocked. vinf's own threads block SIGTERM and SIGUSR1 (pipeline/stop_signals.hpp); a
// signal mask survives exec, and a child that inherited it would not end on a job's SIGTERM.
#pragma once

#include <signal.h>
#include <spawn.h>

namespace vinf::io {

class SpawnAttributes {
 public:
  SpawnAttributes() {
    posix_spawnattr_init(&attr_);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETSIGMASK);
  }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attr_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  const posix_spawnattr_t* get() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

}  // namespace vinf::io
