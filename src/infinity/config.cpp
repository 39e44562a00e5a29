#include "infinity/config.hpp"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

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
  VINF_INPUT_CHECK(c.attn_scale > 0.f, "--vi.attn-scale must be > 0, got ", c.attn_scale);
  VINF_INPUT_CHECK(!(c.sync_groupnorm && c.mode == Mode::invariant), "--vi.sync-groupnorm is a compat-mode option ",
                   "(invariant mode always normalises over the whole video); drop it or use --vi.mode compat");
  return c;
}

namespace {

using nlohmann::json;

// Reads obj[key] into out when present. The JSON type must be the one T needs: an integer (in T's
// range, not 2.5 or true) for integers, a number for floating point, true/false for bool.
// "FILE: pipe_configs" + "steps" -> "FILE: pipe_configs.steps"; "FILE: " + "seed" -> "FILE: seed".
std::string field(const std::string& where, const char* key) {
  return where.size() >= 2 && where.compare(where.size() - 2, 2, ": ") == 0 ? where + key : where + "." + key;
}

template <class T>
void take(const json& obj, const char* key, T& out, const std::string& where) {
  if (!obj.contains(key)) return;
  const json& v = obj.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    VINF_INPUT_CHECK(v.is_boolean(), field(where, key), " has the wrong type: ", v.dump(), " (expected true or false)");
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    VINF_INPUT_CHECK(v.is_number_integer(), field(where, key), " has the wrong type: ", v.dump(), " (expected an integer)");
    const bool fits = v.is_number_unsigned()
                          ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                          : v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                                v.get<std::int64_t>() <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
    VINF_INPUT_CHECK(fits, field(where, key), " is out of range: ", v.dump());
    out = v.get<T>();
  } else {
    static_assert(std::is_floating_point_v<T>);
    VINF_INPUT_CHECK(v.is_number(), field(where, key), " has the wrong type: ", v.dump(), " (expected a number)");
    out = v.get<T>();
  }
}

void take_phase(const json& attn, const char* key, Phase& p, const std::string& where) {
  if (!attn.contains(key) || attn.at(key).is_null()) return;
  const json& ph = attn.at(key);
  const std::string w = where + "." + key;
  VINF_INPUT_CHECK(ph.is_object(), w, " must be an object {t, local_biase, global_biase}");
  take(ph, "t", p.t, w);
  take(ph, "local_biase", p.local_bias, w);
  take(ph, "global_biase", p.global_bias, w);
}

}  // namespace

namespace {

json read_released_file(const std::string& path) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "--import-vi-config: cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    VINF_INPUT_FAIL(path, " is not valid JSON: ", e.what());
  }
  VINF_INPUT_CHECK(j.is_object() && j.contains("plugin_configs") && j["plugin_configs"].is_object(), path,
                   " has no plugin_configs object (expected the released Video-Infinity config.json)");
  return j;
}

// Appends to unused (when given) the keys of obj that are not in known, as prefix + key.
void note_unused(std::vector<std::string>* unused, const json& obj, const std::string& prefix,
                 std::initializer_list<const char*> known) {
  if (unused == nullptr) return;
  for (const auto& item : obj.items())
    if (std::find_if(known.begin(), known.end(), [&](const char* k) { return item.key() == k; }) == known.end())
      unused->push_back(prefix + item.key());
}

}  // namespace

void import_released_config(const std::string& path, Config& c, std::vector<std::string>* unused) {
  const json j = read_released_file(path);
  const json& pc = j["plugin_configs"];
  const std::string where = path + ": plugin_configs";
  // conv_3d (the Conv3d plugin) is not mounted by the released code, so it changes nothing there
  // either; top_k_chunk_size is read by no code path.
  note_unused(unused, pc, "plugin_configs.", {"attn", "conv_layer"});
  if (pc.contains("attn")) {
    const json& a = pc["attn"];
    const std::string w = where + ".attn";
    VINF_INPUT_CHECK(a.is_object(), w, " must be an object");
    note_unused(unused, a, "plugin_configs.attn.",
                {"padding", "top_k", "attn_scale", "token_num_scale", "dynamic_scale", "local_phase", "global_phase"});
    take(a, "padding", c.local_frames, w);
    take(a, "top_k", c.global_frames, w);
    take(a, "attn_scale", c.attn_scale, w);
    take(a, "token_num_scale", c.token_num_scale, w);
    take(a, "dynamic_scale", c.dynamic_bias, w);
    take_phase(a, "local_phase", c.local_phase, w);
    take_phase(a, "global_phase", c.global_phase, w);
    // A phase set to null switches the biases off in the released code.
    if ((a.contains("local_phase") && a["local_phase"].is_null()) ||
        (a.contains("global_phase") && a["global_phase"].is_null()))
      c.dynamic_bias = false;
    VINF_INPUT_CHECK(c.local_frames >= 0, w, ".padding (--vi.local-frames) must be >= 0, got ", c.local_frames);
    VINF_INPUT_CHECK(c.global_frames >= 0, w, ".top_k (--vi.global-frames) must be >= 0, got ", c.global_frames);
    VINF_INPUT_CHECK(c.attn_scale > 0.f, w, ".attn_scale (--vi.attn-scale) must be > 0, got ", c.attn_scale);
  }
  if (pc.contains("conv_layer")) {
    VINF_INPUT_CHECK(pc["conv_layer"].is_object(), where, ".conv_layer must be an object");
    note_unused(unused, pc["conv_layer"], "plugin_configs.conv_layer.", {"padding"});
    take(pc["conv_layer"], "padding", c.conv_halo, where + ".conv_layer");
    VINF_INPUT_CHECK(c.conv_halo >= 0, where, ".conv_layer.padding (--vi.conv-halo) must be >= 0, got ", c.conv_halo);
  }
}

ReleasedPipe import_released_pipe(const std::string& path) {
  const json j = read_released_file(path);
  ReleasedPipe r;
  note_unused(&r.unused, j, "", {"dtype", "devices", "seed", "pipe_configs", "plugin_configs"});
  if (j.contains("seed")) take(j, "seed", r.seed.emplace(), path + ": ");
  if (j.contains("dtype")) {
    const json& d = j["dtype"];
    VINF_INPUT_CHECK(d.is_string(), path, ": dtype has the wrong type: ", d.dump(),
                     " (expected \"torch.float16\", \"torch.bfloat16\" or \"torch.float32\")");
    const std::string name = d.get<std::string>();
    const std::string bare = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
    if (bare == "float16" || bare == "half") r.dtype = "f16";
    else if (bare == "bfloat16") r.dtype = "bf16";
    else if (bare == "float32" || bare == "float") r.dtype = "f32";
    else VINF_INPUT_FAIL(path, ": dtype '", name, "' is not torch.float16, torch.bfloat16 or torch.float32");
  }
  if (j.contains("devices")) {
    const json& d = j["devices"];
    VINF_INPUT_CHECK(d.is_array() && !d.empty(), path, ": devices must be a non-empty list of GPU numbers, got ",
                     d.dump());
    r.devices = static_cast<int>(d.size());
  }
  if (!j.contains("pipe_configs")) return r;
  const json& p = j["pipe_configs"];
  const std::string w = path + ": pipe_configs";
  VINF_INPUT_CHECK(p.is_object(), w, " must be an object");
  note_unused(&r.unused, p, "pipe_configs.",
              {"prompts", "steps", "guidance_scale", "fps", "num_frames", "height", "width", "export_fps"});
  if (p.contains("prompts")) {
    const json& ps = p["prompts"];
    VINF_INPUT_CHECK(ps.is_array() && !ps.empty(), w, ".prompts must be a non-empty list of strings, got ", ps.dump());
    std::vector<std::string>& out = r.prompts.emplace();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      VINF_INPUT_CHECK(ps[i].is_string(), w, ".prompts[", i, "] has the wrong type: ", ps[i].dump(),
                       " (expected a string)");
      out.push_back(ps[i].get<std::string>());
    }
  }
  if (p.contains("steps")) take(p, "steps", r.steps.emplace(), w);
  if (p.contains("guidance_scale")) take(p, "guidance_scale", r.guidance_scale.emplace(), w);
  if (p.contains("fps")) take(p, "fps", r.fps.emplace(), w);
  if (p.contains("num_frames")) {
    take(p, "num_frames", r.num_frames.emplace(), w);
    VINF_INPUT_CHECK(*r.num_frames >= 1 && *r.num_frames <= 1000000, w,
                     ".num_frames (frames per GPU, --video.frames / ranks) must be in [1, 1000000], got ",
                     *r.num_frames);
  }
  if (p.contains("height")) take(p, "height", r.height.emplace(), w);
  if (p.contains("width")) take(p, "width", r.width.emplace(), w);
  if (p.contains("export_fps")) take(p, "export_fps", r.export_fps.emplace(), w);
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
