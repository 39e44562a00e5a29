#include "train/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/h5file.hpp"

namespace vinf::train {

namespace {

constexpr std::int64_t C = kShardChunk;
std::int64_t chunks_of(std::int64_t n) { return std::max<std::int64_t>(1, (n + C - 1) / C); }

// Writes one buffer's shard as whole chunks (the last one zero-padded).
void write_part(io::H5File& f, const char* name, std::int64_t n, const Shard& s, const float* data) {
  const std::int64_t row0 = s.count == 0 ? 0 : s.first / C, rows = s.count == 0 ? 0 : (s.count + C - 1) / C;
  std::vector<float> padded(static_cast<std::size_t>(rows * C), 0.f);
  if (s.count > 0) std::copy(data, data + s.count, padded.begin());
  f.write_frames(name, {chunks_of(n), C}, 0, row0, rows, padded.data());
}

void read_part(const io::H5File& f, const char* name, const Shard& s, float* out) {
  if (s.count == 0) return;
  const std::int64_t row0 = s.first / C, row1 = (s.first + s.count + C - 1) / C;
  std::vector<float> rows(static_cast<std::size_t>((row1 - row0) * C));
  f.read_frames(name, 0, row0, row1 - row0, rows.data());
  const auto skip = static_cast<std::size_t>(s.first - row0 * C);
  std::copy(rows.begin() + static_cast<std::ptrdiff_t>(skip), rows.begin() + static_cast<std::ptrdiff_t>(skip + s.count),
            out);
}

}  // namespace

void write_train_checkpoint(MPI_Comm comm, const std::string& path, const TrainCheckpoint& c, const Shard& shard,
                            const float* params, const float* m, const float* v) {
  VINF_CHECK((shard.count == 0 || shard.first % C == 0) && shard.first + shard.count <= c.trained, "write_train_checkpoint: shard [",
             shard.first, ", ", shard.first + shard.count, ") of ", c.trained);
  const std::string partial = path + ".partial";
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  try {
    io::H5File f = io::H5File::create(comm, partial);
    f.set_text("/", "format", kTrainCheckpointFormat);
    f.set_int("/", "format_version", kTrainCheckpointVersion);
    f.set_text("/", "vinf_version", VINF_VERSION);
    write_part(f, "/params", c.trained, shard, params);
    write_part(f, "/adam_m", c.trained, shard, m);
    write_part(f, "/adam_v", c.trained, shard, v);
    f.create_group("/train");
    const nlohmann::ordered_json state = {{"step", c.step},           {"optimizer_steps", c.optimizer_steps},
                                          {"trained", c.trained},     {"world_size", c.world_size},
                                          {"zero", c.zero},           {"chunk", C}};
    f.write_text("/train/state", state.dump());
    f.write_text("/train/settings", c.settings_json);
    f.write_text("/train/log", c.log_csv);
    f.close();
  } catch (...) {
    if (rank == 0) std::remove(partial.c_str());
    throw;
  }
  io::commit_partial(comm, partial, path);
}

TrainCheckpoint read_train_checkpoint_info(const std::string& path) {
  const io::H5File f = io::H5File::open_serial(path);
  VINF_INPUT_CHECK(f.has_attribute("/", "format") && f.text("/", "format") == kTrainCheckpointFormat, path,
                   " is not a vinf training checkpoint (no format attribute '", kTrainCheckpointFormat, "')");
  const std::int64_t version = f.integer("/", "format_version");
  VINF_INPUT_CHECK(version == kTrainCheckpointVersion, path, " has training checkpoint format version ", version,
                   "; this vinf reads version ", kTrainCheckpointVersion);
  TrainCheckpoint c;
  c.path = path;
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(f.read_text("/train/state"));
    c.step = state.at("step").get<std::int64_t>();
    c.optimizer_steps = state.at("optimizer_steps").get<std::int64_t>();
    c.trained = state.at("trained").get<std::int64_t>();
    c.world_size = state.at("world_size").get<std::int64_t>();
    c.zero = state.at("zero").get<std::int64_t>();
    VINF_INPUT_CHECK(state.at("chunk").get<std::int64_t>() == C, path, ": chunks of ", state.at("chunk").dump(),
                     " elements; this vinf uses ", C);
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(path, ": /train/state is not the state this vinf writes: ", e.what());
  }
  c.settings_json = f.read_text("/train/settings");
  c.log_csv = f.read_text("/train/log");
  VINF_INPUT_CHECK(c.step >= 0 && c.optimizer_steps >= 0 && c.trained >= 1, path, ": a state of step ", c.step,
                   " with ", c.trained, " trained elements (damaged?)");
  const Shape expect{chunks_of(c.trained), C};
  for (const char* name : {"/params", "/adam_m", "/adam_v"})
    VINF_INPUT_CHECK(f.shape(name) == expect, path, ": ", name, " is ", f.shape(name).str(), ", not ", expect.str(),
                     " for ", c.trained, " trained elements");
  return c;
}

void read_train_checkpoint_part(const std::string& path, const Shard& part, float* params, float* m, float* v) {
  const io::H5File f = io::H5File::open_serial(path);
  if (params) read_part(f, "/params", part, params);
  if (m) read_part(f, "/adam_m", part, m);
  if (v) read_part(f, "/adam_v", part, v);
}

}  // namespace vinf::train
