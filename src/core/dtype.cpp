#include "core/dtype.hpp"

namespace vinf {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType& out) {
  if (s == "f32" || s == "float32" || s == "fp32") out = DType::f32;
  else if (s == "f16" || s == "float16" || s == "fp16" || s == "half") out = DType::f16;
  else if (s == "bf16" || s == "bfloat16") out = DType::bf16;
  else if (s == "f64" || s == "float64") out = DType::f64;
  else if (s == "i64" || s == "int64") out = DType::i64;
  else return false;
  return true;
}

std::string Device::name() const {
  if (kind == DeviceKind::cpu) return index == 0 ? std::string("cpu") : "cpu:" + std::to_string(index);
  return "cuda:" + std::to_string(index);
}

}  // namespace vinf
