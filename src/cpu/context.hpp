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

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>> conv_plans_;
  std::unordered_map<std::string, std::unique_ptr<MatmulPlan>> matmul_plans_;
};

}  // namespace vinf::cpu
