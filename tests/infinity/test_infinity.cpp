// Video-Infinity's pieces in one process, over the thread transport: collectives, the temporal
// context's modules against the whole video (invariant) and its byte counts against the analytic
// ones, the options and the released JSON config.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "../mpi/reductions.hpp"
#include "../mpi/split_phase.hpp"
#include "../support.hpp"
#include "core/arena.hpp"
#include "core/error.hpp"
#include "app/vi_options.hpp"
#include "infinity/config.hpp"
#include "infinity/context.hpp"
#include "mpi/communicator.hpp"
#include "mpi/grid.hpp"
#include "model/temporal.hpp"
#include "ops/elementwise.hpp"
#include "ops/norm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

test::HostTensor random_tensor(const Shape& s, std::uint64_t stream) {
  test::HostTensor t(s);
  Runtime rt(Device::cpu());
  ops::normal(rt.ctx(), t, 11, stream, 0);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape == b.shape);
  test::HostTensor ca(a.shape), cb(b.shape);
  Runtime rt(Device::cpu());
  ops::copy(rt.ctx(), a, ca);
  ops::copy(rt.ctx(), b, cb);
  double m = 0;
  for (std::size_t i = 0; i < ca.data.size(); ++i) m = std::max(m, std::fabs(double(ca.data[i]) - cb.data[i]));
  return m;
}

struct AttnSetup {
  static constexpr std::int64_t rows = 6, width = 8, heads = 2;
  test::HostTensor q = random_tensor({width, width}, 1), k = random_tensor({width, width}, 2),
                   v = random_tensor({width, width}, 3), o = random_tensor({width, width}, 4),
                   ob = random_tensor({width}, 5);
  model::AttentionWeights w() const {
    return {q, k, v, o, ob, static_cast<int>(heads), static_cast<int>(width / heads)};
  }
};

infinity::Config vi(infinity::Mode mode, int p, int g) {
  infinity::Config c;
  c.mode = mode;
  c.local_frames = p;
  c.global_frames = g;
  c.conv_halo = 2;  // fits every clip length used here
  return c;
}

// One attention module on a video of `frames` frames split over n clips; returns the whole output.
// `copies`, when given, gets each rank's ops::copy and ops::fill calls inside the module.
test::HostTensor attention_over_clips(const infinity::Config& c, const AttnSetup& s, const test::HostTensor& x, int n,
                                      std::int64_t t, std::vector<mpi::CommCounters>* counters = nullptr,
                                      std::vector<std::uint64_t>* copies = nullptr) {
  const std::int64_t frames = x.t.size(1), per = frames / n;
  test::HostTensor out({s.rows, frames, s.width});
  test::run_on_threads(n, [&](int r, mpi::Communicator& comm, ExecContext& ctx) {
    infinity::Context vc(c, comm, per);
    vc.begin_call(t);
    OwnedTensor xin = ctx.arena->empty(DType::f32, {s.rows, per, s.width});
    OwnedTensor y = ctx.arena->empty(DType::f32, {s.rows, per, s.width});
    ops::copy(ctx, x.t.slice(1, r * per, per), xin);
    const std::uint64_t before = ctx.copy_calls;
    vc.attention(ctx, s.w(), xin, y, "test.attn1");
    if (copies) (*copies)[static_cast<std::size_t>(r)] = ctx.copy_calls - before;
    ops::copy(ctx, y, out.t.slice(1, r * per, per));
  }, counters);
  return out;
}

}  // namespace

TEST_CASE("thread transport: all-gather (varying counts), exchange, all-reduce, broadcast") {
  test::run_on_threads(3, [](int r, mpi::Communicator& comm, ExecContext& ctx) {
    // Rank r contributes r + 1 values r*10 + i.
    std::vector<float> mine(static_cast<std::size_t>(r + 1)), all(6);
    for (int i = 0; i <= r; ++i) mine[static_cast<std::size_t>(i)] = float(r * 10 + i);
    comm.all_gather_v(ctx, Tensor::wrap(mine.data(), DType::f32, Device::cpu(), {r + 1}),
                      Tensor::wrap(all.data(), DType::f32, Device::cpu(), {6}), {1, 2, 3});
    CHECK(all == std::vector<float>{0, 10, 11, 20, 21, 22});
    // Ring exchange with both neighbours in one call.
    float to_left = float(100 + r), to_right = float(200 + r), from_left = -1, from_right = -1;
    std::vector<mpi::Transfer> tr;
    if (r > 0) tr.push_back({r - 1, Tensor::wrap(&to_left, DType::f32, Device::cpu(), {1}),
                             Tensor::wrap(&from_left, DType::f32, Device::cpu(), {1})});
    if (r < 2) tr.push_back({r + 1, Tensor::wrap(&to_right, DType::f32, Device::cpu(), {1}),
                             Tensor::wrap(&from_right, DType::f32, Device::cpu(), {1})});
    comm.exchange(ctx, tr);
    if (r > 0) CHECK(from_left == float(200 + r - 1));
    if (r < 2) CHECK(from_right == float(100 + r + 1));
    double sum[2] = {double(r), 0.1 * r};
    comm.all_reduce_sum(ctx, Tensor::wrap(sum, DType::f64, Device::cpu(), {2}));
    CHECK(sum[0] == 3.0);
    CHECK(sum[1] == doctest::Approx(0.3));
    float b = r == 2 ? 7.f : 0.f;
    comm.broadcast(ctx, Tensor::wrap(&b, DType::f32, Device::cpu(), {1}), 2);
    CHECK(b == 7.f);
    comm.barrier(ctx);
    const auto& c = comm.counters();
    // Bytes received from others: all-gather 6 - (r + 1) floats; exchange one float per neighbour.
    CHECK(c.bytes[0] == static_cast<std::uint64_t>(4 * (6 - (r + 1))));
    CHECK(c.bytes[1] == static_cast<std::uint64_t>(4 * ((r > 0) + (r < 2))));
    CHECK(c.bytes[2] == 16);
    CHECK(c.bytes[3] == (r == 2 ? 0u : 4u));
    CHECK(c.calls[4] == 1);
  });
}

TEST_CASE("thread transport: started all-gather and halo rounds finish in any order, and on leaving scope") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    test::run_on_threads(n, [](int r, mpi::Communicator& comm, ExecContext& ctx) { test::check_split_phase(r, comm, ctx); });
  }
}

TEST_CASE("thread transport: all-reduce max and min of distinct values per rank, in f32, f64 and i64") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    test::run_on_threads(n, [](int r, mpi::Communicator& comm, ExecContext& ctx) { test::check_reductions(r, comm, ctx); });
  }
}

TEST_CASE("thread transport: a started all-reduce and a reduce-scatter of unequal pieces sum exactly") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    test::run_on_threads(n, [](int r, mpi::Communicator& comm, ExecContext& ctx) { test::check_started_sums(r, comm, ctx); });
  }
}

TEST_CASE("a trace of collectives replays the same calls and bytes") {
  test::run_on_threads(3, [](int r, mpi::Communicator& comm, ExecContext& ctx) {
    std::vector<mpi::CommRecord> trace;
    comm.set_trace(&trace);
    std::vector<float> mine(static_cast<std::size_t>(r + 1), 1.f), all(6);
    comm.all_gather_v(ctx, Tensor::wrap(mine.data(), DType::f32, Device::cpu(), {r + 1}),
                      Tensor::wrap(all.data(), DType::f32, Device::cpu(), {6}), {1, 2, 3});
    float out[4] = {1, 2, 3, 4}, in[4] = {};
    std::vector<mpi::Transfer> tr;
    if (r < 2) tr.push_back({r + 1, Tensor::wrap(out, DType::f32, Device::cpu(), {4}), Tensor{}});
    if (r > 0) tr.push_back({r - 1, Tensor{}, Tensor::wrap(in, DType::f32, Device::cpu(), {4})});
    comm.exchange(ctx, tr);
    double sum = r;
    comm.all_reduce_sum(ctx, Tensor::wrap(&sum, DType::f64, Device::cpu(), {1}));
    comm.broadcast(ctx, Tensor::wrap(out, DType::f32, Device::cpu(), {3}), 1);
    comm.set_trace(nullptr);
    comm.barrier(ctx);  // not recorded
    REQUIRE(trace.size() == 4);
    CHECK(trace[0].op == mpi::CommOp::all_gather);
    CHECK(trace[0].counts == std::vector<std::int64_t>{1, 2, 3});
    CHECK(trace[1].op == mpi::CommOp::exchange);
    CHECK(trace[1].pairs.size() == tr.size());
    CHECK(trace[2].dtype == DType::f64);
    CHECK(trace[3].root == 1);
    const mpi::CommCounters before = comm.counters();
    CHECK(mpi::replay_trace(comm, ctx, trace) >= 0);
    const mpi::CommCounters& after = comm.counters();
    for (int k = 0; k < 4; ++k) {
      CAPTURE(k);
      CHECK(after.calls[static_cast<std::size_t>(k)] == 2 * before.calls[static_cast<std::size_t>(k)]);
      CHECK(after.bytes[static_cast<std::size_t>(k)] == 2 * before.bytes[static_cast<std::size_t>(k)]);
    }
    CHECK(after.calls[4] == before.calls[4]);
  });
}

TEST_CASE("invariant attention over 1-4 clips equals the whole video, with the analytic byte counts") {
  const AttnSetup s;
  const test::HostTensor x = random_tensor({s.rows, 12, s.width}, 9);
  for (int p : {1, 3}) {
    for (int g : {0, 5}) {
      for (std::int64_t t : {900, 500}) {
        infinity::Config c = vi(infinity::Mode::invariant, p, g);
        c.token_num_scale = p == 3;
        const test::HostTensor whole = attention_over_clips(c, s, x, 1, t);
        for (int n : {2, 3, 4}) {
          for (auto halo : {infinity::HaloData::x, infinity::HaloData::kv}) {
            c.halo = halo;
            std::vector<mpi::CommCounters> counters;
            const test::HostTensor split = attention_over_clips(c, s, x, n, t, &counters);
            CAPTURE(p);
            CAPTURE(g);
            CAPTURE(n);
            CHECK(max_diff(split, whole) < 1e-5);
            const std::uint64_t frame_bytes = s.rows * s.width * 4 * (halo == infinity::HaloData::kv ? 2 : 1);
            const std::int64_t per = 12 / n;
            std::set<std::int64_t> globals;  // floor(k * 12 / G)
            for (int k = 0; k < g; ++k) globals.insert(k * 12 / g);
            for (int r = 0; r < n; ++r) {
              // Halo: p frames from each existing neighbour, for halo x less the ones that are
              // global frames; globals: the G frames of the video minus the ones this rank owns.
              std::uint64_t halo_frames = 0;
              for (std::int64_t i = 0; i < p; ++i) {
                const std::int64_t from_left = r * per - p + i, from_right = (r + 1) * per + i;
                const bool x = halo == infinity::HaloData::x;
                halo_frames += r > 0 && !(x && globals.count(from_left));
                halo_frames += r < n - 1 && !(x && globals.count(from_right));
              }
              int own_globals = 0;
              for (std::int64_t k : globals) own_globals += k / per == r;
              const auto& cr = counters[static_cast<std::size_t>(r)];
              CHECK(cr.bytes[1] == frame_bytes * halo_frames);
              CHECK(cr.bytes[0] == frame_bytes * static_cast<std::uint64_t>(g - own_globals));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("invariant attention copies frames in runs: the copies per module do not grow with the clip") {
  // Every list of frames that moves (the own global frames, the boundary frames, the halo's
  // places in the padded keys) is one strided copy (one kernel on a GPU) per run that steps
  // evenly, whatever its length. Global frames every F / 4 here: one run each. With K and V
  // travelling the count is the same for every clip length and halo width; with x, halo places
  // that are global keys are filled from those keys, which can break a side's run once per halo
  // frame (K and V: at most 2 copies more per halo frame and side). Results equal the whole
  // video's.
  const AttnSetup s;
  std::map<std::pair<std::int64_t, int>, std::uint64_t> kv_count;
  for (auto halo : {infinity::HaloData::kv, infinity::HaloData::x}) {
    for (std::int64_t frames : {12, 24}) {
      for (int p : {1, 3}) {
        const test::HostTensor x = random_tensor({s.rows, frames, s.width}, 9);
        infinity::Config c = vi(infinity::Mode::invariant, p, 4);
        c.halo = halo;
        const test::HostTensor whole = attention_over_clips(c, s, x, 1, 700);
        std::vector<std::uint64_t> copies(3);
        const test::HostTensor split = attention_over_clips(c, s, x, 3, 700, nullptr, &copies);
        const bool kv = halo == infinity::HaloData::kv;
        CAPTURE(kv);
        CAPTURE(frames);
        CAPTURE(p);
        CHECK(max_diff(split, whole) < 1e-5);
        const std::uint64_t middle = copies[1];  // both neighbours
        if (kv) {
          kv_count[{frames, p}] = middle;
          CHECK(middle == kv_count.begin()->second);
          CHECK(middle <= 16);
        } else {
          CHECK(middle <= kv_count[{frames, p}] + 2 * 2 * static_cast<std::uint64_t>(p));
        }
      }
    }
  }
}

TEST_CASE("exact attention over 1-4 clips of uneven sizes equals full attention, with the analytic all-to-all bytes") {
  // 7 sequences and 17 frames: neither divides by 2, 3 or 4 ranks.
  const AttnSetup s;
  const std::int64_t rows = 7, frames = 17;
  const test::HostTensor x = random_tensor({rows, frames, s.width}, 21);
  test::HostTensor plain({rows, frames, s.width});
  {
    Runtime rt(Device::cpu());
    model::PlainTemporalContext().attention(rt.ctx(), s.w(), x, plain, "test.attn1");
  }
  infinity::Config c = vi(infinity::Mode::exact, 2, 3);  // the window settings do not apply
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    const std::vector<std::int64_t> counts = infinity::clip_frame_counts(frames, n);
    test::HostTensor split({rows, frames, s.width});
    std::vector<mpi::CommCounters> counters;
    test::run_on_threads(n, [&](int r, mpi::Communicator& comm, ExecContext& ctx) {
      const infinity::FrameRange mine = infinity::clip_frames(frames, n, r);
      infinity::Context vc(c, comm, counts);
      vc.begin_call(900);
      OwnedTensor xin = ctx.arena->empty(DType::f32, {rows, mine.count, s.width});
      OwnedTensor y = ctx.arena->empty(DType::f32, xin.shape);
      ops::copy(ctx, x.t.slice(1, mine.first, mine.count), xin);
      vc.attention(ctx, s.w(), xin, y, "test.attn1");
      ops::copy(ctx, y, split.t.slice(1, mine.first, mine.count));
    }, &counters);
    CHECK(max_diff(split, plain) < 1e-5);
    // Rank r gets frames it lacks of its R_r sequences, then its own frames of the others': f32
    // x and the heads' output both `width` wide. Nothing else travels.
    for (int r = 0; r < n; ++r) {
      const std::uint64_t own_rows = static_cast<std::uint64_t>((r + 1) * rows / n - r * rows / n);
      const auto own_frames = static_cast<std::uint64_t>(counts[static_cast<std::size_t>(r)]);
      const std::uint64_t expect = (own_rows * (frames - own_frames) + (rows - own_rows) * own_frames) * s.width * 4;
      const auto& cr = counters[static_cast<std::size_t>(r)];
      CHECK(cr.bytes[static_cast<std::size_t>(mpi::CommOp::all_to_all)] == expect);
      CHECK(cr.calls[static_cast<std::size_t>(mpi::CommOp::all_to_all)] == (n > 1 ? 2u : 0u));
      CHECK(cr.bytes[static_cast<std::size_t>(mpi::CommOp::exchange)] + cr.bytes[static_cast<std::size_t>(mpi::CommOp::all_gather)] == 0);
    }
  }
}

TEST_CASE("compat attention: strided global frames per rank, zero halos at the ends, all-gather bytes") {
  const AttnSetup s;
  const test::HostTensor x = random_tensor({s.rows, 12, s.width}, 10);
  // G = 5 over 3 ranks: G / N = 1 frame each at stride 4, i.e. frame 0 of every clip.
  infinity::Config c = vi(infinity::Mode::compat, 2, 5);
  std::vector<mpi::CommCounters> counters;
  attention_over_clips(c, s, x, 3, 900, &counters);
  for (const auto& cr : counters) CHECK(cr.bytes[0] == 2u * s.rows * s.width * 4);
  test::run_on_threads(3, [](int, mpi::Communicator& comm, ExecContext&) {
    infinity::Context vc(vi(infinity::Mode::compat, 2, 5), comm, 4);
    CHECK(vc.global_frames() == std::vector<std::int64_t>{0, 4, 8});
    infinity::Context few(vi(infinity::Mode::compat, 2, 2), comm, 4);  // G < N: frame 0 of the first G clips
    CHECK(few.global_frames() == std::vector<std::int64_t>{0, 4});
    infinity::Context inv(vi(infinity::Mode::invariant, 2, 5), comm, 4);
    CHECK(inv.global_frames() == std::vector<std::int64_t>{0, 2, 4, 7, 9});
    CHECK(vc.conv_halo().left == 2);  // compat pads both ends, invariant only between clips
    CHECK(inv.conv_halo().left == (comm.rank() > 0 ? 2 : 0));
    CHECK(inv.conv_halo().right == (comm.rank() < 2 ? 2 : 0));
  });
}

TEST_CASE("temporal conv halo and whole-video GroupNorm over clips (invariant, and exact with uneven clips) equal the whole video") {
  const std::int64_t b = 2, ch = 4, frames = 13, sp = 3, groups = 2;
  // Frame-major (B, F, C, S) storage, seen as (B, C, F, S) as the model does.
  const test::HostTensor video = random_tensor({b, frames, ch, sp}, 12);
  const test::HostTensor gamma = random_tensor({ch}, 13), beta = random_tensor({ch}, 14);
  for (const infinity::Mode mode : {infinity::Mode::invariant, infinity::Mode::exact}) {
    // Invariant splits evenly (12 of the frames), exact takes any split (all 13).
    const std::int64_t used = mode == infinity::Mode::invariant ? 12 : frames;
    test::HostTensor whole_norm({b, used, ch, sp});
    {
      Runtime rt(Device::cpu());
      ops::group_norm(rt.ctx(), video.t.slice(1, 0, used).permute({0, 2, 1, 3}), gamma, beta,
                      whole_norm.t.permute({0, 2, 1, 3}), {static_cast<int>(groups), 1e-5f, ops::Activation::none});
    }
    for (int n : {2, 3}) {
      CAPTURE(n);
      infinity::Config c = vi(mode, 1, 2);
      c.conv_halo = 4;
      test::run_on_threads(n, [&](int r, mpi::Communicator& comm, ExecContext& ctx) {
        const infinity::FrameRange mine = infinity::clip_frames(used, n, r);
        infinity::Context vc(c, comm, infinity::clip_frame_counts(used, n));
        const model::Halo h = vc.conv_halo();
        CHECK(h.left == (r > 0 ? 4 : 0));
        CHECK(h.right == (r < n - 1 ? 4 : 0));
        const std::int64_t fp = mine.count + h.total();
        OwnedTensor padded = ctx.arena->empty(DType::f32, {b, fp, ch, sp});
        ops::fill(ctx, padded, -99.0);
        ops::copy(ctx, video.t.slice(1, mine.first, mine.count), padded.slice(1, h.left, mine.count));
        vc.fill_conv_halo(ctx, padded.permute({0, 2, 1, 3}), h, "test.temp_convs.0");
        // The halo holds the neighbours' frames: the video's frames [first - left, end + right).
        CHECK(max_diff(padded, video.t.slice(1, mine.first - h.left, fp)) == 0.0);
        // GroupNorm with whole-video statistics: equals the unsplit GroupNorm on every frame held.
        OwnedTensor y = ctx.arena->empty(DType::f32, padded.shape);
        vc.group_norm(ctx, padded.permute({0, 2, 1, 3}), gamma, beta, y.permute({0, 2, 1, 3}),
                      {static_cast<int>(groups), 1e-5f, ops::Activation::none}, h, "test.norm");
        CHECK(max_diff(y, whole_norm.t.slice(1, mine.first - h.left, fp)) < 1e-5);
      });
    }
  }
}

// A second memory space without a GPU: host memory that the device checks treat as cpu:1, so a
// host buffer handed where the context's device memory belongs is caught as it would be on CUDA.
constexpr Device kStandIn{DeviceKind::cpu, 1};

TEST_CASE("compat GroupNorm with synced statistics: the paper's formula, reduced from the context's device") {
  const std::int64_t b = 2, ch = 4, per = 5, sp = 3, groups = 2;
  const ops::GroupNormParams gn{static_cast<int>(groups), 1e-5f, ops::Activation::none};
  const test::HostTensor gamma = random_tensor({ch}, 23), beta = random_tensor({ch}, 24);
  for (int n : {1, 2, 3}) {
    // Each rank's tensor (compat: its own frames and halo alike), frame-major (B, F, C, S).
    std::vector<test::HostTensor> xs;
    for (int r = 0; r < n; ++r) xs.push_back(random_tensor({b, per, ch, sp}, 30 + static_cast<std::uint64_t>(r)));
    // The reference in double: mean of the ranks' means, then mean of their variances about it.
    const std::int64_t cg = ch / groups;
    const double count = static_cast<double>(cg * per * sp);
    std::vector<double> mean(static_cast<std::size_t>(b * groups)), var(mean.size());
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t g = 0; g < groups; ++g) {
        auto over = [&](int r, const std::function<double(double)>& f) {
          double acc = 0;
          for (std::int64_t fr = 0; fr < per; ++fr)
            for (std::int64_t c = g * cg; c < (g + 1) * cg; ++c)
              for (std::int64_t q = 0; q < sp; ++q)
                acc += f(xs[static_cast<std::size_t>(r)].data[static_cast<std::size_t>(((i * per + fr) * ch + c) * sp + q)]);
          return acc;
        };
        double mu = 0;
        for (int r = 0; r < n; ++r) mu += over(r, [](double v) { return v; }) / count / n;
        double v2 = 0;
        for (int r = 0; r < n; ++r) v2 += over(r, [&](double v) { return (v - mu) * (v - mu); }) / count / n;
        mean[static_cast<std::size_t>(i * groups + g)] = mu;
        var[static_cast<std::size_t>(i * groups + g)] = v2;
      }
    infinity::Config c = vi(infinity::Mode::compat, 1, 2);
    c.sync_groupnorm = true;
    c.conv_halo = 1;
    test::run_on_threads(
        n,
        [&](int r, mpi::Communicator& comm, ExecContext& ctx) {
          CHECK(ctx.device == kStandIn);
          infinity::Context vc(c, comm, per - 2);
          OwnedTensor x = ctx.arena->empty(DType::f32, {b, per, ch, sp});
          OwnedTensor y = ctx.arena->empty(DType::f32, x.shape);
          OwnedTensor g_dev = ctx.arena->empty(DType::f32, {ch}), b_dev = ctx.arena->empty(DType::f32, {ch});
          ops::copy(ctx, xs[static_cast<std::size_t>(r)].t, x);
          ops::copy(ctx, gamma.t, g_dev);
          ops::copy(ctx, beta.t, b_dev);
          vc.group_norm(ctx, x.permute({0, 2, 1, 3}), g_dev, b_dev, y.permute({0, 2, 1, 3}), gn, vc.conv_halo(),
                        "test.norm");
          test::HostTensor got(y.shape);
          ops::copy(ctx, y, got.t);
          double worst = 0;
          const test::HostTensor& xr = xs[static_cast<std::size_t>(r)];
          for (std::int64_t i = 0; i < b; ++i)
            for (std::int64_t fr = 0; fr < per; ++fr)
              for (std::int64_t ci = 0; ci < ch; ++ci)
                for (std::int64_t q = 0; q < sp; ++q) {
                  const auto at = static_cast<std::size_t>(((i * per + fr) * ch + ci) * sp + q);
                  const auto k = static_cast<std::size_t>(i * groups + ci / cg);
                  const double want = (xr.data[at] - mean[k]) / std::sqrt(var[k] + 1e-5) *
                                          gamma.data[static_cast<std::size_t>(ci)] +
                                      beta.data[static_cast<std::size_t>(ci)];
                  worst = std::max(worst, std::fabs(want - got.data[at]));
                }
          CAPTURE(n);
          CHECK(worst < 1e-5);
        },
        nullptr, kStandIn);
  }
}

TEST_CASE("every collective refuses a buffer that is not on the context's device, naming the call and group") {
  test::run_on_threads(
      2,
      [](int, mpi::Communicator& comm, ExecContext& ctx) {
        comm.set_label("clip group");
        test::HostTensor host({4});  // plain host memory: not the stand-in device
        OwnedTensor dev = ctx.arena->empty(DType::f32, {4}), both = ctx.arena->empty(DType::f32, {8});
        auto refused = [](const std::function<void()>& call, const char* what) {
          try {
            call();
          } catch (const InputError& e) {
            FAIL_CHECK("an internal error was expected, got an input error: " << e.what());
            return;
          } catch (const Error& e) {
            const std::string m = e.what();
            CHECK_MESSAGE(m.find(what) != std::string::npos, m);
            CHECK_MESSAGE(m.find("on the clip group (threads)") != std::string::npos, m);
            CHECK_MESSAGE(m.find("is in cpu memory, but the collective runs on cpu:1") != std::string::npos, m);
            return;
          }
          FAIL_CHECK("no error for a host buffer in " << what);
        };
        refused([&] { comm.all_reduce_sum(ctx, host); }, "all-reduce");
        refused([&] { comm.broadcast(ctx, host, 0); }, "broadcast");
        refused([&] { comm.all_gather(ctx, host, both); }, "all-gather");
        refused([&] { comm.all_gather(ctx, dev, test::HostTensor({8}).t); }, "all-gather");
        const mpi::Transfer t{1 - comm.rank(), host, dev};
        refused([&] { comm.exchange(ctx, std::span(&t, 1)); }, "exchange");
        // The same calls with buffers on the device go through.
        ops::fill(ctx, dev, 1.0);
        comm.all_reduce_sum(ctx, dev);
        test::HostTensor back({4});
        ops::copy(ctx, dev, back.t);
        CHECK(back.data[3] == 2.0f);
      },
      nullptr, kStandIn);
}

TEST_CASE("ranks that share a GPU are found per host, and named in rank order") {
  const std::vector<mpi::GpuHolder> none{{"a", "GPU-1"}, {"a", "GPU-2"}, {"b", "GPU-1"}};
  CHECK(mpi::shared_gpus(none).empty());  // the same identity on two hosts is two GPUs
  const std::vector<mpi::GpuHolder> holders{{"a", "GPU-1"}, {"a", "GPU-2"}, {"a", "GPU-1"},
                                            {"b", "GPU-7"}, {"b", "GPU-7"}, {"b", "GPU-7"}, {"a", "GPU-3"}};
  const auto shared = mpi::shared_gpus(holders);
  REQUIRE(shared.size() == 2);
  CHECK(shared[0] == std::vector<int>{0, 2});
  CHECK(shared[1] == std::vector<int>{3, 4, 5});
  CHECK(mpi::describe_shared_gpus(holders, shared) == "ranks 0 and 2 share GPU-1 on a; ranks 3, 4 and 5 share GPU-7 on b");
  CHECK(mpi::shared_gpus({{"a", "GPU-1"}}).empty());
}

TEST_CASE("phase biases follow the released rule") {
  infinity::Config c;
  float l = 0, g = 0;
  c.biases(900, l, g);
  CHECK((l == 0.f && g == 10.f));
  c.biases(799, l, g);
  CHECK((l == 10.f && g == 0.f));
  c.biases(800, l, g);
  CHECK((l == 0.f && g == 10.f));
  c.local_phase.t = 900;  // overlapping phases add up
  c.biases(850, l, g);
  CHECK((l == 10.f && g == 10.f));
  c.dynamic_bias = false;
  c.biases(100, l, g);
  CHECK((l == 0.f && g == 0.f));
}

TEST_CASE("--import-vi-config reads the released JSON, the command line wins") {
  const fs::path dir = fs::temp_directory_path() / ("vinf-vi-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << R"({"pipe_configs": {"num_frames": 24},
    "plugin_configs": {"attn": {"padding": 2, "top_k": 4, "top_k_chunk_size": 24, "attn_scale": 0.5,
      "token_num_scale": true, "dynamic_scale": true, "local_phase": {"t": 700, "local_biase": 3, "global_biase": 1},
      "global_phase": {"t": 900, "local_biase": 2, "global_biase": 5}}, "conv_layer": {"padding": 3}}})";
  namespace po = boost::program_options;
  auto resolve = [&](std::vector<std::string> args) {
    app::ViOptions o;
    po::options_description d;
    o.add_to(d);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(d).run(), vm);
    po::notify(vm);
    return o.resolve(vm);
  };
  const infinity::Config c = resolve({"--import-vi-config", path, "--vi.global-frames", "6", "--vi.mode", "compat"});
  CHECK(c.local_frames == 2);
  CHECK(c.global_frames == 6);
  CHECK(c.attn_scale == 0.5f);
  CHECK(c.token_num_scale);
  CHECK(c.conv_halo == 3);
  CHECK(c.local_phase.t == 700);
  CHECK(c.local_phase.local_bias == 3.f);
  CHECK(c.global_phase.global_bias == 5.f);
  CHECK(c.mode == infinity::Mode::compat);
  const infinity::Config d = resolve({});
  CHECK((d.local_frames == 8 && d.global_frames == 16 && d.conv_halo == 4 && d.mode == infinity::Mode::invariant));
  std::vector<std::string> unused;
  infinity::Config u;
  infinity::import_released_config(path, u, &unused);
  CHECK(unused == std::vector<std::string>{"plugin_configs.attn.top_k_chunk_size"});
  // Wrong JSON types and values name the key; an integer field takes no fraction or boolean.
  for (const auto& [text, want] :
       {std::pair{R"({"plugin_configs": {"attn": {"padding": "two"}}})", "config key 'plugin_configs.attn.padding' must be an integer, got \"two\""},
        std::pair{R"({"plugin_configs": {"attn": {"padding": 2.5}}})", "config key 'plugin_configs.attn.padding' must be an integer, got 2.5"},
        std::pair{R"({"plugin_configs": {"attn": {"top_k": true}}})", "config key 'plugin_configs.attn.top_k' must be an integer, got true"},
        std::pair{R"({"plugin_configs": {"attn": {"top_k": 4294967296}}})", "config key 'plugin_configs.attn.top_k' must be an integer in ["},
        std::pair{R"({"plugin_configs": {"attn": {"dynamic_scale": 1}}})", "config key 'plugin_configs.attn.dynamic_scale' must be true or false, got 1"},
        std::pair{R"({"plugin_configs": {"conv_layer": {"padding": -1}}})", "plugin_configs.conv_layer.padding (--vi.conv-halo) must be >= 0"}}) {
    std::ofstream(path) << text;
    try {
      resolve({"--import-vi-config", path});
      FAIL("no error for ", text);
    } catch (const InputError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(want) != std::string::npos, e.what());
    }
  }
  // Numbers out of the range of the setting they fill, from the file or the command line.
  auto refusal = [&](std::vector<std::string> args) -> std::string {
    try {
      resolve(std::move(args));
    } catch (const InputError& e) {
      return e.what();
    } catch (const boost::program_options::error& e) {  // a value out of its range, as it is read
      return e.what();
    }
    return "(accepted)";
  };
  std::ofstream(path) << R"({"plugin_configs": {"attn": {"local_phase": {"t": 800, "local_biase": 1e300}}}})";
  CHECK(refusal({"--import-vi-config", path}).find("local_biase' must be a number within float range, got 1e+300") !=
        std::string::npos);
  CHECK(refusal({"--vi.local-phase-local-bias", "nan"}).find("'--vi.local-phase-local-bias' must be in [-1000, 1000]") !=
        std::string::npos);
  CHECK(refusal({"--vi.global-phase-global-bias", "-inf"}).find("'--vi.global-phase-global-bias' must be in") !=
        std::string::npos);
  CHECK(refusal({"--vi.attn-scale", "inf"}).find("'--vi.attn-scale' must be in (0, 1000], got 'inf'") != std::string::npos);
  // The released file's numbers are checked against the same ranges.
  std::ofstream(path) << R"({"plugin_configs": {"attn": {"local_phase": {"t": 5000}}}})";
  CHECK(refusal({"--import-vi-config", path}).find("--vi.local-phase-t must be in [0, 1000], got 5000") != std::string::npos);
  CHECK(refusal({"--vi.local-phase-local-bias", "3.5"}) == "(accepted)");
  fs::remove_all(dir);
}

TEST_CASE("partition checks name the option and the numbers") {
  auto msg = [](const infinity::Config& c, std::int64_t frames, int clips) -> std::string {
    try {
      infinity::check_partition(c, frames, clips);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(msg(vi(infinity::Mode::compat, 2, 4), 16, 2).empty());
  CHECK(msg(vi(infinity::Mode::compat, 2, 4), 15, 2).find("15 frames cannot be split into 2 equal clips") != std::string::npos);
  CHECK(msg(vi(infinity::Mode::compat, 9, 4), 16, 2).find("--vi.local-frames 9 is larger than the 8 frames per clip") !=
        std::string::npos);
  CHECK(msg(vi(infinity::Mode::compat, 2, 17), 16, 2).find("--vi.global-frames 17 is larger than the video") !=
        std::string::npos);
  infinity::Config c = vi(infinity::Mode::invariant, 2, 4);
  c.conv_halo = 2;
  CHECK(msg(c, 16, 2).find("needs --vi.conv-halo >= 4") != std::string::npos);
  CHECK(msg(vi(infinity::Mode::off, 99, 99), 15, 2).empty());  // off: no Video-Infinity constraints
  // exact: any split, the window options ignored; each rank needs the convolutions' reach.
  CHECK(msg(vi(infinity::Mode::exact, 99, 99), 15, 2).empty());
  CHECK(msg(vi(infinity::Mode::exact, 2, 4), 15, 3).empty());
  CHECK(msg(vi(infinity::Mode::exact, 2, 4), 3, 1).empty());
  CHECK(msg(vi(infinity::Mode::exact, 2, 4), 15, 4).find("15 frames over 4 ranks leaves 3 frame(s) on a rank, and each "
                                                          "needs at least 4") != std::string::npos);
  CHECK(msg(vi(infinity::Mode::exact, 2, 4), 15, 4).find("use at most 3 frame ranks") != std::string::npos);
}
