#include "train/graph.hpp"

#include <chrono>

#include "core/error.hpp"
#include "ops/backward.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/resample.hpp"
#include "ops/runtime.hpp"

namespace vinf::train {
namespace {

bool has_grad(const Var& v) { return v->grad.data != nullptr; }

// (R, L, H*d) -> (R, H, L, d).
Tensor split_heads(const Tensor& t, int heads) {
  return t.reshape({t.size(0), t.size(1), heads, t.size(2) / heads}).permute({0, 2, 1, 3});
}

}  // namespace

ParamGrads::ParamGrads(Arena& arena, const std::vector<std::pair<std::string, Shape>>& trainable) {
  std::int64_t total = 0;
  for (const auto& [name, shape] : trainable) total += shape.numel();
  buffer_ = arena.empty(DType::f32, {total});
  std::int64_t at = 0;
  for (const auto& [name, shape] : trainable) {
    const Tensor view = buffer_.slice(0, at, shape.numel()).reshape(shape);
    list_.emplace_back(name, view);
    VINF_CHECK(by_name_.emplace(name, view).second, "ParamGrads: the parameter ", name, " is listed twice");
    index_.emplace(name, list_.size() - 1);
    at += shape.numel();
  }
  pending_.assign(list_.size(), 0);
}

void ParamGrads::set_ready_hook(std::function<void(std::size_t)> hook) {
  ready_ = std::move(hook);
  pending_.assign(list_.size(), 0);
}

void ParamGrads::use(const std::string& name) { ++pending_[index_.at(name)]; }

void ParamGrads::done(const std::string& name) {
  const std::size_t i = index_.at(name);
  VINF_CHECK(pending_[i] > 0, "ParamGrads: the gradient of ", name, " was completed more often than it was used");
  if (--pending_[i] == 0 && ready_) ready_(i);
}

const Tensor* ParamGrads::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

void ParamGrads::zero(ExecContext& ctx) {
  if (buffer_.numel() > 0) ops::fill(ctx, buffer_, 0.0);
}

Graph::Graph(ExecContext& ctx, ParamLookup params, ParamGrads* grads, float lora_scale)
    : ctx_(ctx), params_(std::move(params)), grads_(grads), lora_scale_(lora_scale) {}

const Tensor& Graph::param(const std::string& name) const {
  const Tensor* t = params_(name);
  VINF_CHECK(t != nullptr, "the model has no parameter ", name);
  if (t->dtype == DType::f32) return *t;
  auto it = copies_->find(name);
  if (it == copies_->end()) {
    OwnedTensor c = ctx_.arena->empty(DType::f32, t->shape);
    ops::copy(ctx_, *t, c);
    it = copies_->emplace(name, std::move(c)).first;
  }
  return it->second;
}

void Graph::set_products(DType products) {
  VINF_CHECK(products == DType::f32 || products == DType::bf16, "Graph: products in f32 or bf16, not ",
             dtype_name(products));
  products_ = products;
}

OwnedTensor Graph::operand(const Tensor& t) {
  OwnedTensor rounded = ctx_.arena->empty(DType::bf16, t.shape);
  ops::copy(ctx_, t, rounded);
  if (ctx_.device.is_cuda()) return rounded;
  OwnedTensor widened = ctx_.arena->empty(DType::f32, t.shape);
  ops::copy(ctx_, rounded, widened);
  return widened;
}

Tensor Graph::weight_operand(const std::string& name) {
  const Tensor* t = params_(name);
  VINF_CHECK(t != nullptr, "the model has no parameter ", name);
  if (ctx_.device.is_cuda() && t->dtype == DType::bf16) return *t;
  const std::string key = name + " (product operand)";
  auto it = copies_->find(key);
  if (it == copies_->end()) it = copies_->emplace(key, operand(*t)).first;
  return it->second;
}

void Graph::product(const Tensor& a, const Tensor& b_t, const Tensor& out, bool accumulate) {
  ops::bmm(ctx_, a.unsqueeze(0), b_t.transpose(0, 1).unsqueeze(0), out.unsqueeze(0), 1.f, accumulate ? 1.f : 0.f);
}

Var Graph::make(const Shape& shape, bool requires_grad) {
  auto n = std::make_shared<Node>();
  n->own = ctx_.arena->empty(DType::f32, shape);
  n->value = n->own;
  n->requires_grad = requires_grad;
  return n;
}

Var Graph::input(const Tensor& t, bool requires_grad, const Shape& shape) {
  Var v = make(shape.rank() == 0 ? t.shape : shape, requires_grad);
  VINF_CHECK(v->value.numel() == t.numel(), "Graph::input: ", t.describe(), " does not fit ", shape.str());
  ops::copy(ctx_, t, v->value.reshape(t.shape));
  return v;
}

const Tensor& Graph::grad(const Var& v) {
  if (!has_grad(v)) {
    v->grad = ctx_.arena->empty(DType::f32, v->value.shape);
    ops::fill(ctx_, v->grad, 0.0);
  }
  return v->grad;
}

void Graph::set_profile(Profile* profile) {
  profile_ = profile;
  last_op_end_ = std::chrono::steady_clock::now();
}

void Graph::forward_done(const char* op) {
  synchronize(ctx_);
  const auto now = std::chrono::steady_clock::now();
  if (op != nullptr && profile_forward_) profile_->forward[op] += std::chrono::duration<double>(now - last_op_end_).count();
  last_op_end_ = now;
}

const char* Graph::label(const std::string& name) { return labels_->insert(name).first->c_str(); }

bool Graph::fresh_grad(const Var& v) {
  if (has_grad(v)) return false;
  v->grad = ctx_.arena->empty(DType::f32, v->value.shape);
  return true;
}

void Graph::add_grad(const Tensor& g, const Var& v, const std::function<Tensor(const Tensor&)>& view) {
  if (fresh_grad(v)) {
    ops::copy(ctx_, g, view ? view(v->grad) : v->grad.view());
    return;
  }
  ops::accumulate(ctx_, g, view ? view(v->grad) : v->grad.view());
}

void Graph::pass_grad(const Var& from, const Var& to) {
  if (!has_grad(to) && from->grad.shape == to->value.shape && from->grad.is_contiguous()) {
    to->grad = std::move(from->grad);  // no zeros to add to
    return;
  }
  ops::accumulate(ctx_, from->grad, grad(to));
}

void Graph::backward(const Var& out, const Tensor& seed) {
  ops::accumulate(ctx_, seed, grad(out));
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    const auto start = std::chrono::steady_clock::now();
    it->run();
    if (profile_ != nullptr && it->op != nullptr) {
      synchronize(ctx_);
      profile_->backward[it->op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    it->run = nullptr;  // what only this step held (its inputs, its output's gradient) is freed now
    for (const std::string& p : it->params) grads_->done(p);
  }
  steps_.clear();
}

Var Graph::checkpoint(const std::vector<Var>& inputs, const Block& block) {
  if (!recording_) return block(*this, inputs);  // inside another checkpointed block
  recording_ = false;
  Var out;
  try {
    out = block(*this, inputs);
  } catch (...) {
    recording_ = true;
    throw;
  }
  recording_ = true;
  // Not timed as a whole: the block's steps are, in the inner graph.
  record(nullptr, [this, inputs, out, block] {
    if (!has_grad(out)) return;
    // The block again on leaves that share the inputs' values, recording, then its backward.
    Graph again(ctx_, params_, grads_, lora_scale_);
    again.labels_ = labels_;
    again.products_ = products_;
    again.copies_ = copies_;
    again.profile_forward_ = false;  // timed as a whole below
    again.set_profile(profile_);
    std::vector<Var> leaves;
    for (const Var& in : inputs) {
      auto leaf = std::make_shared<Node>();
      leaf->value = in->value;
      leaf->base = in;
      leaf->requires_grad = in->requires_grad;
      leaves.push_back(std::move(leaf));
    }
    const auto start = std::chrono::steady_clock::now();
    const Var y = block(again, leaves);
    if (profile_ != nullptr) {
      synchronize(ctx_);
      profile_->backward["checkpoint: forward again"] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    again.backward(y, out->grad);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i]->requires_grad && has_grad(leaves[i])) ops::accumulate(ctx_, leaves[i]->grad, grad(inputs[i]));
  });
  return out;
}

Var Graph::linear(const Var& x, const std::string& prefix, bool bias) {
  if (products_ != DType::f32) return linear_mixed(x, prefix, bias);
  const Tensor& w = param(prefix + ".weight");
  const Tensor* b = bias ? &param(prefix + ".bias") : nullptr;
  const Tensor* dw = param_grad(prefix + ".weight");
  const Tensor* db = bias ? param_grad(prefix + ".bias") : nullptr;
  Shape ys = x->value.shape;
  ys[ys.rank() - 1] = w.size(0);
  Var y = make(ys, x->requires_grad || dw || db);
  ops::linear(ctx_, x->value, w, b, y->value);
  if (y->requires_grad)
    record("linear", [this, x, y, w, dw, db] {
      if (!has_grad(y)) return;
      // x's first gradient is this product's alone: written, not added to zeros.
      const bool fresh = x->requires_grad && fresh_grad(x);
      ops::linear_backward(ctx_, x->value, w, y->grad, x->requires_grad ? &x->grad : nullptr, dw, db, fresh);
    });
  if (has_param(prefix + ".lora_A.weight"))  // + scale * B (A x), through the graph's own ops
    return add(y, scale(linear(linear(x, prefix + ".lora_A", false), prefix + ".lora_B", false), lora_scale_));
  return y;
}

Var Graph::linear_mixed(const Var& x, const std::string& prefix, bool bias) {
  const Tensor wo = weight_operand(prefix + ".weight");
  const Tensor* b = bias ? &param(prefix + ".bias") : nullptr;
  const Tensor* dw = param_grad(prefix + ".weight");
  const Tensor* db = bias ? param_grad(prefix + ".bias") : nullptr;
  const std::int64_t k = wo.size(1), n = wo.size(0), m = x->value.numel() / k;
  VINF_CHECK(x->value.size(x->value.rank() - 1) == k, "linear ", prefix, ": x ", x->value.describe(),
             " does not fit the weight ", wo.describe());
  Shape ys = x->value.shape;
  ys[ys.rank() - 1] = n;
  Var y = make(ys, x->requires_grad || dw || db);
  // The input's operand is what the backward pass keeps of x for dw (not x itself).
  const auto xo = std::make_shared<OwnedTensor>(operand(x->value.reshape({m, k})));
  const Tensor yr = y->value.reshape({m, n});
  product(*xo, wo, yr, false);
  if (b) ops::accumulate(ctx_, b->reshape({1, n}).expand({m, n}), yr);
  if (y->requires_grad)
    record("linear", [this, x, y, xo, wo, dw, db, m, n, k] {
      if (!has_grad(y)) return;
      const Tensor dy = y->grad.reshape({m, n});
      if (x->requires_grad || dw) {
        const OwnedTensor dyo = operand(dy);
        if (x->requires_grad) {
          const bool fresh = fresh_grad(x);  // written, not added to zeros
          product(dyo, wo.transpose(0, 1), x->grad.reshape({m, k}), !fresh);
        }
        if (dw) product(dyo.transpose(0, 1), xo->transpose(0, 1), *dw, true);
      }
      if (db) {
        OwnedTensor ones = ctx_.arena->empty(DType::f32, {1, m});
        ops::fill(ctx_, ones, 1.0);
        product(ones, dy.transpose(0, 1), db->reshape({1, n}), true);
      }
    });
  if (has_param(prefix + ".lora_A.weight"))  // + scale * B (A x), through the graph's own ops
    return add(y, scale(linear(linear(x, prefix + ".lora_A", false), prefix + ".lora_B", false), lora_scale_));
  return y;
}

Var Graph::conv2d(const Var& x, const std::string& prefix, int stride, int pad) {
  const Tensor& w = param(prefix + ".weight");
  const Tensor& b = param(prefix + ".bias");
  const Tensor* dw = param_grad(prefix + ".weight");
  const Tensor* db = param_grad(prefix + ".bias");
  const ops::Conv2dParams p{stride, pad};
  std::int64_t ho = 0, wo = 0;
  ops::conv2d_output_size(x->value, w, p, ho, wo);
  Var y = make({x->value.size(0), w.size(0), ho, wo}, x->requires_grad || dw || db);
  ops::conv2d(ctx_, x->value, w, &b, y->value, p);
  if (y->requires_grad)
    record("conv2d", [this, x, y, w, dw, db, p] {
      if (has_grad(y)) ops::conv2d_backward(ctx_, x->value, w, y->grad, p, grad_if(x), dw, db);
    });
  return y;
}

Var Graph::group_norm(const Var& x, const std::string& prefix, int groups, float eps, ops::Activation act,
                      std::int64_t clip_batch) {
  const Tensor& g = param(prefix + ".weight");
  const Tensor& b = param(prefix + ".bias");
  const Tensor* dg = param_grad(prefix + ".weight");
  const Tensor* db = param_grad(prefix + ".bias");
  const ops::GroupNormParams p{groups, eps, act};
  auto view = [clip_batch](const Tensor& t) {
    const std::int64_t n = t.size(0), c = t.size(1), s = t.size(2) * t.size(3);
    if (clip_batch == 0) return t.reshape({n, c, 1, s});
    return t.reshape({clip_batch, n / clip_batch, c, s}).permute({0, 2, 1, 3});
  };
  Var y = make(x->value.shape, x->requires_grad || dg || db);
  ops::group_norm(ctx_, view(x->value), g, b, view(y->value), p);
  if (y->requires_grad)
    record("group_norm", [this, x, y, g, b, dg, db, p, view] {
      if (!has_grad(y)) return;
      Tensor dx;
      if (x->requires_grad) dx = view(grad(x));
      ops::group_norm_backward(ctx_, view(x->value), g, b, view(y->grad), p, x->requires_grad ? &dx : nullptr, dg, db);
    });
  return y;
}

Var Graph::layer_norm(const Var& x, const std::string& prefix, float eps) {
  const Tensor& g = param(prefix + ".weight");
  const Tensor& b = param(prefix + ".bias");
  const Tensor* dg = param_grad(prefix + ".weight");
  const Tensor* db = param_grad(prefix + ".bias");
  const std::int64_t d = x->value.size(-1);
  auto rows = [d](const Tensor& t) { return t.reshape({t.numel() / d, d}); };
  Var y = make(x->value.shape, x->requires_grad || dg || db);
  ops::layer_norm(ctx_, rows(x->value), g, b, rows(y->value), eps);
  if (y->requires_grad)
    record("layer_norm", [this, x, y, g, dg, db, eps, rows] {
      if (!has_grad(y)) return;
      Tensor dx;
      if (x->requires_grad) dx = rows(grad(x));
      ops::layer_norm_backward(ctx_, rows(x->value), g, rows(y->grad), eps, x->requires_grad ? &dx : nullptr, dg, db);
    });
  return y;
}

Var Graph::activation(const Var& x, ops::Activation act) {
  Var y = make(x->value.shape, x->requires_grad);
  ops::activation(ctx_, act, x->value, y->value);
  if (y->requires_grad)
    record("activation", [this, x, y, act] {
      if (has_grad(y)) ops::activation_backward(ctx_, act, x->value, y->grad, grad(x));
    });
  return y;
}

Var Graph::geglu(const Var& x) {
  Shape ys = x->value.shape;
  ys[ys.rank() - 1] /= 2;
  Var y = make(ys, x->requires_grad);
  ops::geglu(ctx_, x->value, y->value);
  if (y->requires_grad)
    record("geglu", [this, x, y] {
      if (!has_grad(y)) return;
      const bool fresh = fresh_grad(x);  // written when x has no gradient yet, else added to
      ops::geglu_backward(ctx_, x->value, y->grad, x->grad, fresh);
    });
  return y;
}

Var Graph::temporal_conv(const Var& x, const std::string& prefix, std::int64_t clip_batch, int pad) {
  const Tensor& w5 = param(prefix + ".weight");
  const Tensor w = w5.reshape({w5.size(0), w5.size(1), w5.size(2)});
  const Tensor& b = param(prefix + ".bias");
  const Tensor* dw5 = param_grad(prefix + ".weight");
  const Tensor* db = param_grad(prefix + ".bias");
  auto clip = [clip_batch](const Tensor& t) {
    return t.reshape({clip_batch, t.size(0) / clip_batch, t.size(1), t.size(2) * t.size(3)}).permute({0, 2, 1, 3});
  };
  const Shape& xs = x->value.shape;
  Var y = make({xs[0], w.size(0), xs[2], xs[3]}, x->requires_grad || dw5 || db);
  VINF_CHECK(2 * pad == w.size(2) - 1, "Graph::temporal_conv: padding ", pad, " does not keep ", w.size(2),
             "-frame kernels' frame count");
  ops::temporal_conv(ctx_, clip(x->value), w, &b, clip(y->value), pad);
  if (y->requires_grad)
    record("temporal_conv", [this, x, y, w, dw5, db, pad, clip] {
      if (!has_grad(y)) return;
      Tensor dx, dw;
      if (x->requires_grad) dx = clip(grad(x));
      if (dw5) dw = dw5->reshape(w.shape);
      ops::temporal_conv_backward(ctx_, clip(x->value), w, clip(y->grad), pad, x->requires_grad ? &dx : nullptr,
                                  dw5 ? &dw : nullptr, db);
    });
  return y;
}

Var Graph::add(const Var& a, const Var& b) {
  Var y = make(a->value.shape, a->requires_grad || b->requires_grad);
  ops::add(ctx_, a->value, b->value, y->value);
  if (y->requires_grad)
    record("add", [this, a, b, y] {
      if (!has_grad(y)) return;
      if (b->requires_grad) add_grad(y->grad, b);
      if (a->requires_grad) pass_grad(y, a);
    });
  return y;
}

Var Graph::scale(const Var& x, float s) {
  Var y = make(x->value.shape, x->requires_grad);
  ops::scale(ctx_, x->value, s, y->value);
  if (y->requires_grad)
    record("scale", [this, x, y, s] {
      if (has_grad(y)) ops::axpby(ctx_, 1.f, grad(x), s, y->grad, grad(x));
    });
  return y;
}

Var Graph::add_per_sample(const Var& x, const Var& e, std::int64_t batch) {
  const Shape& xs = x->value.shape;
  const Shape s4{batch, xs[0] / batch, xs[1], xs[2] * xs[3]};
  const Shape e4{batch, 1, xs[1], 1};
  VINF_CHECK(e->value.shape == Shape({batch, xs[1]}), "Graph::add_per_sample: ", e->value.describe(), " for ",
             x->value.describe());
  Var y = make(xs, x->requires_grad || e->requires_grad);
  ops::add(ctx_, x->value.reshape(s4), e->value.reshape(e4).expand(s4), y->value.reshape(s4));
  if (y->requires_grad)
    record("add_per_sample", [this, x, e, y, s4, e4] {
      if (!has_grad(y)) return;
      if (x->requires_grad) ops::accumulate(ctx_, y->grad, grad(x));
      if (e->requires_grad) ops::accumulate(ctx_, y->grad.reshape(s4), grad(e).reshape(e4).expand(s4));
    });
  return y;
}

Var Graph::attention(const Var& q, const Var& k, const Var& v, int heads, const ops::AttentionParams& p) {
  Var y = make({q->value.size(0), q->value.size(1), v->value.size(2)},
               q->requires_grad || k->requires_grad || v->requires_grad);
  ops::attention(ctx_, split_heads(q->value, heads), split_heads(k->value, heads), split_heads(v->value, heads),
                 nullptr, nullptr, split_heads(y->value, heads), p);
  const char* op = "attention";
  if (profile_ != nullptr) {
    const std::int64_t d = q->value.size(2) / heads;
    op = label("attention " + std::to_string(q->value.size(0)) + "x" + std::to_string(heads) + " heads, " +
               std::to_string(q->value.size(1)) + " x " + std::to_string(k->value.size(1)) + " tokens, d " +
               std::to_string(d));
  }
  if (y->requires_grad)
    record(op, [this, q, k, v, y, heads, p] {
      if (!has_grad(y)) return;
      const Tensor out = split_heads(y->value, heads);
      ops::attention_backward(ctx_, split_heads(q->value, heads), split_heads(k->value, heads),
                              split_heads(v->value, heads), split_heads(y->grad, heads), p,
                              split_heads(grad(q), heads), split_heads(grad(k), heads), split_heads(grad(v), heads),
                              &out);
    });
  return y;
}

Var Graph::repeat(const Var& x, std::int64_t times) {
  const Shape& xs = x->value.shape;
  const std::int64_t b = xs[0], inner = x->value.numel() / b;
  Shape ys = xs;
  ys[0] = b * times;
  Var y = make(ys, x->requires_grad);
  const Shape s3{b, times, inner};
  ops::copy(ctx_, x->value.reshape({b, 1, inner}).expand(s3), y->value.reshape(s3));
  if (y->requires_grad)
    record("repeat", [this, x, y, s3] {
      if (has_grad(y))
        ops::accumulate(ctx_, y->grad.reshape(s3), grad(x).reshape({s3[0], 1, s3[2]}).expand(s3));
    });
  return y;
}

Var Graph::copy_of_view(const Var& x, const std::function<Tensor(const Tensor&)>& view, const Shape& shape) {
  const Tensor src = view(x->value);
  Var y = make(shape, x->requires_grad);
  VINF_CHECK(src.numel() == shape.numel(), "Graph::copy_of_view: ", src.describe(), " does not fit ", shape.str());
  ops::copy(ctx_, src, y->value.reshape(src.shape));
  if (y->requires_grad)
    record("copy_of_view", [this, x, y, view] {
      if (!has_grad(y)) return;
      add_grad(y->grad.reshape(view(x->value).shape), x, view);
    });
  return y;
}

Var Graph::concat_channels(const Var& a, const Var& b) {
  const Shape& as = a->value.shape;
  const std::int64_t ca = as[1], cb = b->value.size(1);
  Var y = make({as[0], ca + cb, as[2], as[3]}, a->requires_grad || b->requires_grad);
  const Tensor parts[] = {a->value, b->value};
  ops::concat(ctx_, parts, 1, y->value);
  if (y->requires_grad)
    record("concat_channels", [this, a, b, y, ca, cb] {
      if (!has_grad(y)) return;
      if (a->requires_grad) add_grad(y->grad.slice(1, 0, ca), a);
      if (b->requires_grad) add_grad(y->grad.slice(1, ca, cb), b);
    });
  return y;
}

Var Graph::upsample_nearest(const Var& x, std::int64_t h, std::int64_t w) {
  const Shape& xs = x->value.shape;
  Var y = make({xs[0], xs[1], h, w}, x->requires_grad);
  ops::upsample_nearest(ctx_, x->value, y->value);
  if (y->requires_grad)
    record("upsample_nearest", [this, x, y] {
      if (has_grad(y)) ops::upsample_nearest_backward(ctx_, y->grad, grad(x));
    });
  return y;
}

}  // namespace vinf::train
