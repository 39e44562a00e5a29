// Reverse-mode differentiation over the op library, for training. A Graph runs each op forward as
// it is called and records how to send its output's gradient back to its inputs and parameters
// (ops/backward.hpp); backward() replays the records in reverse. A value stays alive while a
// record still needs it (shared ownership), so what the forward keeps is exactly what the backward
// reads, and each record is dropped as soon as it has run.
//
// Values are contiguous f32 tensors in the runtime's arena. Parameters are named tensors whose
// gradients, for the trainable ones, are added into a ParamGrads buffer; a frozen parameter gets no
// gradient and costs no product for one.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/norm.hpp"

namespace vinf::train {

// A value of the graph and the gradient of the loss with respect to it (allocated, as zeros, when
// the first contribution arrives; empty while none has). The value is the node's own memory, or
// another node's (`base`, kept alive): a checkpointed block's inputs when it is run again.
struct Node {
  Tensor value;
  OwnedTensor own;
  std::shared_ptr<Node> base;
  OwnedTensor grad;
  bool requires_grad = true;
};
using Var = std::shared_ptr<Node>;

// The gradients of a model's parameters, in one f32 buffer (in the order of the names given),
// for the trainable ones only.
class ParamGrads {
 public:
  ParamGrads(Arena& arena, const std::vector<std::pair<std::string, Shape>>& trainable);
  // The gradient of `name`, or null for a parameter that is not trained.
  const Tensor* find(const std::string& name) const;
  const Tensor& all() const { return buffer_; }  // every gradient, back to back
  const std::vector<std::pair<std::string, Tensor>>& list() const { return list_; }
  void zero(ExecContext& ctx);

  // When each gradient is complete, for communication that overlaps the backward pass: a recording
  // graph counts every step that will add into a parameter's gradient (use), and once the last of
  // them has run (done) the hook hears the parameter's index in list(). Setting a hook (or none)
  // starts the counts afresh.
  void set_ready_hook(std::function<void(std::size_t)> hook);
  void use(const std::string& name);
  void done(const std::string& name);

 private:
  OwnedTensor buffer_;
  std::vector<std::pair<std::string, Tensor>> list_;
  std::map<std::string, Tensor> by_name_;
  std::map<std::string, std::size_t> index_;
  std::vector<int> pending_;
  std::function<void(std::size_t)> ready_;
};

using ParamLookup = std::function<const Tensor*(const std::string&)>;

class Graph {
 public:
  // `params(name)` gives a parameter's value (null when the model has none of that name); grads,
  // when given, receives the trainable ones' gradients. A linear layer whose parameters include
  // LoRA adapters (`<prefix>.lora_A.weight`, `.lora_B.weight`, model/lora.hpp) adds
  // lora_scale * B A x to its output.
  Graph(ExecContext& ctx, ParamLookup params, ParamGrads* grads, float lora_scale = 1.f);

  ExecContext& ctx() { return ctx_; }
  // The parameter `name` in f32: the model's tensor, or an f32 copy of a 16-bit one (made once per
  // graph).
  const Tensor& param(const std::string& name) const;

  // Mixed precision: with bf16, the linear layers' products take bf16 operands (the activations,
  // the weights and the output's gradient rounded to bf16) and sum in f32, as tensor cores do;
  // every other op, the values between ops and the gradients stay f32. On CUDA the operands are
  // bf16 tensors and cuBLAS multiplies them; on the CPU they are f32 tensors holding the rounded
  // values, so the CPU computes the same products (each product of two bf16 numbers is exact in f32)
  // with its f32 kernels. f32 (the default): every product in f32.
  void set_products(DType products);
  DType products() const { return products_; }
  bool has_param(const std::string& name) const { return params_(name) != nullptr; }

  // A leaf: a copy of t (any strides, any float dtype on the context's device), with or without a
  // gradient; stored in `shape` when given (the same number of elements, in t's index order).
  Var input(const Tensor& t, bool requires_grad, const Shape& shape = {});
  // The gradient of v (zeros when none arrived). v's own gradient buffer, allocated if needed.
  const Tensor& grad(const Var& v);

  // Runs the recorded backward steps in reverse from `out`, whose gradient is `seed`.
  void backward(const Var& out, const Tensor& seed);

  // Where the time goes, op by op, for benchmarks (null, the default, times nothing). Each op's
  // forward run: the wall time since the previous op ended (bookkeeping of the graph included),
  // the context synchronised. The backward pass: each step's wall time, and a checkpointed block's
  // second forward run as "checkpoint: forward again". Attention is named with its shapes.
  struct Profile {
    std::map<std::string, double> forward, backward;
  };
  void set_profile(Profile* profile);

  // Activation checkpointing: runs block(graph, inputs) keeping none of its intermediate values,
  // only its inputs and output; the backward pass runs the block again, recording, on the same
  // inputs (the same numbers: the same ops on the same shapes) and sends the gradient through it.
  // The block must read nothing of the graph but `inputs` and the parameters.
  using Block = std::function<Var(Graph&, const std::vector<Var>&)>;
  Var checkpoint(const std::vector<Var>& inputs, const Block& block);

  // The ops. Parameter names are full keys ("conv_in.weight"); a layer's `prefix` names its
  // ".weight" and ".bias".
  Var linear(const Var& x, const std::string& prefix, bool bias = true);  // x [..., K]
  Var conv2d(const Var& x, const std::string& prefix, int stride, int pad);
  // GroupNorm of frame-images (N, C, H, W); with `clip_batch` B > 0 the temporal one, over the
  // clip view (B, C, F, H*W) of frame-major (B*F, C, H, W).
  Var group_norm(const Var& x, const std::string& prefix, int groups, float eps, ops::Activation act,
                 std::int64_t clip_batch = 0);
  Var layer_norm(const Var& x, const std::string& prefix, float eps);
  Var activation(const Var& x, ops::Activation act);
  Var geglu(const Var& x);
  // TemporalConvLayer's Conv3d (kt, 1, 1) over frame-major (B*F, C, H, W).
  Var temporal_conv(const Var& x, const std::string& prefix, std::int64_t clip_batch, int pad);
  Var add(const Var& a, const Var& b);
  Var scale(const Var& x, float s);
  // x (B*F, C, H, W) + e (B, C) broadcast over frames and pixels (the resnets' time embedding).
  Var add_per_sample(const Var& x, const Var& e, std::int64_t batch);
  // Attention of q (R, Lq, H*d), k (R, Lk, H*d), v (R, Lk, H*dv), heads split as the model splits them.
  Var attention(const Var& q, const Var& k, const Var& v, int heads, const ops::AttentionParams& p);
  // x (B, ...) repeated `times` along a new dim after the batch, flattened: (B*times, ...).
  Var repeat(const Var& x, std::int64_t times);
  // A contiguous copy of `view(x)` in `shape` (the same number of elements, in the view's index
  // order): view maps a contiguous tensor of x's shape to a view of it (reshape, then permute).
  Var copy_of_view(const Var& x, const std::function<Tensor(const Tensor&)>& view, const Shape& shape);
  Var concat_channels(const Var& a, const Var& b);                    // (N, Ca + Cb, H, W)
  Var upsample_nearest(const Var& x, std::int64_t h, std::int64_t w);  // to (N, C, h, w)

 private:
  Var make(const Shape& shape, bool requires_grad = true);
  Var linear_mixed(const Var& x, const std::string& prefix, bool bias);  // linear with bf16 products
  // The gradient of a parameter, or null when it is frozen; the next recorded step writes it.
  const Tensor* param_grad(const std::string& name) {
    const Tensor* g = grads_ ? grads_->find(name) : nullptr;
    if (g != nullptr) step_params_.push_back(name);
    return g;
  }
  const Tensor* grad_if(const Var& v) { return v->requires_grad ? &grad(v) : nullptr; }
  // Adds from's gradient into to's (the same shape), taking from's buffer over when to has none
  // yet: a value's gradient is complete when the step that made the value runs, and only that
  // step reads it.
  void pass_grad(const Var& from, const Var& to);
  // v's gradient buffer, uninitialised, when v has none yet (true): for a step that writes all of
  // it. False: v has one, to add into.
  bool fresh_grad(const Var& v);
  // Adds g into v's gradient (through `view` of it when given: a view of all of it), or copies g
  // there when v has none yet.
  void add_grad(const Tensor& g, const Var& v, const std::function<Tensor(const Tensor&)>& view = {});
  // `op` names the step in the profile (a string that outlives the graph: a literal, or label()'s).
  // The step takes the trainable parameters whose gradients were asked for since the previous one
  // (param_grad): it is the one that adds into them.
  void record(const char* op, std::function<void()> step) {
    if (profile_ != nullptr) forward_done(op);
    if (recording_) {
      for (const std::string& p : step_params_) grads_->use(p);
      steps_.push_back({op, std::move(step), std::move(step_params_)});
    }
    step_params_.clear();
  }
  void forward_done(const char* op);
  const char* label(const std::string& name);  // a stable copy of name
  // The products' operand for t (set_products): t's values rounded to bf16, as a bf16 tensor on
  // CUDA or an f32 tensor on the CPU. Weights' operands are made once per graph (by name).
  OwnedTensor operand(const Tensor& t);
  Tensor weight_operand(const std::string& name);
  // y (rows M, N) = a (M, K) b^T with b (N, K), or += with accumulate: one product of operands.
  void product(const Tensor& a, const Tensor& b_t, const Tensor& out, bool accumulate);

  ExecContext& ctx_;
  ParamLookup params_;
  ParamGrads* grads_;
  float lora_scale_;
  struct Step {
    const char* op;
    std::function<void()> run;
    std::vector<std::string> params;  // the trainable parameters whose gradients it adds into
  };
  std::vector<Step> steps_;
  std::vector<std::string> step_params_;
  Profile* profile_ = nullptr;
  bool profile_forward_ = true;
  std::chrono::steady_clock::time_point last_op_end_;
  std::shared_ptr<std::set<std::string>> labels_ = std::make_shared<std::set<std::string>>();
  bool recording_ = true;  // false inside a checkpointed block's first run
  DType products_ = DType::f32;
  // Copies of parameters made for this graph (and the checkpointed blocks it runs again): f32 ones
  // of 16-bit parameters, and the weights' products operands.
  std::shared_ptr<std::map<std::string, OwnedTensor>> copies_ = std::make_shared<std::map<std::string, OwnedTensor>>();
};

}  // namespace vinf::train
