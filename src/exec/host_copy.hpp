// A copy between two views in host memory of the same shape and dtype, any strides: the gather
// before and the scatter after a host<->device transfer of a strided host tensor.
#pragma once

#include "core/tensor.hpp"

namespace vinf::exec {

// dst = src, element for element (bytes unchanged, no conversion). Both on the host, same shape and
// dtype; overlapping views are not allowed.
void copy_host(const Tensor& src, const Tensor& dst);

}  // namespace vinf::exec
