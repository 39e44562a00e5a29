// CPU backend state: the oneDNN engine and stream, and the convolution plans built so far (creating
// a oneDNN primitive costs milliseconds; a UNet step reuses a few dozen shapes).
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <string>
#include <unordered_map>

namespace vinf::cpu {

struct ConvPlan;

class CpuContext {
 public:
  CpuContext();
  ~CpuContext();
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>>& conv_plans() { return conv_plans_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<std::string, std::unique_ptr<ConvPlan>> conv_plans_;
};

}  // namespace vinf::cpu
