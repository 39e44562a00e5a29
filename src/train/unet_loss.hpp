// The training objective of the UNet and its gradients: epsilon prediction,
//   noisy = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps,  loss = mean((unet(noisy, t, text) - eps)^2),
// one timestep per sample, each sample a whole clip (the plain model: no Video-Infinity context).
// The UNet is the one model/unet3d.hpp runs for inference, written here as a differentiable graph
// (train/graph.hpp) in f32.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "train/graph.hpp"

namespace vinf::train {

// One batch of the objective: x0 and eps (B, C, F, H, W), text (B, L, D), on the context's device.
struct LossBatch {
  Tensor x0, eps, text;
  std::vector<std::int64_t> timesteps;  // one per sample
  double fps = 24;
};

struct LossResult {
  double sum_squares = 0;  // sum over the batch's elements of (pred - eps)^2
  std::int64_t elements = 0;
  // Wall time of the UNet's forward pass (to the prediction) and of the backward pass (from the
  // loss's gradient to every parameter's), with the device synchronised at each end.
  double forward_seconds = 0, backward_seconds = 0;
};

// checkpoint_activations: every block layer (resnet, temporal convolution and transformers) and
// the mid block keep only their inputs in the forward pass and run again in the backward pass
// (Graph::checkpoint): less memory for a second forward's time, the same gradients to the order of
// their sums.
//
// lora_scale: the factor of LoRA adapters among the parameters (Graph).
//
// products: the linear layers' products in f32 or in bf16 (Graph::set_products).
//
// profile, when given, collects the forward and backward passes' time by op (Graph::set_profile).
//
// Runs the UNet forward on the batch and back, adding into `grads` the gradient of
//   sum_squares / loss_elements
// (the loss of a whole batch of loss_elements elements, of which this is a part: the gradients of
// the parts add up to the whole's), and into grad_x0 (when given, x0's shape, zeroed by the caller)
// the gradient with respect to x0. `params` gives every parameter's value by name.
LossResult unet_loss_backward(ExecContext& ctx, const model::UNetConfig& config,
                              const ParamLookup& params, ParamGrads& grads,
                              const std::vector<float>& alphas_cumprod, const LossBatch& batch,
                              std::int64_t loss_elements, const Tensor* grad_x0, bool checkpoint_activations = false,
                              float lora_scale = 1.f, Graph::Profile* profile = nullptr,
                              DType products = DType::f32);

}  // namespace vinf::train
