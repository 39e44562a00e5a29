// Timed Wan2.1 transformer calls with the video's latent frames split over the MPI ranks, in exact
// mode (every block's self-attention over all tokens, infinity::WanExactAttention) or with
// Video-Infinity's windows (infinity::WanWindowAttention): per rank the call time, the bytes
// received per collective kind (counted, and the analytic count beside them), the peak memory;
// a table and JSON. Random weights of a preset's shape; one CFG batch of 2 by default.
//
//   mpirun -np N vinf_bench_wan_step [--preset wan-narrow] [--latent-frames 8] [--height 30 --width 52]
//       [--vi.mode exact|invariant --vi.local-frames p --vi.global-frames G] [--calls 2] [--json F]
//       [--causal-block K [--bands]]
//
// --causal-block K: diffusion forcing's block-causal mask (blocks of K latent frames), in exact
// mode's share of the frames or, with --bands, in bands of whole blocks per rank
// (infinity::WanBandAttention): the two ways a diffusion-forcing window goes over the ranks.
//
// Sweeping --latent-frames at a fixed rank count shows what grows with the video: exact mode's
// bytes and memory per rank, not the windows'. perf/wan-step-sweep runs that sweep.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/vi_options.hpp"
#include "bench_main.hpp"
#include "core/error.hpp"
#include "infinity/wan_bands.hpp"
#include "infinity/wan_exact.hpp"
#include "infinity/wan_windows.hpp"
#include "job/job.hpp"
#include "model/wan_config.hpp"
#include "model/wan_transformer.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;
namespace po = boost::program_options;

namespace {

struct Options {
  std::string preset = "wan-narrow", device = "auto", dtype = "auto", json_path;
  int layers = 0;  // 0: the preset's (wan-narrow: 2 of the 1.3B model's 30)
  std::int64_t latent_frames = 8, height = 30, width = 52, tokens = 64, batch = 2;
  int calls = 2, warmup = 1;
  std::int64_t causal_block = 0;
  bool bands = false;
  app::ViOptions vi;
  infinity::Config vcfg;
  job::JobPlan plan;
};

std::optional<int> parse(int argc, char** argv, Options& o) {
  po::options_description opts("vinf_bench_wan_step: timed Wan2.1 transformer calls over the MPI ranks");
  opts.add_options()("help", "this text")(
      "preset", po::value(&o.preset)->default_value(o.preset),
      "wan-tiny | wan-narrow (the 1.3B model's width, 2 blocks) | wan-1.3b | wan-14b")(
      "layers", po::value(&o.layers)->default_value(o.layers), "blocks (0: the preset's)")(
      "latent-frames", po::value(&o.latent_frames)->default_value(o.latent_frames), "the video's latent frames")(
      "height", po::value(&o.height)->default_value(o.height), "latent pixels (a multiple of 2; 480 pixels: 60)")(
      "width", po::value(&o.width)->default_value(o.width), "latent pixels (a multiple of 2; 832 pixels: 104)")(
      "tokens", po::value(&o.tokens)->default_value(o.tokens), "text tokens")(
      "batch", po::value(&o.batch)->default_value(o.batch), "2: a guidance batch, 1: one branch")(
      "calls", po::value(&o.calls)->default_value(o.calls), "timed calls")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed calls first")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), "auto | f32 | bf16 | f16")(
      "json", po::value(&o.json_path), "also write the figures to this JSON file")(
      "causal-block", po::value(&o.causal_block)->default_value(o.causal_block),
      "latent frames per causal block of the self-attention (diffusion forcing; 0: none)")(
      "bands", po::bool_switch(&o.bands), "with --causal-block: bands of whole blocks per rank instead of exact mode");
  o.vi.add_to(opts);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "vinf_bench_wan_step: error: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  o.vcfg = o.vi.resolve(vm);
  if (!vm.count("vi.mode") || vm["vi.mode"].defaulted()) o.vcfg.mode = infinity::Mode::exact;
  VINF_INPUT_CHECK(o.vcfg.mode == infinity::Mode::exact || o.vcfg.mode == infinity::Mode::invariant,
                   "--vi.mode must be exact or invariant for a Wan transformer, got ",
                   infinity::mode_name(o.vcfg.mode));
  VINF_INPUT_CHECK(o.latent_frames >= 1 && o.height > 0 && o.width > 0 && o.height % 2 == 0 && o.width % 2 == 0,
                   "--latent-frames >= 1 and positive even --height and --width (latent pixels), please");
  VINF_INPUT_CHECK(o.calls >= 1 && o.warmup >= 0 && o.tokens >= 1 && (o.batch == 1 || o.batch == 2) && o.layers >= 0,
                   "--calls >= 1, --warmup >= 0, --tokens >= 1, --batch 1 or 2 and --layers >= 0, please");
  VINF_INPUT_CHECK(o.causal_block >= 0 && (o.causal_block == 0 || o.latent_frames % o.causal_block == 0) &&
                       (!o.bands || o.causal_block > 0),
                   "--causal-block must divide --latent-frames, and --bands needs --causal-block");
  o.plan.dtype = job::parse_dtype_choice(o.dtype);
  o.plan.device = job::parse_device_choice(o.device);
  o.plan.clip_group = true;
  return std::nullopt;
}

model::WanTransformerConfig config_of(const Options& o) {
  model::WanTransformerConfig c = model::wan_transformer_preset(o.preset == "wan-narrow" ? "wan-1.3b" : o.preset);
  if (o.preset == "wan-narrow") c.layers = 2;
  if (o.layers > 0) c.layers = o.layers;
  return c;
}

// The frames over the ranks (evenly, or in bands of whole causal blocks), this rank's, the tokens.
struct Layout {
  std::vector<std::int64_t> counts, tokens;
  infinity::FrameRange mine;
};
Layout layout_of(const Options& o, const job::Job& job, std::int64_t per_frame) {
  Layout l;
  const int ranks = job.size(), me = job.rank();
  if (o.bands) {
    VINF_INPUT_CHECK(o.latent_frames / o.causal_block >= ranks, "--bands: ", o.latent_frames / o.causal_block,
                     " causal blocks over ", ranks, " ranks: at least one each, please");
    l.counts = infinity::clip_frame_counts(o.latent_frames / o.causal_block, ranks);
    for (std::int64_t& n : l.counts) n *= o.causal_block;
  } else {
    l.counts = infinity::clip_frame_counts(o.latent_frames, ranks);
  }
  l.mine = {0, l.counts[static_cast<std::size_t>(me)]};
  for (int r = 0; r < me; ++r) l.mine.first += l.counts[static_cast<std::size_t>(r)];
  l.tokens = l.counts;
  for (std::int64_t& n : l.tokens) n *= per_frame;
  return l;
}

// What one rank measured.
struct Figures {
  double seconds = 0, peak = 0, exchange = 0, gather = 0, all_to_all = 0, analytic = 0;
  std::int64_t first = 0, frames = 0;
};

int run(int argc, char** argv) {
  Options o;
  if (const std::optional<int> status = parse(argc, argv, o)) return *status;
  const std::unique_ptr<job::Job> job = job::start_job(o.plan);
  const int ranks = job->size(), me = job->rank();
  VINF_INPUT_CHECK(o.latent_frames >= ranks, "--latent-frames ", o.latent_frames, " over ", ranks,
                   " ranks: at least one each, please");
  const bool windows = o.vcfg.mode == infinity::Mode::invariant;
  if (windows) infinity::check_wan_windows(o.vcfg, o.latent_frames, ranks);
  Runtime& rt = job->runtime();
  ExecContext& ctx = rt.ctx();
  const model::WanTransformerConfig c = config_of(o);
  const model::WanTransformer wan(c, model::Weights::random(model::wan_transformer_parameters(c), rt, job->dtype(), 1));
  const DType dt = wan.weights().dtype();
  const std::int64_t T = o.latent_frames, per_frame = (o.height / c.patch_size[1]) * (o.width / c.patch_size[2]);
  const Layout lay = layout_of(o, *job, per_frame);
  const std::vector<std::int64_t>& counts = lay.counts;
  const infinity::FrameRange mine = lay.mine;
  std::unique_ptr<model::WanSelfAttention> attention;
  if (windows)
    attention = std::make_unique<infinity::WanWindowAttention>(o.vcfg, ranks > 1 ? job->clip_comm() : nullptr, counts,
                                                               per_frame);
  else if (ranks > 1 && o.bands)
    attention = std::make_unique<infinity::WanBandAttention>(*job->clip_comm(), lay.tokens);
  else if (ranks > 1)
    attention = std::make_unique<infinity::WanExactAttention>(*job->clip_comm(), lay.tokens);
  OwnedTensor x = rt.arena().empty(dt, {o.batch, c.in_channels, mine.count, o.height, o.width});
  OwnedTensor text = rt.arena().empty(dt, {o.batch, o.tokens, c.text_dim});
  OwnedTensor out = rt.arena().empty(dt, x.shape), t = rt.arena().empty(DType::f32, {o.batch});
  ops::normal(ctx, x, 2, static_cast<std::uint64_t>(me), 0);
  ops::normal(ctx, text, 2, 1000, 0);
  ops::fill(ctx, t, 937.0);
  auto call = [&] {
    if (attention) attention->begin_call(937.0);
    model::WanFrames where{mine.first, T};
    where.block_frames = std::max<std::int64_t>(1, o.causal_block);
    wan.forward(ctx, x, t, text, out, nullptr, where, attention.get());
    rt.synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) call();
  if (job->clip_comm()) job->clip_comm()->reset_counters();
  rt.arena().reset_peak();
  job->world().barrier(job->host());
  Figures f;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.calls; ++i) call();
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.calls;
  f.peak = static_cast<double>(rt.arena().stats().peak_in_use);
  if (job->clip_comm()) {
    const mpi::CommCounters& k = job->clip_comm()->counters();
    f.exchange = static_cast<double>(k.bytes[static_cast<std::size_t>(mpi::CommOp::exchange)]) / o.calls;
    f.gather = static_cast<double>(k.bytes[static_cast<std::size_t>(mpi::CommOp::all_gather)]) / o.calls;
    f.all_to_all = static_cast<double>(k.bytes[static_cast<std::size_t>(mpi::CommOp::all_to_all)]) / o.calls;
  }
  const std::int64_t rows = o.batch * c.heads;
  const std::int64_t elements =
      windows      ? infinity::WanWindowAttention::received_elements(o.vcfg, counts, me, per_frame, rows, c.head_dim)
      : ranks == 1 ? 0
      : o.bands    ? infinity::WanBandAttention::received_elements(lay.tokens, me, rows, c.head_dim)
                   : infinity::WanExactAttention::received_elements(lay.tokens, me, rows, c.head_dim);
  f.analytic = static_cast<double>(elements * c.layers) * static_cast<double>(dtype_size(dt));
  f.first = mine.first;
  f.frames = mine.count;
  const std::vector<Figures> all = job->session().gather_values_on_root(f);
  if (!job->root()) return 0;

  const std::string mode = windows ? "windows (p " + std::to_string(o.vcfg.local_frames) + ", G " +
                                         std::to_string(o.vcfg.global_frames) + ")"
                           : o.bands            ? "bands of causal blocks of " + std::to_string(o.causal_block)
                           : o.causal_block > 0 ? "exact, causal blocks of " + std::to_string(o.causal_block)
                                                : "exact";
  std::cout << "vinf_bench_wan_step: " << o.preset << " (" << c.layers << " blocks, " << c.heads << " heads of "
            << c.head_dim << "), " << T << " latent frames of " << o.height << "x" << o.width << " latent pixels ("
            << per_frame << " tokens a frame), batch " << o.batch << ", " << dtype_name(dt) << " on "
            << job->device().name() << "; " << ranks << " rank(s), " << mode << "\n";
  std::cout << "rank  frames   s/call   exchange MB  all-gather MB  all-to-all MB  analytic MB  peak MiB\n";
  nlohmann::ordered_json j;
  j["format"] = "vinf-bench-wan-step";
  j["config"] = {{"preset", o.preset},
                 {"layers", c.layers},
                 {"heads", c.heads},
                 {"head_dim", c.head_dim},
                 {"latent_frames", T},
                 {"height", o.height},
                 {"width", o.width},
                 {"tokens_per_frame", per_frame},
                 {"batch", o.batch},
                 {"dtype", dtype_name(dt)},
                 {"device", job->device().name()},
                 {"ranks", ranks},
                 {"mode", windows   ? "invariant"
                          : o.bands ? "bands"
                                    : "exact"},
                 {"causal_block", o.causal_block},
                 {"local_frames", o.vcfg.local_frames},
                 {"global_frames", o.vcfg.global_frames},
                 {"calls", o.calls}};
  double slowest = 0, peak = 0, bytes = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Figures& a = all[r];
    std::cout << std::setw(4) << r << std::setw(8) << a.frames << std::fixed << std::setprecision(3) << std::setw(9)
              << a.seconds << std::setprecision(2) << std::setw(14) << a.exchange / 1e6 << std::setw(15)
              << a.gather / 1e6 << std::setw(15) << a.all_to_all / 1e6 << std::setw(13) << a.analytic / 1e6
              << std::setprecision(1) << std::setw(10) << a.peak / (1 << 20) << "\n";
    j["ranks"].push_back(
        {{"rank", r},
         {"latent_frames", {a.first, a.first + a.frames}},
         {"seconds_per_call", a.seconds},
         {"bytes_per_call", {{"exchange", a.exchange}, {"all-gather", a.gather}, {"all-to-all", a.all_to_all}}},
         {"analytic_bytes_per_call", a.analytic},
         {"peak_memory_bytes", a.peak}});
    slowest = std::max(slowest, a.seconds);
    peak = std::max(peak, a.peak);
    bytes = std::max(bytes, a.exchange + a.gather + a.all_to_all);
    VINF_CHECK(a.exchange + a.gather + a.all_to_all == a.analytic, "rank ", r, " received ",
               a.exchange + a.gather + a.all_to_all, " bytes per call, not the analytic ", a.analytic);
  }
  j["summary"] = {{"seconds_per_call", slowest}, {"max_bytes_per_rank", bytes}, {"max_peak_memory_bytes", peak}};
  std::cout << std::setprecision(3) << "slowest rank " << slowest << " s/call; most bytes received by a rank "
            << std::setprecision(2) << bytes / 1e6 << " MB/call; largest peak " << std::setprecision(1)
            << peak / (1 << 20) << " MiB\n";
  bench::write_figures(o.json_path, j);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::guarded_main("vinf_bench_wan_step", run, argc, argv); }
