// The explicit execution context every op takes (exec/context.hpp: where it runs, which arena holds
// its workspace, and the backend handles). Nothing in the op library reads hidden global state.
#pragma once

#include "core/tensor.hpp"
#include "exec/context.hpp"
#include "exec/profile.hpp"

namespace vinf {

// Checks that a tensor is where the context runs; names the op and argument otherwise.
void check_on_device(const ExecContext& ctx, const char* op, const char* arg, const Tensor& t);

}  // namespace vinf
