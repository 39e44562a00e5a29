// CPU backend state: the oneDNN engine and stream, and the convolution and matrix-product plans
// built so far (creating a oneDNN primitive costs milliseconds; a UNet step reuses a few dozen
// shapes).
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <string>
#include <unordered_map>

namespace vinf::cpu {

struct ConvPlan {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;
  dnnl::memory::desc user_src, user_wei, user_dst, bias_md;
};

// A convolution's backward passes (cpu/conv.cpp): oneDNN's backward-data and backward-weights
// primitives, the reorders between our views and their layouts, the last ones adding into ours.
struct ConvBackwardPlan {
  dnnl::convolution_forward::primitive_desc hint;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_backward_weights weights;
  dnnl::memory::desc user_x, user_w, user_dy, user_dx, user_dw, bias_md;
  dnnl::reorder add_dx, add_dw;  // the primitives' results added into our dx and dw
};

struct MatmulPlan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias, mul;
};

class CpuContext {
 public:
  CpuContext() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>>& conv_plans() { return conv_plans_; }
  std::unordered_map<std::string, std::unique_ptr<MatmulPlan>>& matmul_plans() { return matmul_plans_; }
  std::unordered_map<std::string, std::unique_ptr<ConvBackwardPlan>>& conv_backward_plans() {
    return conv_backward_plans_;
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>> conv_plans_;
  std::unordered_map<std::string, std::unique_ptr<MatmulPlan>> matmul_plans_;
  std::unordered_map<std::string, std::unique_ptr<ConvBackwardPlan>> conv_backward_plans_;
};

}  // namespace vinf::cpu
