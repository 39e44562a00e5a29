#include "exec/profile.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ostream>

namespace vinf {

DeviceCounters& device_counters() {
  thread_local DeviceCounters counters;
  return counters;
}

std::size_t ClockProfileTimer::mark() {
  marks_.push_back(std::chrono::steady_clock::now());
  return marks_.size() - 1;
}

std::vector<double> ClockProfileTimer::resolve() {
  std::vector<double> s(marks_.size());
  for (std::size_t i = 0; i < marks_.size(); ++i)
    s[i] = std::chrono::duration<double>(marks_[i] - marks_.front()).count();
  return s;
}

Profiler::Profiler(std::unique_ptr<ProfileTimer> timer) : timer_(std::move(timer)) {
  intern(modules_, module_ids_, "(outside the modules)");
}

Profiler::~Profiler() = default;

int Profiler::intern(std::vector<std::string>& names, std::unordered_map<std::string, int>& ids,
                     std::string_view name) {
  const auto [it, added] = ids.try_emplace(std::string(name), static_cast<int>(names.size()));
  if (added) names.emplace_back(name);
  return it->second;
}

void Profiler::begin_call() {
  if (call_depth_ > 0) {
    ++call_depth_;
    return;
  }
  drop_call();
  call_begin_ = timer_->mark();  // a mark that throws leaves no call begun
  at_begin_ = device_counters();
  call_depth_ = 1;
}

void Profiler::drop_call() noexcept {
  failed_ = false;
  records_.clear();
  timer_->clear();
}

void Profiler::abandon_call() noexcept {
  failed_ = true;
  end_call();
}

void Profiler::end_call() noexcept {
  if (call_depth_ == 0 || --call_depth_ > 0) return;
  if (failed_) return drop_call();
  const DeviceCounters now = device_counters();
  std::vector<double> t;
  try {
    const std::size_t end = timer_->mark();
    t = timer_->resolve();
    call_s_ += t[end] - t[call_begin_];
  } catch (...) {
    return drop_call();  // the device's error is the run's to report, at its next wait
  }
  kind_totals_.resize(kinds_.size());
  module_totals_.resize(modules_.size());
  for (const Record& r : records_) {
    const double s = t[r.end] - t[r.begin];
    kind_totals_[static_cast<std::size_t>(r.kind)].seconds += s;
    kind_totals_[static_cast<std::size_t>(r.kind)].calls += 1;
    module_totals_[static_cast<std::size_t>(r.module)].seconds += s;
    module_totals_[static_cast<std::size_t>(r.module)].calls += 1;
    op_s_ += s;
  }
  launches_ += static_cast<double>(now.launches - at_begin_.launches);
  library_calls_ += static_cast<double>(now.library_calls - at_begin_.library_calls);
  host_syncs_ += static_cast<double>(now.host_syncs - at_begin_.host_syncs);
  ++calls_;
  drop_call();
}

void Profiler::begin_op(std::string_view kind) {
  if (op_depth_ > 0 || call_depth_ == 0 || failed_) {
    ++op_depth_;
    return;
  }
  const int module = module_stack_.empty() ? 0 : module_stack_.back();
  const int id = intern(kinds_, kind_ids_, kind);
  records_.push_back({id, module, timer_->mark(), 0});  // a mark that throws leaves nothing begun
  ++op_depth_;
}

void Profiler::end_op() noexcept {
  if (op_depth_ == 0 || --op_depth_ > 0 || call_depth_ == 0 || failed_ || records_.empty()) return;
  try {
    records_.back().end = timer_->mark();
  } catch (...) {
    failed_ = true;
  }
}

void Profiler::enter_module(std::string path) { module_stack_.push_back(intern(modules_, module_ids_, path)); }

void Profiler::exit_module() {
  if (!module_stack_.empty()) module_stack_.pop_back();
}

void Profiler::reset() {
  kind_totals_.clear();
  module_totals_.clear();
  calls_ = 0;
  call_s_ = op_s_ = launches_ = library_calls_ = host_syncs_ = 0;
}

std::vector<ProfileRow> Profiler::rows(const std::vector<std::string>& names, const std::vector<Total>& totals,
                                       int per) {
  std::vector<ProfileRow> out;
  for (std::size_t i = 0; i < totals.size(); ++i)
    if (totals[i].calls > 0) out.push_back({names[i], totals[i].seconds / per, totals[i].calls / per});
  std::stable_sort(out.begin(), out.end(),
                   [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  return out;
}

ProfileReport Profiler::report() const {
  ProfileReport r;
  r.clock = timer_->clock_name();
  r.calls = calls_;
  if (calls_ == 0) return r;
  r.call_s = call_s_ / calls_;
  r.op_s = op_s_ / calls_;
  for (const Total& t : kind_totals_) r.op_calls += t.calls / calls_;
  r.launches = launches_ / calls_;
  r.library_calls = library_calls_ / calls_;
  r.host_syncs = host_syncs_ / calls_;
  r.by_kind = rows(kinds_, kind_totals_, calls_);
  r.by_module = rows(modules_, module_totals_, calls_);
  // The modules' kinds: the paths with their indices folded.
  std::vector<std::string> folded;
  std::unordered_map<std::string, std::size_t> folded_ids;
  std::vector<Total> folded_totals;
  for (std::size_t i = 0; i < module_totals_.size(); ++i) {
    const auto [it, added] = folded_ids.try_emplace(module_kind(modules_[i]), folded.size());
    if (added) {
      folded.push_back(it->first);
      folded_totals.emplace_back();
    }
    folded_totals[it->second].seconds += module_totals_[i].seconds;
    folded_totals[it->second].calls += module_totals_[i].calls;
  }
  r.by_module_kind = rows(folded, folded_totals, calls_);
  return r;
}

std::string module_kind(std::string_view path) {
  std::string out;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t dot = std::min(path.find('.', start), path.size());
    const std::string_view part = path.substr(start, dot - start);
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) {
      return std::isdigit(static_cast<unsigned char>(ch)) != 0;
    });
    if (start > 0) out += '.';
    out += index ? std::string_view("*") : part;
    start = dot + 1;
  }
  return out;
}

namespace {

void print_rows(std::ostream& os, const char* heading, const char* count, const std::vector<ProfileRow>& rows,
                double call_s, int top) {
  char line[256];
  std::snprintf(line, sizeof line, "  %-64s %10s %7s %10s\n", heading, "ms/call", "%", count);
  os << line;
  for (std::size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
    const ProfileRow& r = rows[i];
    std::string name = r.name;
    if (name.size() > 64) name = "..." + name.substr(name.size() - 61);
    std::snprintf(line, sizeof line, "  %-64s %10.3f %7.1f %10.1f\n", name.c_str(), 1e3 * r.seconds,
                  call_s > 0 ? 100 * r.seconds / call_s : 0.0, r.calls);
    os << line;
  }
  if (static_cast<int>(rows.size()) > top) os << "  (" << rows.size() - static_cast<std::size_t>(top) << " more)\n";
}

}  // namespace

void print_profile(std::ostream& os, const ProfileReport& r, int top) {
  if (r.calls == 0) {
    os << "profile: no model call was profiled\n";
    return;
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "profile over %d model call(s), %s: %.4f s per call; ops %.4f s (%.1f%%), gap %.4f s (host work "
                "between ops, launch latency, waits); per call %.0f ops, %.0f kernel launches, %.0f library calls, "
                "%.0f host synchronisations\n",
                r.calls, r.clock.c_str(), r.call_s, r.op_s, r.call_s > 0 ? 100 * r.op_s / r.call_s : 0.0, r.gap_s(),
                r.op_calls, r.launches, r.library_calls, r.host_syncs);
  os << line;
  print_rows(os, "op kind", "ops/call", r.by_kind, r.call_s, top);
  print_rows(os, "module", "ops/call", r.by_module, r.call_s, top);
  print_rows(os, "module kind (indices folded)", "ops/call", r.by_module_kind, r.call_s, top);
}

}  // namespace vinf
