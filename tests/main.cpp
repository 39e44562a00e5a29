// The unit tests' main: doctest's, after sizing the CPU thread pool to the cores no other program
// is using. The cases run on small shapes, whose parallel loops are short: a pool thread whose core
// another program holds makes every loop wait for its share of that core (3x slower overall with
// one busy program beside it on 2 cores), while one thread fewer costs at most its share of the work.
// OMP_NUM_THREADS, when given, is used as it is.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "ops/runtime.hpp"

namespace {

// Threads of other programs ready to run now: /proc/loadavg's runnable count less this thread,
// the least of a few looks a millisecond apart (a program starting or ending is not a busy one).
// -1 where it cannot be read.
int busy_elsewhere() {
  int least = -1;
  for (int look = 0; look < 5; ++look) {
    std::ifstream in("/proc/loadavg");
    double l1 = 0, l5 = 0, l15 = 0;
    int running = 0;
    char slash = 0;
    if (!(in >> l1 >> l5 >> l15 >> running >> slash) || slash != '/') return -1;
    least = least < 0 ? running - 1 : std::min(least, running - 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::max(least, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int all = vinf::cpu_threads(), busy = busy_elsewhere();
    const int threads = busy < 0 ? all : std::max(1, std::min(all, all - busy));
    if (threads < all) {
      std::fprintf(stderr, "vinf_unit_tests: %d CPU thread(s) of %d: %d other thread(s) were running at the start\n",
                   threads, all, busy);
      vinf::set_cpu_threads(threads);
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
