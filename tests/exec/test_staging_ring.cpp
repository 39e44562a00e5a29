// The staging ring of small host-to-device copies (exec/staging_ring.hpp) with fences of the
// test's own: pieces handed out in order, the host waiting only for pieces still in flight that
// are in the way, oldest first.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "core/error.hpp"
#include "exec/staging_ring.hpp"

using namespace vinf;

namespace {

// A fence that passes when the test says so; wait() counts the waits and passes it.
struct TestFence {
  struct State {
    bool passed = false;
    int waits = 0;
  };
  std::shared_ptr<State> s = std::make_shared<State>();
  bool done() const { return s->passed; }
  void wait() const {
    ++s->waits;
    s->passed = true;
  }
};

}  // namespace

TEST_CASE("StagingRing: pieces in order, aligned, and the host waits only for the pieces in flight in the way") {
  exec::StagingRing<TestFence> ring(1024 + 100);  // rounded down to 4 x 256
  CHECK(ring.capacity() == 1024);
  CHECK(ring.fits(1024));
  CHECK_FALSE(ring.fits(1025));
  CHECK_FALSE(ring.fits(0));

  std::vector<TestFence> f(8);
  CHECK(ring.acquire(10) == 0);
  ring.hold(f[0]);
  CHECK(ring.acquire(300) == 256);  // rounded up to 512
  ring.hold(f[1]);
  CHECK(ring.acquire(256) == 768);
  ring.hold(f[2]);
  CHECK(ring.held() == 3);
  // Full: the next piece starts again at 0, where f[0] still holds: the host waits for it alone.
  CHECK(ring.acquire(200) == 0);
  ring.hold(f[3]);
  CHECK(f[0].s->waits == 1);
  CHECK(f[1].s->waits == 0);
  CHECK(ring.held() == 3);
  // f[1] passed on its own: no wait, and it is let go.
  f[1].s->passed = true;
  CHECK(ring.acquire(512) == 256);
  ring.hold(f[4]);
  CHECK(f[1].s->waits == 0);
  CHECK(f[2].s->waits == 0);
  CHECK(ring.held() == 3);  // f[2], f[3], f[4]
  // 300 bytes do not fit behind 768 + 256: back to 0, in the way of f[3] and f[4]. The host
  // waits oldest first, so f[2] (at 768, not in the way) first: on one stream it passes before
  // f[3] anyway.
  CHECK(ring.acquire(300) == 0);
  ring.hold(f[5]);
  CHECK(f[2].s->waits == 1);
  CHECK(f[3].s->waits == 1);
  CHECK(f[4].s->waits == 1);
  CHECK(ring.held() == 1);
  // Not in the way and not passed: held on.
  CHECK(ring.acquire(256) == 512);
  ring.hold(f[7]);
  CHECK(f[5].s->waits == 0);
  CHECK(ring.held() == 2);

  // A piece must be held before the next one; hold() needs an acquire.
  CHECK(ring.acquire(10) == 768);
  CHECK_THROWS_AS(ring.acquire(10), Error);
  ring.hold(f[6]);
  CHECK_THROWS_AS(ring.hold(f[6]), Error);
  CHECK_THROWS_AS(ring.acquire(2048), Error);

  // A piece given back unheld (its copy never queued, or already waited for) is free at once.
  exec::StagingRing<TestFence> small(512);
  CHECK(small.acquire(512) == 0);
  small.drop();
  CHECK(small.held() == 0);
  CHECK(small.acquire(256) == 0);
  small.hold(TestFence{});
}
