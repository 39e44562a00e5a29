// The ranks of a tensor-parallel group (`--parallel.tensor T`) as the models' transformer blocks
// (the UNet's, Wan's) see them. Each rank holds its share of the heads and feed-forward columns (ParamSplit) and
// computes a partial output of the attention output projection and of the feed-forward output
// projection; the group sums them. The model never calls MPI: the sum goes through this
// interface, implemented over a communicator outside the model (infinity::CommTensorGroup).
#pragma once

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::model {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // t (contiguous, on ctx's device, the model's dtype or f64 statistics) becomes the element-wise
  // sum over the group.
  virtual void sum(ExecContext& ctx, const Tensor& t) = 0;
};

}  // namespace vinf::model
