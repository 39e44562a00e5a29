// --profile: where a model call's time goes. Every op (ops/*) and every collective
// (mpi::Communicator) is timed between two marks on the device's timeline (CUDA events on a GPU,
// recorded without waiting; the steady clock on the CPU), attributed to its op kind ("linear",
// "conv2d", "comm all-gather wait") and to the innermost model module it ran in
// ("down_blocks.1.attentions.0.transformer_blocks.0.attn1"). The marks are read once per model call
// (one wait at its end, outside the call). Beside the times: the kernel launches, library calls
// (cuBLAS, cuDNN) and host synchronisations the call made, counted where they happen on the calling
// thread (exec::device_counters()).
//
// An ExecContext points to a Profiler only while profiling (ExecContext::profiler); without one
// every hook below is a test of a null pointer. Nested ops (an op built from others) are timed as
// the outermost one, so the op times of a call add up without double counting; the rest of the
// call (host work between ops, launch latency, a device idling while the host waits) is its gap.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "exec/context.hpp"

namespace vinf {

// What the calling thread has asked of its device so far: kernel launches (vinf's own kernels),
// library calls that run kernels (a cuBLAS GEMM, a cuDNN convolution), and host synchronisations
// (the host waiting for the device: a stream synchronisation, a copy back to the host, a wait on
// an event; on the CPU, the places where a GPU build would wait). Thread-local: ranks that are
// threads of one process count apart.
struct DeviceCounters {
  std::uint64_t launches = 0, library_calls = 0, host_syncs = 0;
};
DeviceCounters& device_counters();
inline void count_launch() { ++device_counters().launches; }
inline void count_library_call() { ++device_counters().library_calls; }
inline void count_host_sync() { ++device_counters().host_syncs; }

// Points on a device's timeline. mark() records one after the work queued so far, without
// waiting; resolve() waits once for the last and gives every mark's time in seconds after the
// first; clear() forgets them (kept resources are reused).
class ProfileTimer {
 public:
  virtual ~ProfileTimer() = default;
  virtual std::size_t mark() = 0;
  virtual std::vector<double> resolve() = 0;
  virtual void clear() = 0;
  virtual const char* clock_name() const = 0;
};

// The steady clock: the CPU's timer, and the one the tests see.
class ClockProfileTimer final : public ProfileTimer {
 public:
  std::size_t mark() override;
  std::vector<double> resolve() override;
  void clear() override { marks_.clear(); }
  const char* clock_name() const override { return "steady clock"; }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

// One line of a profile: seconds per model call (means over the calls profiled) and calls of the
// op per model call.
struct ProfileRow {
  std::string name;
  double seconds = 0, calls = 0;
};

// A profile over `calls` model calls, every figure per call.
struct ProfileReport {
  std::string clock;
  int calls = 0;
  double call_s = 0;  // mark to mark, the call's first op's start to its end
  double op_s = 0;  // the op times summed
  double op_calls = 0;  // outermost ops
  double launches = 0, library_calls = 0, host_syncs = 0;
  std::vector<ProfileRow> by_kind, by_module, by_module_kind;  // most time first
  double gap_s() const { return call_s - op_s; }
};

class Profiler {
 public:
  explicit Profiler(std::unique_ptr<ProfileTimer> timer);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // A model call: its ops are timed between these; end_call reads the marks (the one wait) and
  // adds the call to the totals. Calls do not nest: an inner begin_call is counted with its end.
  // A call abandoned (an exception left it), or whose marks cannot be read (a device error, which
  // the next wait of the run reports), is dropped whole; the ends never throw.
  void begin_call();
  void end_call() noexcept;
  void abandon_call() noexcept;
  // The hooks of ProfileOp and ProfileModule (a failed mark drops the call).
  void begin_op(std::string_view kind);
  void end_op() noexcept;
  void enter_module(std::string path);
  void exit_module();

  ProfileReport report() const;
  void reset();

 private:
  struct Record {
    int kind, module;
    std::size_t begin, end;
  };
  struct Total {
    double seconds = 0, calls = 0;
  };
  static std::vector<ProfileRow> rows(const std::vector<std::string>& names, const std::vector<Total>& totals, int per);
  int intern(std::vector<std::string>& names, std::unordered_map<std::string, int>& ids, std::string_view name);

  std::unique_ptr<ProfileTimer> timer_;
  void drop_call() noexcept;

  int call_depth_ = 0, op_depth_ = 0;
  bool failed_ = false;  // the call under way is dropped at its end
  std::size_t call_begin_ = 0;
  DeviceCounters at_begin_;
  std::vector<std::string> kinds_, modules_;
  std::unordered_map<std::string, int> kind_ids_, module_ids_;
  std::vector<int> module_stack_;
  std::vector<Record> records_;  // this call's
  std::vector<Total> kind_totals_, module_totals_;
  int calls_ = 0;
  double call_s_ = 0, op_s_ = 0, launches_ = 0, library_calls_ = 0, host_syncs_ = 0;
};

// An op on ctx: timed when ctx is being profiled and no op encloses it.
class ProfileOp {
 public:
  ProfileOp(const ExecContext& ctx, std::string_view kind) : p_(ctx.profiler) {
    if (p_) p_->begin_op(kind);
  }
  ~ProfileOp() {
    if (p_) p_->end_op();
  }
  ProfileOp(const ProfileOp&) = delete;
  ProfileOp& operator=(const ProfileOp&) = delete;

 private:
  Profiler* p_;
};

// A model module: the ops inside are attributed to `path` then `suffix` (the string made only
// while profiling).
class ProfileModule {
 public:
  ProfileModule(const ExecContext& ctx, std::string_view path, std::string_view suffix = {}) : p_(ctx.profiler) {
    if (p_) p_->enter_module(std::string(path).append(suffix));
  }
  ~ProfileModule() {
    if (p_) p_->exit_module();
  }
  ProfileModule(const ProfileModule&) = delete;
  ProfileModule& operator=(const ProfileModule&) = delete;

 private:
  Profiler* p_;
};

// A model call on ctx (the UNet's, the Wan transformer's): begin_call / end_call when profiled.
class ProfileCall {
 public:
  explicit ProfileCall(const ExecContext& ctx) : p_(ctx.profiler), unwinding_(std::uncaught_exceptions()) {
    if (p_) p_->begin_call();
  }
  // A call that ends in an exception is dropped, unread.
  ~ProfileCall() {
    if (!p_) return;
    if (std::uncaught_exceptions() > unwinding_)
      p_->abandon_call();
    else
      p_->end_call();
  }
  ProfileCall(const ProfileCall&) = delete;
  ProfileCall& operator=(const ProfileCall&) = delete;

 private:
  Profiler* p_;
  int unwinding_;
};

// The module path with every index (a part of digits only) written "*"
// ("down_blocks.*.attentions.*.transformer_blocks.*.attn1"): the profile's rows by kind of module.
std::string module_kind(std::string_view path);

// The report as a table: the call's time, the ops' sum and the gap, the counters, then the `top`
// op kinds and modules that took most time.
void print_profile(std::ostream& os, const ProfileReport& r, int top = 20);

}  // namespace vinf
