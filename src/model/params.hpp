// The UNet's parameter names and shapes, generated from the config by diffusers' naming grammar
// (model-spec §3). The loader checks a weight file against this list; make-model writes it;
// inspect and the tests count it without allocating anything.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "model/config.hpp"

namespace vinf::model {

// How tensor parallelism (`--parallel.tensor T`, Megatron style) divides a parameter of the
// transformer blocks over the T ranks of a tensor group: `units` split as evenly as possible
// (rank k of T takes units [k U / T, (k + 1) U / T)), each `unit` rows or columns wide.
// - heads_rows: Q, K, V projections, column-parallel: the rows of the rank's heads;
// - heads_cols: the attention output projection, row-parallel: the columns of its heads;
// - geglu_rows: the GEGLU projection (weight and bias): the rows of its feed-forward columns in
//   the value half and the same ones in the gate half;
// - ff_cols: the feed-forward output projection: the columns of its feed-forward columns.
// Everything else (convolutions, norms, the output projections' biases) is replicated.
struct ParamSplit {
  enum Kind { none, heads_rows, heads_cols, geglu_rows, ff_cols } kind = none;
  std::int64_t units = 0, unit = 1;
};

struct ParamSpec {
  std::string name;
  Shape shape;
  // Older names a weight file may use for this parameter (the loader takes the first present).
  // A 2-D parameter may also be stored as [out, in, 1, 1] (a 1x1 conv in the original layout).
  std::vector<std::string> aliases = {};
  ParamSplit split = {};
};

// Rank `rank` of a tensor group of `size`: which part of the full parameter it holds, as ranges
// [first, first + count) along `dim` of the full tensor, concatenated in order into `shape`.
// size 1 or a replicated parameter: the whole tensor (dim -1).
struct ParamShard {
  int dim = -1;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  Shape shape;
};
ParamShard param_shard(const ParamSpec& p, int rank, int size);

// Which rank of a tensor group of which size a model's weights belong to.
struct TensorShard {
  int rank = 0, size = 1;
};

// Units [first, first + count) of `units` that rank `rank` of `size` takes (as evenly as possible).
std::pair<std::int64_t, std::int64_t> split_units(std::int64_t units, int rank, int size);

// ".3": the index part of a module name.
inline std::string dot_index(std::size_t j) {
  std::string s(".");
  s += std::to_string(j);
  return s;
}

std::vector<ParamSpec> unet_parameters(const UNetConfig& c);
std::int64_t parameter_count(const std::vector<ParamSpec>& params);

// How random-weight models draw a parameter: value = shift + scale * N(0, 1). Linear and conv
// weights scale 1/sqrt(fan_in); norm scales (`*.weight` of rank 1, `*.gamma`) 1 + 0.1 N; biases 0.1 N.
struct RandomInit {
  float scale = 0.1f;
  float shift = 0.f;
};
RandomInit random_init(const ParamSpec& p);
// The top-level module a parameter belongs to: "conv_in", "time_embedding", "down_blocks.1", ...
std::string parameter_group(const std::string& name);

}  // namespace vinf::model
