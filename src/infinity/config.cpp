#include "infinity/config.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <type_traits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace vinf::infinity {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::off: return "off";
    case Mode::compat: return "compat";
    case Mode::invariant: return "invariant";
    case Mode::exact: return "exact";
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

const char* halo_name(HaloData h) { return h == HaloData::x ? "x" : "kv"; }

const char* exchange_name(ExchangePattern e) { return e == ExchangePattern::fused ? "fused" : "three-round"; }

const std::vector<Field>& fields() {
  static const std::vector<Field> table{
      {"mode",
       "Video-Infinity mode: invariant (the result does not depend on the number of ranks), compat (reproduces "
       "the released code: zero halos at the video ends, per-rank global frames and GroupNorm statistics), exact "
       "(the unmodified model over the ranks: full temporal attention through an all-to-all, whole-video "
       "GroupNorm, 4-frame convolution halos; the window options below do not apply), or off (the plain model on "
       "each clip, no communication). A Wan2.1 model runs off unless this is given: exact (its latent "
       "frames over the ranks, the self-attention over every token) or invariant (Video-Infinity's windows on "
       "its joint attention: +-local-frames latent frames and global-frames shared frames, the phase settings; "
       "conv-halo, halo and sync-groupnorm do not apply)",
       nullptr, [](Config& c) -> FieldRef { return &c.mode; }},
      {"local-frames", "p: attention window half-width in frames, taken from each neighbouring clip", "attn.padding",
       [](Config& c) -> FieldRef { return &c.local_frames; }, 0, 100000},
      {"global-frames", "G: frames sampled across the video that every frame attends to", "attn.top_k",
       [](Config& c) -> FieldRef { return &c.global_frames; }, 0, 100000},
      {"conv-halo", "c: frames of each neighbouring clip around a temporal-conv layer", "conv_layer.padding",
       [](Config& c) -> FieldRef { return &c.conv_halo; }, 0, 100000},
      {"attn-scale", "factor on the attention logits", "attn.attn_scale",
       [](Config& c) -> FieldRef { return &c.attn_scale; }, 0, 1000, true},
      {"token-num-scale", "scale each query's logits by log(visible keys) / log(16)", "attn.token_num_scale",
       [](Config& c) -> FieldRef { return &c.token_num_scale; }},
      {"dynamic-bias", "add the phase biases below to the local / global columns", "attn.dynamic_scale",
       [](Config& c) -> FieldRef { return &c.dynamic_bias; }},
      {"local-phase-t", "local phase: applies while t < this", "attn.local_phase.t",
       [](Config& c) -> FieldRef { return &c.local_phase.t; }, 0, 1000},
      {"local-phase-local-bias", "local phase: the bias on the logits of the local (halo and own) frames",
       "attn.local_phase.local_biase", [](Config& c) -> FieldRef { return &c.local_phase.local_bias; }, -1000, 1000},
      {"local-phase-global-bias", "local phase: the bias on the logits of the global frames",
       "attn.local_phase.global_biase", [](Config& c) -> FieldRef { return &c.local_phase.global_bias; }, -1000, 1000},
      {"global-phase-t", "global phase: applies while t >= this", "attn.global_phase.t",
       [](Config& c) -> FieldRef { return &c.global_phase.t; }, 0, 1000},
      {"global-phase-local-bias", "global phase: the bias on the logits of the local (halo and own) frames",
       "attn.global_phase.local_biase", [](Config& c) -> FieldRef { return &c.global_phase.local_bias; }, -1000, 1000},
      {"global-phase-global-bias", "global phase: the bias on the logits of the global frames",
       "attn.global_phase.global_biase", [](Config& c) -> FieldRef { return &c.global_phase.global_bias; }, -1000, 1000},
      {"sync-groupnorm",
       "compat mode: the paper's synchronised temporal GroupNorm (mean of per-rank means, variance about it); "
       "invariant mode always uses whole-video statistics",
       nullptr, [](Config& c) -> FieldRef { return &c.sync_groupnorm; }},
      {"halo",
       "x: exchange the attention input and project halo/global frames locally (at most half the bytes; halo "
       "frames that are global frames travel once); kv: exchange K and V as the released code does",
       nullptr, [](Config& c) -> FieldRef { return &c.halo; }},
      {"exchange",
       "three-round: global all-gather, then halos in pairs (0,1),(2,3)..., then (1,2),(3,4)...; fused: both "
       "neighbours at once",
       nullptr, [](Config& c) -> FieldRef { return &c.exchange; }},
  };
  return table;
}

void set_choice(const Field& f, Config& c, const std::string& name) {
  const FieldRef ref = f.ref(c);
  if (Mode* const* m = std::get_if<Mode*>(&ref)) {
    if (name == "invariant") **m = Mode::invariant;
    else if (name == "compat") **m = Mode::compat;
    else if (name == "off") **m = Mode::off;
    else if (name == "exact") **m = Mode::exact;
    else VINF_INPUT_FAIL("--vi.mode must be invariant, compat, exact or off, got '", name, "'");
  } else if (HaloData* const* h = std::get_if<HaloData*>(&ref)) {
    VINF_INPUT_CHECK(name == "x" || name == "kv", "--vi.halo must be x or kv, got '", name, "'");
    **h = name == "x" ? HaloData::x : HaloData::kv;
  } else if (ExchangePattern* const* e = std::get_if<ExchangePattern*>(&ref)) {
    VINF_INPUT_CHECK(name == "three-round" || name == "fused", "--vi.exchange must be three-round or fused, got '",
                     name, "'");
    **e = name == "fused" ? ExchangePattern::fused : ExchangePattern::three_round;
  } else {
    VINF_FAIL("--vi.", f.name, " is not a choice");
  }
}

std::string choice_name(const Field& f, const Config& c) {
  Config copy = c;
  const FieldRef ref = f.ref(copy);
  if (Mode* const* m = std::get_if<Mode*>(&ref)) return mode_name(**m);
  if (HaloData* const* h = std::get_if<HaloData*>(&ref)) return halo_name(**h);
  if (ExchangePattern* const* e = std::get_if<ExchangePattern*>(&ref)) return exchange_name(**e);
  VINF_FAIL("--vi.", f.name, " is not a choice");
}

void validate(const Config& c) {
  // Each number in its field's range, wherever it came from (the options check theirs when they
  // are read; the released file's values arrive here unchecked). NaN and infinity are outside.
  Config copy = c;
  for (const Field& f : fields())
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
            const auto v = static_cast<double>(*p);
            const bool ok = std::isfinite(v) && (f.lo_open ? v > f.lo : v >= f.lo) && v <= f.hi;
            VINF_INPUT_CHECK(ok, "--vi.", f.name, " must be in ", f.lo_open ? "(" : "[", f.lo, ", ", f.hi, "], got ", *p);
          }
        },
        f.ref(copy));
  VINF_INPUT_CHECK(!(c.sync_groupnorm && (c.mode == Mode::invariant || c.mode == Mode::exact)),
                   "--vi.sync-groupnorm is a compat-mode option (", mode_name(c.mode),
                   " mode always normalises over the whole video); drop it or use --vi.mode compat");
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
  // The objects under plugin_configs that the table's keys name ("attn", "attn.local_phase", ...),
  // each opened once, in the order first named; a missing or null one has no reader.
  struct Object {
    std::string name;
    std::unique_ptr<io::JsonConfig> reader;
  };
  std::vector<Object> objects;
  objects.push_back({"", std::make_unique<io::JsonConfig>(j["plugin_configs"], path, "plugin_configs")});
  const json* raw_attn = j["plugin_configs"].contains("attn") ? &j["plugin_configs"]["attn"] : nullptr;
  std::function<io::JsonConfig*(const std::string&)> object = [&](const std::string& name) -> io::JsonConfig* {
    for (Object& o : objects)
      if (o.name == name) return o.reader.get();
    const std::size_t dot = name.rfind('.');
    const std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
    io::JsonConfig* parent = object(dot == std::string::npos ? "" : name.substr(0, dot));
    const json* v = parent ? parent->find(key) : nullptr;
    objects.push_back({name, v ? std::make_unique<io::JsonConfig>(*v, path, "plugin_configs." + name) : nullptr});
    // A phase set to null switches the biases off in the released code.
    if (!v && parent && name.rfind("attn.", 0) == 0 && raw_attn && raw_attn->is_object() && raw_attn->contains(key))
      c.dynamic_bias = false;
    return objects.back().reader.get();
  };
  auto parent_of = [](const std::string& key) { return key.substr(0, key.rfind('.')); };
  // conv_3d (the Conv3d plugin) is not mounted by the released code, so it changes nothing there
  // either; top_k_chunk_size is read by no code path: both end up in the unused list.
  for (const Field& f : fields())
    if (f.released) object(std::string(f.released).substr(0, std::string(f.released).find('.')));
  note_unused(unused, *objects.front().reader);
  for (const Field& f : fields()) {
    if (!f.released) continue;
    const std::string key = f.released;
    io::JsonConfig* obj = object(parent_of(key));
    if (!obj) continue;
    std::visit(
        [&](auto* p) {
          if constexpr (std::is_arithmetic_v<std::remove_pointer_t<decltype(p)>>) obj->read(key.substr(key.rfind('.') + 1), *p);
        },
        f.ref(c));
  }
  // The keys no field read: each top-level object's nested objects first, then its own.
  for (const Object& top : objects) {
    if (top.name.empty() || top.name.find('.') != std::string::npos) continue;
    for (const Object& inner : objects)
      if (inner.reader && inner.name.rfind(top.name + ".", 0) == 0) note_unused(unused, *inner.reader);
    if (top.reader) note_unused(unused, *top.reader);
  }
  const std::string w = path + ": plugin_configs.attn";
  VINF_INPUT_CHECK(c.local_frames >= 0, w, ".padding (--vi.local-frames) must be >= 0, got ", c.local_frames);
  VINF_INPUT_CHECK(c.global_frames >= 0, w, ".top_k (--vi.global-frames) must be >= 0, got ", c.global_frames);
  VINF_INPUT_CHECK(c.attn_scale > 0.f, w, ".attn_scale (--vi.attn-scale) must be > 0, got ", c.attn_scale);
  VINF_INPUT_CHECK(c.conv_halo >= 0, path, ": plugin_configs.conv_layer.padding (--vi.conv-halo) must be >= 0, got ",
                   c.conv_halo);
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

FrameRange clip_frames(std::int64_t frames, int clips, int clip) {
  const std::int64_t first = clip * frames / clips;
  return {first, (clip + 1) * frames / clips - first};
}

std::vector<std::int64_t> clip_frame_counts(std::int64_t frames, int clips) {
  std::vector<std::int64_t> counts;
  for (int k = 0; k < clips; ++k) counts.push_back(clip_frames(frames, clips, k).count);
  return counts;
}

void check_partition(const Config& c, std::int64_t frames, int clips) {
  if (c.mode == Mode::off) return;
  if (c.mode == Mode::exact) {
    // Any split; every clip but a lone one needs the convolutions' reach of frames, since its halo
    // comes from the neighbouring clips only.
    const std::int64_t fewest = frames / clips;
    VINF_INPUT_CHECK(clips == 1 || fewest >= kTemporalConvReach, "--vi.mode exact: ", frames, " frames over ", clips,
                     " ranks leaves ", fewest, " frame(s) on a rank, and each needs at least ", kTemporalConvReach,
                     " (the reach of the temporal convolutions); use at most ",
                     std::max<std::int64_t>(frames / kTemporalConvReach, 1), " frame ranks");
    return;
  }
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
