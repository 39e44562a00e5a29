#include "ops/context.hpp"

#include "core/error.hpp"

namespace vinf {

void check_on_device(const ExecContext& ctx, const char* op, const char* arg, const Tensor& t) {
  VINF_CHECK(t.device == ctx.device, op, ": ", arg, " ", t.describe(), " is not on the context's device ",
             ctx.device.name());
  VINF_CHECK(t.data != nullptr || t.numel() == 0, op, ": ", arg, " ", t.describe(), " has no data");
}

}  // namespace vinf
