#include <doctest/doctest.h>

#include <vector>

#include "core/arena.hpp"

using namespace vinf;

TEST_CASE("arena size classes") {
  CHECK(Arena::round_size(1) == 512);
  CHECK(Arena::round_size(512) == 512);
  CHECK(Arena::round_size(513) == 1024);
  CHECK(Arena::round_size((1 << 20) + 1) == (1 << 20) + (1 << 17));
  CHECK(Arena::round_size(3 << 20) == 3 << 20);
}

TEST_CASE("a repeated allocation pattern reaches the system allocator only in its first round") {
  Arena arena(host_memory());
  auto one_step = [&] {
    // Like a UNet step: activations of several sizes, freed in a different order.
    std::vector<OwnedTensor> live;
    for (std::int64_t c : {320, 640, 1280, 320, 77, 5})
      live.push_back(arena.empty(DType::f32, {2, c, 40, 64}));
    live.erase(live.begin() + 1);
    live.push_back(arena.empty(DType::f16, {48, 320}));
  };
  one_step();
  const ArenaStats first = arena.stats();
  for (int i = 0; i < 5; ++i) one_step();
  const ArenaStats later = arena.stats();
  CHECK(first.system_allocations == 7);
  CHECK(later.system_allocations == first.system_allocations);
  CHECK(later.requests == 6 * first.requests);
  CHECK(later.in_use == 0);
  CHECK(later.peak_in_use == first.peak_in_use);
  CHECK(later.reserved == first.reserved);
  arena.release_cached();
  CHECK(arena.stats().reserved == 0);
}

TEST_CASE("owned tensors return their memory when they go, also after a move") {
  Arena arena(host_memory());
  {
    OwnedTensor a = arena.empty(DType::f32, {1000});
    CHECK(arena.stats().in_use == Arena::round_size(4000));
    OwnedTensor b = std::move(a);
    CHECK(b.numel() == 1000);
    CHECK(arena.stats().in_use == Arena::round_size(4000));
    static_cast<float*>(b.data)[999] = 1.f;  // usable
  }
  CHECK(arena.stats().in_use == 0);
  arena.reset_peak();
  CHECK(arena.stats().peak_in_use == 0);
}
