// Naive banded attention: for each row, two passes over the visible keys (max, then the
// normalised weighted sum), double accumulation.
#include <cmath>
#include <vector>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const exec::AttentionParams& p, const Tensor* lse) {
  const std::int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const std::int64_t Lk = k.size(2), Dv = v.size(3), G = kg ? kg->size(2) : 0;
  std::vector<double> acc(static_cast<std::size_t>(Dv));
  auto dot = [&](std::int64_t b, std::int64_t h, std::int64_t i, const Tensor& keys, std::int64_t j) {
    double s = 0;
    for (std::int64_t c = 0; c < D; ++c) s += static_cast<double>(at_f32(q, b, h, i, c)) * at_f32(keys, b, h, j, c);
    return s;
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Lq; ++i) {
        std::int64_t lo, hi;
        exec::attention_band(p, i, Lk, lo, hi);
        const std::int64_t visible = std::max<std::int64_t>(0, hi - lo + 1) + G;
        float* row_lse = lse ? static_cast<float*>(lse->data) + (b * H + h) * Lq + i : nullptr;
        if (row_lse) *row_lse = -INFINITY;
        if (visible == 0) {
          for (std::int64_t c = 0; c < Dv; ++c) at_f32(out, b, h, i, c) = 0.f;
          continue;
        }
        double factor = p.scale;
        if (p.token_count_log_base > 0.f)
          factor *= std::log(static_cast<double>(visible)) / std::log(static_cast<double>(p.token_count_log_base));
        auto score = [&](bool global, std::int64_t j) {
          return dot(b, h, i, global ? *kg : k, j) * factor + (global ? p.global_bias : p.local_bias);
        };
        double mx = -INFINITY;
        for (std::int64_t j = lo; j <= hi; ++j) mx = std::max(mx, score(false, j));
        for (std::int64_t j = 0; j < G; ++j) mx = std::max(mx, score(true, j));
        if (mx == -INFINITY) {  // every visible key masked by a -inf bias: zeros, as for no key
          for (std::int64_t c = 0; c < Dv; ++c) at_f32(out, b, h, i, c) = 0.f;
          continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0;
        auto accumulate = [&](bool global, std::int64_t j) {
          const double w = std::exp(score(global, j) - mx);
          sum += w;
          const Tensor& vals = global ? *vg : v;
          for (std::int64_t c = 0; c < Dv; ++c) acc[static_cast<std::size_t>(c)] += w * at_f32(vals, b, h, j, c);
        };
        for (std::int64_t j = lo; j <= hi; ++j) accumulate(false, j);
        for (std::int64_t j = 0; j < G; ++j) accumulate(true, j);
        for (std::int64_t c = 0; c < Dv; ++c) at_f32(out, b, h, i, c) = static_cast<float>(acc[static_cast<std::size_t>(c)] / sum);
        if (row_lse) *row_lse = static_cast<float>(mx + std::log(sum));
      }
}

}  // namespace vinf::cpu::ref
