#include "infinity/config.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace po = boost::program_options;

namespace vinf::infinity {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::off: return "off";
    case Mode::compat: return "compat";
    case Mode::invariant: return "invariant";
  }
  return "?";
}

void Config::biases(std::int64_t t, float& local, float& global) const {
  local = global = 0.f;
  if (!dynamic_bias) return;
  if (t < local_phase.t) {
    local += local_phase.local_bias;
    global += local_phase.global_bias;
  }
  if (t >= global_phase.t) {
    local += global_phase.local_bias;
    global += global_phase.global_bias;
  }
}

void Options::add_to(po::options_description& opts, const char* import_help) {
  Config& v = values;
  opts.add_options()(
      "vi.mode", po::value(&mode)->default_value(mode),
      "Video-Infinity mode: invariant (the result does not depend on the number of ranks), compat (reproduces "
      "the released code: zero halos at the video ends, per-rank global frames and GroupNorm statistics), or off "
      "(the plain model on each clip, no communication)")(
      "vi.local-frames", po::value(&v.local_frames)->default_value(v.local_frames),
      "p: attention window half-width in frames, taken from each neighbouring clip")(
      "vi.global-frames", po::value(&v.global_frames)->default_value(v.global_frames),
      "G: frames sampled across the video that every frame attends to")(
      "vi.conv-halo", po::value(&v.conv_halo)->default_value(v.conv_halo),
      "c: frames of each neighbouring clip around a temporal-conv layer")(
      "vi.attn-scale", po::value(&v.attn_scale)->default_value(v.attn_scale), "factor on the attention logits")(
      "vi.token-num-scale", po::value(&v.token_num_scale)->default_value(v.token_num_scale)->implicit_value(true),
      "scale each query's logits by log(visible keys) / log(16)")(
      "vi.dynamic-bias", po::value(&v.dynamic_bias)->default_value(v.dynamic_bias)->implicit_value(true),
      "add the phase biases below to the local / global columns")(
      "vi.local-phase-t", po::value(&v.local_phase.t)->default_value(v.local_phase.t),
      "local phase: applies while t < this")(
      "vi.local-phase-local-bias", po::value(&v.local_phase.local_bias)->default_value(v.local_phase.local_bias), "")(
      "vi.local-phase-global-bias", po::value(&v.local_phase.global_bias)->default_value(v.local_phase.global_bias), "")(
      "vi.global-phase-t", po::value(&v.global_phase.t)->default_value(v.global_phase.t),
      "global phase: applies while t >= this")(
      "vi.global-phase-local-bias", po::value(&v.global_phase.local_bias)->default_value(v.global_phase.local_bias), "")(
      "vi.global-phase-global-bias", po::value(&v.global_phase.global_bias)->default_value(v.global_phase.global_bias),
      "")("vi.sync-groupnorm", po::value(&v.sync_groupnorm)->default_value(v.sync_groupnorm)->implicit_value(true),
          "compat mode: the paper's synchronised temporal GroupNorm (mean of per-rank means, variance about it); "
          "invariant mode always uses whole-video statistics")(
      "vi.halo", po::value(&halo)->default_value(halo),
      "x: exchange the attention input and project halo/global frames locally (at most half the bytes; halo "
      "frames that are global frames travel once); kv: exchange K and V as the released code does")(
      "vi.exchange", po::value(&exchange)->default_value(exchange),
      "three-round: global all-gather, then halos in pairs (0,1),(2,3)..., then (1,2),(3,4)...; fused: both "
      "neighbours at once")(
      "import-vi-config", po::value(&import_file),
      import_help != nullptr ? import_help
                             : "read the [vi] settings from the released code's JSON config (plugin_configs); "
                               "options given on the command line win");
}

Config Options::resolve(const po::variables_map& vm, std::vector<std::string>* unused) const {
  // Boost has put every option's value (given or default) into `values`. With an imported file,
  // its values replace the defaults, and only the options given on the command line go on top.
  Config c = values;
  if (!import_file.empty()) {
    const Config& v = values;
    c = Config{};
    import_released_config(import_file, c, unused);
    auto pick = [&](const char* name, auto& dst, const auto& src) {
      if (vm.count(name) && !vm[name].defaulted()) dst = src;
    };
    pick("vi.local-frames", c.local_frames, v.local_frames);
    pick("vi.global-frames", c.global_frames, v.global_frames);
    pick("vi.conv-halo", c.conv_halo, v.conv_halo);
    pick("vi.attn-scale", c.attn_scale, v.attn_scale);
    pick("vi.token-num-scale", c.token_num_scale, v.token_num_scale);
    pick("vi.dynamic-bias", c.dynamic_bias, v.dynamic_bias);
    pick("vi.local-phase-t", c.local_phase.t, v.local_phase.t);
    pick("vi.local-phase-local-bias", c.local_phase.local_bias, v.local_phase.local_bias);
    pick("vi.local-phase-global-bias", c.local_phase.global_bias, v.local_phase.global_bias);
    pick("vi.global-phase-t", c.global_phase.t, v.global_phase.t);
    pick("vi.global-phase-local-bias", c.global_phase.local_bias, v.global_phase.local_bias);
    pick("vi.global-phase-global-bias", c.global_phase.global_bias, v.global_phase.global_bias);
    c.sync_groupnorm = v.sync_groupnorm;
  }

  if (mode == "invariant") c.mode = Mode::invariant;
  else if (mode == "compat") c.mode = Mode::compat;
  else if (mode == "off") c.mode = Mode::off;
  else VINF_INPUT_FAIL("--vi.mode must be invariant, compat or off, got '", mode, "'");
  VINF_INPUT_CHECK(halo == "x" || halo == "kv", "--vi.halo must be x or kv, got '", halo, "'");
  c.halo = halo == "x" ? HaloData::x : HaloData::kv;
  VINF_INPUT_CHECK(exchange == "three-round" || exchange == "fused", "--vi.exchange must be three-round or fused, got '",
                   exchange, "'");
  c.exchange = exchange == "fused" ? ExchangePattern::fused : ExchangePattern::three_round;
  VINF_INPUT_CHECK(c.local_frames >= 0, "--vi.local-frames must be >= 0, got ", c.local_frames);
  VINF_INPUT_CHECK(c.global_frames >= 0, "--vi.global-frames must be >= 0, got ", c.global_frames);
  VINF_INPUT_CHECK(c.conv_halo >= 0, "--vi.conv-halo must be >= 0, got ", c.conv_halo);
  // Boost reads "nan" and "inf" as floats: every scale and bias must be a finite number.
  VINF_INPUT_CHECK(c.attn_scale > 0.f && std::isfinite(c.attn_scale), "--vi.attn-scale must be a finite number > 0, got ",
                   c.attn_scale);
  for (const auto& [option, bias] : {std::pair{"--vi.local-phase-local-bias", c.local_phase.local_bias},
                                     std::pair{"--vi.local-phase-global-bias", c.local_phase.global_bias},
                                     std::pair{"--vi.global-phase-local-bias", c.global_phase.local_bias},
                                     std::pair{"--vi.global-phase-global-bias", c.global_phase.global_bias}})
    VINF_INPUT_CHECK(std::isfinite(bias), option, " must be a finite number, got ", bias);
  VINF_INPUT_CHECK(!(c.sync_groupnorm && c.mode == Mode::invariant), "--vi.sync-groupnorm is a compat-mode option ",
                   "(invariant mode always normalises over the whole video); drop it or use --vi.mode compat");
  return c;
}

namespace {

using nlohmann::json;

json read_released_file(const std::string& path) {
  VINF_INPUT_CHECK(std::ifstream(path).good(), "--import-vi-config: cannot read ", path);
  json j = io::read_json_file(path, "released Video-Infinity config");
  VINF_INPUT_CHECK(j.is_object() && j.contains("plugin_configs") && j["plugin_configs"].is_object(), path,
                   " has no plugin_configs object (expected the released Video-Infinity config.json)");
  return j;
}

// Appends to unused (when given) the keys of the object that no one read.
void note_unused(std::vector<std::string>* unused, const io::JsonConfig& obj) {
  if (unused == nullptr) return;
  for (const std::string& k : obj.unknown_keys()) unused->push_back(k);
}

}  // namespace

void import_released_config(const std::string& path, Config& c, std::vector<std::string>* unused) {
  const json j = read_released_file(path);
  io::JsonConfig pc(j["plugin_configs"], path, "plugin_configs");
  // conv_3d (the Conv3d plugin) is not mounted by the released code, so it changes nothing there
  // either; top_k_chunk_size is read by no code path: both end up in the unused list.
  const json* attn = pc.find("attn");
  const json* conv = pc.find("conv_layer");
  note_unused(unused, pc);
  if (attn) {
    io::JsonConfig a(*attn, path, "plugin_configs.attn");
    a.read("padding", c.local_frames);
    a.read("top_k", c.global_frames);
    a.read("attn_scale", c.attn_scale);
    a.read("token_num_scale", c.token_num_scale);
    a.read("dynamic_scale", c.dynamic_bias);
    for (auto [key, phase] : {std::pair{"local_phase", &c.local_phase}, std::pair{"global_phase", &c.global_phase}}) {
      const json* ph = a.find(key);
      // A phase set to null switches the biases off in the released code.
      if (!ph) {
        if (attn->contains(key)) c.dynamic_bias = false;
        continue;
      }
      io::JsonConfig phc(*ph, path, std::string("plugin_configs.attn.") + key);
      phc.read("t", phase->t);
      phc.read("local_biase", phase->local_bias);
      phc.read("global_biase", phase->global_bias);
      note_unused(unused, phc);
    }
    note_unused(unused, a);
    const std::string w = path + ": plugin_configs.attn";
    VINF_INPUT_CHECK(c.local_frames >= 0, w, ".padding (--vi.local-frames) must be >= 0, got ", c.local_frames);
    VINF_INPUT_CHECK(c.global_frames >= 0, w, ".top_k (--vi.global-frames) must be >= 0, got ", c.global_frames);
    VINF_INPUT_CHECK(c.attn_scale > 0.f, w, ".attn_scale (--vi.attn-scale) must be > 0, got ", c.attn_scale);
  }
  if (conv) {
    io::JsonConfig cl(*conv, path, "plugin_configs.conv_layer");
    cl.read("padding", c.conv_halo);
    note_unused(unused, cl);
    VINF_INPUT_CHECK(c.conv_halo >= 0, path, ": plugin_configs.conv_layer.padding (--vi.conv-halo) must be >= 0, got ",
                     c.conv_halo);
  }
}

ReleasedPipe import_released_pipe(const std::string& path) {
  const json j = read_released_file(path);
  io::JsonConfig top(j, path);
  ReleasedPipe r;
  top.find("plugin_configs");  // import_released_config's part
  if (!top.read("seed", r.seed.emplace())) r.seed.reset();
  std::string dtype;
  if (top.read("dtype", dtype)) {
    const std::string bare = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
    if (bare == "float16" || bare == "half") r.dtype = "f16";
    else if (bare == "bfloat16") r.dtype = "bf16";
    else if (bare == "float32" || bare == "float") r.dtype = "f32";
    else VINF_INPUT_FAIL(path, ": dtype '", dtype, "' is not torch.float16, torch.bfloat16 or torch.float32");
  }
  if (const json* d = top.find("devices")) {
    if (!d->is_array() || d->empty()) top.fail("devices", "a non-empty list of GPU numbers", *d);
    r.devices = static_cast<int>(d->size());
  }
  const json* pj = top.find("pipe_configs");
  note_unused(&r.unused, top);
  if (pj) {
    io::JsonConfig p(*pj, path, "pipe_configs");
    if (!p.read("prompts", r.prompts.emplace())) r.prompts.reset();
    if (r.prompts && r.prompts->empty()) p.fail("prompts", "a non-empty list of strings", *p.find("prompts"));
    if (!p.read("steps", r.steps.emplace())) r.steps.reset();
    if (!p.read("guidance_scale", r.guidance_scale.emplace())) r.guidance_scale.reset();
    if (!p.read("fps", r.fps.emplace())) r.fps.reset();
    if (!p.read("num_frames", r.num_frames.emplace())) r.num_frames.reset();
    if (r.num_frames)
      VINF_INPUT_CHECK(*r.num_frames >= 1 && *r.num_frames <= 1000000, path,
                       ": pipe_configs.num_frames (frames per GPU, --video.frames / ranks) must be in [1, 1000000], got ",
                       *r.num_frames);
    if (!p.read("height", r.height.emplace())) r.height.reset();
    if (!p.read("width", r.width.emplace())) r.width.reset();
    if (!p.read("export_fps", r.export_fps.emplace())) r.export_fps.reset();
    note_unused(&r.unused, p);
  }
  return r;
}

void check_partition(const Config& c, std::int64_t frames, int clips) {
  if (c.mode == Mode::off) return;
  VINF_INPUT_CHECK(frames % clips == 0, "--vi.mode ", mode_name(c.mode), ": ", frames, " frames cannot be split into ",
                   clips, " equal clips; use a number of ranks that divides the frames (or frames divisible by ",
                   clips, ")");
  const std::int64_t per = frames / clips;
  VINF_INPUT_CHECK(c.local_frames <= per, "--vi.local-frames ", c.local_frames, " is larger than the ", per,
                   " frames per clip (", frames, " frames over ", clips, " clips); use at most ", per, ", or more frames per rank");
  VINF_INPUT_CHECK(c.conv_halo <= per, "--vi.conv-halo ", c.conv_halo, " is larger than the ", per,
                   " frames per clip (", frames, " frames over ", clips, " clips); use at most ", per, ", or more frames per rank");
  VINF_INPUT_CHECK(c.mode != Mode::invariant || clips == 1 || c.conv_halo >= 4, "--vi.mode invariant needs ",
                   "--vi.conv-halo >= 4 (the reach of the 4 temporal convolutions) to be exact; got ", c.conv_halo);
  VINF_INPUT_CHECK(c.global_frames <= frames, "--vi.global-frames ", c.global_frames, " is larger than the video (",
                   frames, " frames)");
}

}  // namespace vinf::infinity
