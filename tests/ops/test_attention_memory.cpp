// The banded attention must not need memory that grows with rows x keys: its workspace is fixed,
// and the whole call (workspace included) stays far below one dense score matrix.
#include <doctest/doctest.h>

#include <vector>

#include "../support.hpp"
#include "ops/attention.hpp"
#include "ops/random.hpp"

using namespace vinf;

namespace {

struct Run {
  std::size_t asked = 0;       // what attention_workspace_bytes says
  std::size_t arena_peak = 0;  // what the call took from the arena
};

// Video-Infinity shape: each rank holds `frames` frames, p = 8 halo frames each side, G = 16.
Run run_clip(std::int64_t frames) {
  Runtime rt(Device::cpu(), CpuImpl::fast);
  const std::int64_t B = 4, H = 2, D = 32, p = 8, G = 16, Lk = frames + 2 * p;
  std::vector<float> q(static_cast<std::size_t>(B * H * frames * D)), k(static_cast<std::size_t>(B * H * Lk * D)),
      v(k.size()), kg(static_cast<std::size_t>(B * H * G * D)), vg(kg.size()), out(q.size());
  auto wrap = [](std::vector<float>& d, std::int64_t l) {
    return Tensor::wrap(d.data(), DType::f32, Device::cpu(), {4, 2, l, 32});
  };
  for (auto* buf : {&q, &k, &v, &kg, &vg}) {
    const std::int64_t n = static_cast<std::int64_t>(buf->size());
    ops::normal(rt.ctx(), Tensor::wrap(buf->data(), DType::f32, Device::cpu(), {n}), 5, 0, 0);
  }
  ops::AttentionParams prm;
  prm.scale = 0.2f;
  prm.band_lo = 0;
  prm.band_hi = 2 * p;
  prm.global_bias = 10.f;
  const Tensor tq = wrap(q, frames), tk = wrap(k, Lk), tv = wrap(v, Lk), tkg = wrap(kg, G), tvg = wrap(vg, G),
               to = wrap(out, frames);
  Run r;
  r.asked = ops::attention_workspace_bytes(rt.ctx(), tq, tv);
  rt.arena().reset_peak();
  ops::attention(rt.ctx(), tq, tk, tv, &tkg, &tvg, to, prm);
  r.arena_peak = rt.arena().stats().peak_in_use;
  return r;
}

}  // namespace

TEST_CASE("banded attention workspace does not grow with the clip length") {
  const Run small = run_clip(24), large = run_clip(2400);
  CHECK(small.asked > 0);
  // At most linear in the clip; in fact the same.
  CHECK(large.asked <= small.asked * 100);
  CHECK(large.asked == small.asked);
  // The call takes what it asked for, no more.
  CHECK(small.arena_peak <= Arena::round_size(small.asked));
  CHECK(large.arena_peak <= Arena::round_size(large.asked));
  // A dense score matrix of one (batch, head) alone would be 2400 x 2432 floats.
  const std::size_t dense_one_head = std::size_t{2400} * (2400 + 16 + 16) * sizeof(float);
  CHECK(large.arena_peak < dense_one_head / 4);
}
