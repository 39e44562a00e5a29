// Progress of a long loop for the person watching it: step i/N, elapsed, ETA and a rate. On a
// terminal one live line with a bar (redrawn in place); otherwise (a Slurm log, a pipe) one plain
// line per update, at most every `min_interval` seconds and always for the last step.
#pragma once

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>

namespace vinf {

class Progress {
 public:
  // total: the number of steps; work_per_step and unit: the rate shown ("frame-steps/s").
  Progress(std::string label, int total, double work_per_step, std::string unit, bool enabled,
           double min_interval = 0.0, std::FILE* out = stderr);

  // After step `done` (1-based) finished; `detail` is appended (e.g. the timestep).
  void update(int done, const std::string& detail = {});
  double elapsed() const;

 private:
  std::string label_, unit_;
  int total_;
  double work_per_step_, min_interval_, last_print_ = -1e30;
  bool enabled_, tty_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
};

// Seconds elapsed since t0 on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One voice for a command's messages on stderr, each line flushed: "<prefix> line", the prefix
// "vinf COMMAND:" (or with a job's label, "vinf generate [kite, stage 2/4]:"). Only the process
// that speaks for the job prints (rank 0). A line is its parts as an ostream writes them. say: the
// run's lines, silent under --quiet; detail: --verbose's lines; note: a line a user must see, also
// under --quiet; warn: "<prefix> warning: line", also under --quiet.
class Reporter {
 public:
  Reporter() = default;
  Reporter(std::string prefix, bool speaks, bool quiet = false, bool verbose = false)
      : prefix_(std::move(prefix)), speaks_(speaks), quiet_(quiet), verbose_(verbose) {}
  template <class... Parts>
  void say(const Parts&... parts) const {
    if (speaks_ && !quiet_) print(text(parts...));
  }
  template <class... Parts>
  void detail(const Parts&... parts) const {
    if (speaks_ && verbose_) print(text(parts...));
  }
  template <class... Parts>
  void note(const Parts&... parts) const {
    if (speaks_) print(text(parts...));
  }
  template <class... Parts>
  void warn(const Parts&... parts) const {
    if (speaks_) print(text("warning: ", parts...));
  }
  const std::string& prefix() const { return prefix_; }
  bool quiet() const { return quiet_; }

  template <class... Parts>
  static std::string text(const Parts&... parts) {
    std::ostringstream line;
    (line << ... << parts);
    return line.str();
  }

 private:
  void print(const std::string& line) const;
  std::string prefix_;
  bool speaks_ = false, quiet_ = false, verbose_ = false;
};

// "1.5 s", "2 min 05 s", "1 h 02 min".
std::string format_duration(double seconds);
// A number in a message, in at most `chars` characters: std::to_string's fixed six decimals cut
// there ("0.1234", "12.345"), as every line of vinf has shown them.
std::string format_number(double x, int chars = 6);
// "12.3 MiB", for memory and file sizes in messages.
std::string format_mib(double bytes);

}  // namespace vinf
