// Internal to src/ops: canonical views the kernels expect.
#pragma once

#include "core/tensor.hpp"

namespace vinf::ops::detail {

// (rows, last) view of t whose leading dims merge into one: false (rows_view) or a throw naming
// op/arg (as_rows) if they don't.
bool rows_view(const Tensor& t, Tensor& out);
Tensor as_rows(const char* op, const char* arg, const Tensor& t);

// (N, C, T, S) view of a (N, C, ...) tensor: the trailing dims merged into at most two. With a
// second tensor of the same shape (an output), both get the same split.
Tensor as_nc_ts(const char* op, const char* arg, const Tensor& t, const Tensor* same_split_as = nullptr);

}  // namespace vinf::ops::detail
