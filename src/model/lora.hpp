// LoRA (Hu et al., low-rank adaptation) on the UNet's attention projections: each of to_q, to_k,
// to_v and to_out.0 of every attention module (spatial, cross, temporal, transformer_in) gets
//   W' = W + (alpha / rank) B A,   A [rank, in], B [out, rank]
// with A drawn N(0, 1 / in) and B zero at the start, so training starts from the model itself.
//
// The file is diffusers' (PEFT) LoRA layout: `unet.<module>.lora_A.weight` and
// `unet.<module>.lora_B.weight` for module `down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q`
// and so on, F32, with metadata `lora_rank` and `lora_alpha` (alpha = rank when absent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"

namespace vinf::model {

// The base weights LoRA adapts: every attention projection's weight among `params`.
std::vector<ParamSpec> lora_targets(const std::vector<ParamSpec>& params);

class LoraAdapters {
 public:
  // New adapters of `rank` for every target, drawn from `seed` (A) and zero (B), on the arena's device.
  LoraAdapters(Arena& arena, ExecContext& ctx, const std::vector<ParamSpec>& params, int rank, float alpha,
               std::uint64_t seed);
  // The adapters of a LoRA file, checked against the model's parameters: every key must name an
  // attention projection of the model with matching shapes. Throws vinf::InputError naming the
  // file and key otherwise.
  static LoraAdapters load(Arena& arena, ExecContext& ctx, const std::string& path,
                           const std::vector<ParamSpec>& params);

  int rank() const { return rank_; }
  float alpha() const { return alpha_; }
  float scale() const { return alpha_ / static_cast<float>(rank_); }
  // Every adapter tensor ("<module>.lora_A.weight", "<module>.lora_B.weight") and its shape.
  const std::vector<std::pair<std::string, Shape>>& parameters() const { return specs_; }
  const Tensor* find(const std::string& name) const;

  // Writes the file (F32, the layout above) from host-visible memory.
  void save(ExecContext& ctx, const std::string& path) const;
  // W += scale * B A for every adapted weight of `weights` (any of its dtypes, on its device).
  void merge_into(ExecContext& ctx, const Weights& weights, float scale) const;

 private:
  LoraAdapters() = default;
  void allocate(Arena& arena);
  OwnedTensor memory_;
  std::vector<std::pair<std::string, Shape>> specs_;
  std::vector<Tensor> tensors_;
  int rank_ = 0;
  float alpha_ = 0;
};

}  // namespace vinf::model
