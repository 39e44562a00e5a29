// One table of op cases drives the unit tests (every implementation against the CPU reference),
// `vinf selfcheck` and the Google Benchmark suites. A case builds its inputs in a CaseEnv and
// returns the call to run; the env remembers which tensors are outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.hpp"
#include "ops/context.hpp"

namespace vinf::opcheck {

class CaseEnv {
 public:
  // Tensors are created on ctx.device in `dtype`; random inputs are first rounded through
  // `round_to`, so a reference run in f32 sees exactly the values a f16/bf16 run sees. bf16 on the
  // CPU is --dtype bf16 there: bf16 weights (weight()), everything else f32.
  CaseEnv(ExecContext& ctx, DType dtype, DType round_to, std::uint64_t seed);

  ExecContext& ctx;
  const DType dtype;         // of inputs and outputs
  const DType weight_dtype;  // of the weights of matrix products and convolutions

  // N(0, 1) * scale + shift, deterministic per (seed, input number).
  Tensor input(const Shape& shape, float scale = 1.f, float shift = 0.f);
  // An input that is the weights of linear, conv2d or temporal_conv (drawn as input() draws).
  Tensor weight(const Shape& shape, float scale);
  // Fixed values (e.g. timesteps) in a given dtype.
  Tensor values(DType dt, const Shape& shape, const std::vector<double>& v);
  // An output to compare, prefilled with NaN so unwritten elements fail; `dt` defaults to dtype.
  Tensor output(const Shape& shape);
  Tensor output(DType dt, const Shape& shape);
  // Scratch that is not compared.
  Tensor scratch(DType dt, const Shape& shape);

  const std::vector<Tensor>& outputs() const { return outputs_; }

 private:
  Tensor hold(DType dt, const Shape& shape);
  Tensor random(DType dt, const Shape& shape, float scale, float shift);
  DType round_to_;
  std::uint64_t seed_, next_stream_ = 0;
  std::vector<OwnedTensor> owned_;
  std::vector<Tensor> outputs_;
};

// What a result may differ from the reference by, per element: atol + rtol * |reference|.
struct Tolerance {
  double atol = 0, rtol = 0;
};

struct OpCase {
  std::string family;  // "conv2d"
  std::string name;    // "conv2d 3x3 s2 6->4 9x12"
  double flops = 0;    // floating-point operations per run (multiply-add = 2)
  std::function<std::function<void()>(CaseEnv&)> setup;
  // The case's own tolerance for some dtypes, in place of the dtype's (opcheck::tolerance_for), and
  // why the dtype's does not fit this case. The reason is required: a case that overrides without
  // one is refused wherever its tolerance is asked for (tests, `vinf selfcheck`).
  std::vector<std::pair<DType, Tolerance>> tolerance = {};
  std::string tolerance_reason = {};
  std::int64_t head_dim = 0, value_dim = 0;  // attention's D and Dv (which CPU kernel runs)
  // Elements the op must at least move: its inputs read once and its output written once (0: not
  // given). The op benchmark turns it into GB/s and a fraction of the GPU's memory bandwidth.
  double traffic = 0;
};

// Whether `filter` selects the case, as `vinf selfcheck --filter` and VINF_OPS_FILTER in the
// op-table test read it: every case when empty, otherwise the cases whose name or family contains
// the text ("conv2d", "attention banded", "upsample_nearest").
bool matches_filter(const OpCase& c, const std::string& filter);

// Whether the case's op takes weights (linear, conv2d, temporal_conv).
bool takes_weights(const OpCase& c);

// Small shapes with odd sizes: every op, every code path.
std::vector<OpCase> unit_cases();
// VideoCrafter2 shapes for the benchmarks (large: seconds on a CPU).
std::vector<OpCase> bench_cases();

}  // namespace vinf::opcheck
