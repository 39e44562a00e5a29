// Naive references: one element at a time through the generic strided index.
#include <cmath>
#include <cstring>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"
#include "exec/activation_math.hpp"

namespace vinf::cpu::ref {

void copy(const Tensor& src, const Tensor& dst) {
  const std::int64_t n = dst.numel();
  const std::size_t es = dtype_size(dst.dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t so = offset_of(src, i), d = offset_of(dst, i);
    if (src.dtype == dst.dtype) {  // exact for every dtype, i64 included
      std::memcpy(static_cast<char*>(dst.data) + d * es, static_cast<const char*>(src.data) + so * es, es);
    } else {
      store_from_double(dst.data, dst.dtype, d, load_as_double(src.data, src.dtype, so));
    }
  }
}

void fill(const Tensor& dst, double value) {
  for (std::int64_t i = 0, n = dst.numel(); i < n; ++i) store_from_double(dst.data, dst.dtype, offset_of(dst, i), value);
}

void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out) {
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* po = out.ptr<float>();
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i) {
    const double va = pa[offset_of(a, i)], vb = pb[offset_of(b, i)];
    // beta == 0 ignores b (scale() passes b = x).
    po[offset_of(out, i)] = static_cast<float>(alpha * va + (beta == 0.f ? 0.0 : beta * vb));
  }
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
    out.ptr<float>()[offset_of(out, i)] = a.ptr<float>()[offset_of(a, i)] * b.ptr<float>()[offset_of(b, i)];
}

void activation(exec::Activation act, const Tensor& x, const Tensor& out) {
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
    out.ptr<float>()[offset_of(out, i)] = static_cast<float>(exec::activate<double>(act, x.ptr<float>()[offset_of(x, i)]));
}

void geglu(const Tensor& x, const Tensor& out) {
  const int last = out.rank() - 1;
  const std::int64_t d = out.size(last);
  const Tensor value = x.slice(last, 0, d), gate = x.slice(last, d, d);
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i) {
    const double a = value.ptr<float>()[offset_of(value, i)];
    const double g = gate.ptr<float>()[offset_of(gate, i)];
    out.ptr<float>()[offset_of(out, i)] = static_cast<float>(a * exec::gelu(g));
  }
}

}  // namespace vinf::cpu::ref
