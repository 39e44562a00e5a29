// Tensor parallelism's one collective (`--parallel.tensor T`): the UNet's model::TensorGroup over
// a tensor group's communicator. The partial outputs are summed in f32 whatever the model's
// dtype (a 16-bit sum of T partials would round at every step), so that T ranks agree with one to
// float tolerance; the bytes counted are the f32 buffer's.
#pragma once

#include "model/tensor_group.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

class CommTensorGroup final : public model::TensorGroup {
 public:
  explicit CommTensorGroup(mpi::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void sum(ExecContext& ctx, const Tensor& t) override;

 private:
  mpi::Communicator& comm_;
};

}  // namespace vinf::infinity
