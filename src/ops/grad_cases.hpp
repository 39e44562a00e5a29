// The backward passes' table: small cases of every op the UNet's backward uses, each a forward call
// and its backward call on the same inputs. check_gradients compares the backward's gradients with
// central finite differences of the forward, so a case needs no reference implementation of the
// gradient: the forward op, already checked against the references, is the reference.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/runtime.hpp"

namespace vinf::opcheck {

struct GradInput {
  std::string name;
  Shape shape;
  float scale = 1.f, shift = 0.f;  // drawn N(0, 1) * scale + shift
  bool differentiable = true;      // false: an input the op has no gradient for
};

struct GradCase {
  std::string family;  // "conv2d"
  std::string name;    // "conv2d 3x3 s2 3->4 7x6"
  std::vector<GradInput> inputs;
  std::vector<Shape> outputs;
  // Runs the forward op: inputs in, outputs written.
  std::function<void(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out)> forward;
  // Runs the backward op: adds into din[i] (zeroed; null for inputs without a gradient) the
  // gradient of sum(dout * out) with respect to input i.
  std::function<void(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& dout,
                     const std::vector<const Tensor*>& din)>
      backward;
};

std::vector<GradCase> grad_cases();

struct GradCheck {
  bool ok = true;
  double worst_ratio = 0;  // max over checked elements of |error| / allowed; <= 1 passes
  std::int64_t checked = 0;
  std::string report;      // the first few mismatches
};

// Runs the case on rt (a CPU runtime) and compares every differentiable input's gradient, element
// by element (up to `max_elements` spread over each input), with the central difference
// (L(x + h) - L(x - h)) / 2h of L = sum(dout * forward(x)) in double from the f32 outputs, with
// h = 1e-3 (1 + |x|). The f32 rounding of L's terms makes the difference noisy by about
// 1e-7 |L| / h, so an element passes within 1e-3 of the input's largest gradient magnitude
// plus 2e-3 of its own. On the table's cases the worst element uses under a third of that; a
// gradient off by 1% fails.
GradCheck check_gradients(const GradCase& c, Runtime& rt, std::uint64_t seed, std::int64_t max_elements = 96);

// Runs the case's backward on `device_rt` (CUDA) and on the CPU on the same inputs and output
// gradients, and compares every input's gradient within 1e-4 of its largest magnitude plus 1e-4
// of the element (the backends sum in different orders, CUDA partly with atomics).
GradCheck compare_backward(const GradCase& c, Runtime& device_rt, std::uint64_t seed);

}  // namespace vinf::opcheck
