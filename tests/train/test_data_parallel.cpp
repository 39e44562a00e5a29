// Data-parallel training's pieces over the thread transport at 1-4 ranks: the shards, the bucketed
// reductions started by the ready hook at each ZeRO stage, the global norm, the sharded AdamW step
// and the parameters' all-gather. The gradients are small integers, whose sums are exact in any
// order, so every rank must reach exactly the one-process result.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/half.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "train/adamw.hpp"
#include "train/data_parallel.hpp"

using namespace vinf;

namespace {

// Parameters that make several buckets of 25,000 elements and shards that cut through them.
const std::vector<std::pair<std::string, Shape>> kParams = {
    {"a", {200, 200}}, {"b", {3}}, {"c", {30000}}, {"d", {7}}, {"e", {300, 100}}};

float grad_value(int rank, std::int64_t i) { return static_cast<float>((rank + 1) * (i % 7 + 1)); }

}  // namespace

TEST_CASE("data parallel: the shards are whole chunks that cover the buffer in rank order") {
  for (std::int64_t n : {1, 16384, 16385, 100000, 3 * 16384 + 5}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      CAPTURE(n);
      CAPTURE(ranks);
      std::int64_t at = 0;
      for (int r = 0; r < ranks; ++r) {
        const train::Shard s = train::shard_of(n, r, ranks);
        CHECK(s.first == at);
        CHECK(s.count >= 0);
        if (s.count > 0 && s.first + s.count < n) CHECK(s.count % train::kShardChunk == 0);
        at += s.count;
      }
      CHECK(at == n);
    }
  }
}

TEST_CASE("data parallel: every ZeRO stage reduces, steps and gathers what one process computes") {
  // One process: the summed gradients of n ranks and one full AdamW step from the same parameters.
  // With bf16 values (mixed precision) the f32 master weights step exactly as f32 ones do, and the
  // values the model computes with are their bf16 rounding.
  train::AdamWSettings adamw;
  adamw.lr = 1e-2;
  for (const DType values : {DType::f32, DType::bf16})
  for (int n = 1; n <= 4; ++n) {
    for (int zero = 0; zero <= 2; ++zero) {
      CAPTURE(dtype_name(values));
      CAPTURE(n);
      CAPTURE(zero);
      test::run_on_threads(n, [&](int rank, mpi::Communicator& comm, ExecContext& ctx) {
        train::ParamGrads grads(*ctx.arena, kParams);
        const std::int64_t total = grads.all().numel();
        // The parameters: the same on every rank.
        train::ParamGrads init(*ctx.arena, kParams);
        for (std::int64_t i = 0; i < total; ++i) init.all().ptr<float>()[i] = 0.001f * static_cast<float>(i % 101) - 0.05f;
        const auto from_init = [&init](const std::string& name) { return init.find(name); };
        train::DataParallel dp(*ctx.arena, ctx, comm, grads, zero, 25000, values);
        CHECK(dp.buckets() == 3);
        train::FlatParams flat(*ctx.arena, ctx, grads, from_init, values, dp.optimizer_part());
        CHECK(flat.master().numel() == dp.optimizer_part().count);
        CHECK((flat.master_copy() == nullptr) == (values == DType::f32));

        dp.arm(true);
        for (const auto& [name, g] : kParams) grads.use(name);  // as a recording graph counts them
        for (std::int64_t i = 0; i < total; ++i) grads.all().ptr<float>()[i] = grad_value(rank, i);
        for (auto it = kParams.rbegin(); it != kParams.rend(); ++it) grads.done(it->first);  // the backward pass
        dp.finish_reduction();

        const train::Shard part = dp.optimizer_part();
        const train::Shard mine = train::shard_of(total, rank, n);
        CHECK(part.first == (zero == 0 ? 0 : mine.first));
        CHECK(part.count == (zero == 0 ? total : mine.count));
        CHECK(dp.optimizer_bytes() == 8 * part.count);
        const Tensor part_grads = dp.part_grads();
        const float* g = part_grads.ptr<float>();
        const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
        int wrong = 0;
        double squares = 0;
        for (std::int64_t i = 0; i < total; ++i) {
          const double v = static_cast<double>(ranks_sum) * static_cast<double>(i % 7 + 1);
          squares += v * v;
          if (i >= part.first && i < part.first + part.count && g[i - part.first] != static_cast<float>(v)) ++wrong;
        }
        CHECK(wrong == 0);
        CHECK(dp.global_norm(ctx) == doctest::Approx(std::sqrt(squares)).epsilon(1e-12));

        // The sharded step and the gather against one process's full step.
        train::AdamW opt(*ctx.arena, ctx, part.first, part.count);
        opt.step_part(ctx, part_grads, flat.master(), flat.master_copy(), adamw, adamw.lr, 0.5);
        dp.gather(ctx, flat);
        OwnedTensor master = ctx.arena->empty(DType::f32, {total}), model = ctx.arena->empty(DType::f32, {total});
        dp.gather_master(ctx, flat, master);
        ops::copy(ctx, flat.all(), model);
        train::ParamGrads summed(*ctx.arena, kParams), expect(*ctx.arena, kParams);
        for (std::int64_t i = 0; i < total; ++i) {
          summed.all().ptr<float>()[i] = ranks_sum * static_cast<float>(i % 7 + 1);
          expect.all().ptr<float>()[i] = init.all().ptr<float>()[i];
        }
        train::AdamW whole(*ctx.arena, ctx, summed);
        whole.step(ctx, summed, [&expect](const std::string& name) { return expect.find(name); }, adamw, adamw.lr, 0.5);
        wrong = 0;
        int wrong_model = 0;
        for (std::int64_t i = 0; i < total; ++i) {
          const float e = expect.all().ptr<float>()[i];
          if (master.ptr<float>()[i] != e) ++wrong;
          const float rounded = values == DType::f32 ? e : bf16_bits_to_f32(f32_to_bf16_bits(e));
          if (model.ptr<float>()[i] != rounded) ++wrong_model;
        }
        CHECK(wrong == 0);
        CHECK(wrong_model == 0);
      });
    }
  }
}

TEST_CASE("data parallel: a gradient completed after its bucket was sent is an internal error") {
  test::run_on_threads(1, [](int, mpi::Communicator& comm, ExecContext& ctx) {
    train::ParamGrads grads(*ctx.arena, kParams);
    train::DataParallel dp(*ctx.arena, ctx, comm, grads, 2, 1);  // a bucket per parameter
    dp.arm(true);
    grads.use("b");
    grads.use("b");
    grads.done("b");  // not complete yet: nothing sent
    grads.done("b");  // complete: sent
    CHECK_THROWS_WITH(grads.done("b"), doctest::Contains("completed more often than it was used"));
    grads.use("b");   // a step that adds into it after all
    CHECK_THROWS_WITH(grads.done("b"), doctest::Contains("a gradient completed after its bucket was sent"));
    dp.finish_reduction();
  });
}
