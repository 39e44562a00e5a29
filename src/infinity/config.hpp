// Video-Infinity settings (design.md §2, §5: the `[vi]` section and `--vi.*` options), their
// command-line form, the released code's JSON config, and the checks against a video's shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace vinf::infinity {

enum class Mode { off, compat, invariant, exact };
enum class HaloData { x, kv };            // what the halo and global rounds carry
enum class ExchangePattern { three_round, fused };

struct Phase {
  std::int64_t t = 800;
  float local_bias = 0.f, global_bias = 0.f;
};

struct Config {
  Mode mode = Mode::invariant;
  int local_frames = 8;    // p: attention halo on each side
  int global_frames = 16;  // G
  int conv_halo = 4;       // c
  float attn_scale = 1.f;
  bool token_num_scale = false;
  bool dynamic_bias = true;
  Phase local_phase{800, 10.f, 0.f};   // applies while t < local_phase.t
  Phase global_phase{800, 0.f, 10.f};  // applies while t >= global_phase.t
  bool sync_groupnorm = false;         // compat only: the paper's synchronised GroupNorm
  HaloData halo = HaloData::x;
  ExchangePattern exchange = ExchangePattern::three_round;

  // The biases added to the local and global columns at timestep t.
  void biases(std::int64_t t, float& local, float& global) const;
};

const char* mode_name(Mode m);
const char* halo_name(HaloData h);
const char* exchange_name(ExchangePattern e);

// A reference to one setting inside a Config, by its type.
using FieldRef = std::variant<int*, std::int64_t*, float*, bool*, Mode*, HaloData*, ExchangePattern*>;

// One Video-Infinity setting, described once. Everything that lists the settings is made from
// fields(): the `--vi.NAME` options and their help, the `[vi] NAME` keys of an INI file, run.json's
// `vi` record, and the import of the released code's JSON config.
struct Field {
  const char* name;      // "local-frames": --vi.local-frames, [vi] local-frames, run.json vi.local-frames
  const char* help;
  const char* released;  // its key under the released config's plugin_configs ("attn.padding"), or nullptr
  FieldRef (*ref)(Config&);
  double lo = 0, hi = 0;  // a number's range: [lo, hi], or (lo, hi] with lo_open
  bool lo_open = false;
};
const std::vector<Field>& fields();

// A choice field's value from its name (mode, halo, exchange); throws vinf::InputError naming the
// option and the names it takes.
void set_choice(const Field& f, Config& c, const std::string& name);
// The name of a choice field's value.
std::string choice_name(const Field& f, const Config& c);

// The checks of a Config whatever its source (defaults, the released file, options); throws
// vinf::InputError naming the option.
void validate(const Config& c);

// Applies the released code's JSON config (`plugin_configs.attn`: padding, top_k, attn_scale,
// token_num_scale, dynamic_scale, local_phase, global_phase; `plugin_configs.conv_layer.padding`)
// to c. `pipe_configs` belongs to `vinf generate` and is not read here. Throws vinf::InputError
// naming the file and key for what it cannot read. With unused, the plugin_configs keys that
// change nothing are appended to it by their dotted names (`plugin_configs.attn.top_k_chunk_size`,
// and `plugin_configs.conv_3d`, which the released code does not mount either).
void import_released_config(const std::string& path, Config& c, std::vector<std::string>* unused = nullptr);

// What `vinf generate` takes from the released config besides plugin_configs: `pipe_configs`
// (prompts, steps, guidance_scale, fps, num_frames per GPU, height, width, export_fps) and the
// top-level seed, each when present. dtype and devices are read so that a run can say how it
// differs; every other key (master_port, base_path, pipe_configs.file_name, ...) is listed in
// unused. Throws vinf::InputError naming the file and field for a wrong type; the values are
// checked where they become options.
struct ReleasedPipe {
  std::optional<std::vector<std::string>> prompts;
  std::optional<int> steps;
  std::optional<std::int64_t> num_frames, height, width, seed;
  std::optional<double> guidance_scale, fps, export_fps;
  std::optional<std::string> dtype;  // as vinf names it: f16, bf16, f32
  std::optional<int> devices;        // how many the file lists
  std::vector<std::string> unused;   // dotted names
};
ReleasedPipe import_released_pipe(const std::string& path);

// Checks a Config against the partition: `frames` in total over `clips` clips. Throws
// vinf::InputError (the same on every rank) when frames do not divide, or p, c or G do not fit.
void check_partition(const Config& c, std::int64_t frames, int clips);

// The frames of one clip when `frames` are split over `clips` ranks: as evenly as possible, the
// later clips taking the extra frames ([k F / N, (k + 1) F / N)). Modes compat and invariant
// split evenly (check_partition); off and exact take any split.
struct FrameRange {
  std::int64_t first = 0, count = 0;
};
FrameRange clip_frames(std::int64_t frames, int clips, int clip);
std::vector<std::int64_t> clip_frame_counts(std::int64_t frames, int clips);

// The reach of a TemporalConvLayer's four (3,1,1) convolutions: the halo that makes exact mode's
// temporal convolutions equal the plain model's.
inline constexpr int kTemporalConvReach = 4;

}  // namespace vinf::infinity
