#include "core/progress.hpp"

#include <iostream>

#include <unistd.h>

#include <cmath>

namespace vinf {

void Reporter::print(const std::string& line) const {
  std::cerr << prefix_ << " " << line << "\n" << std::flush;
}

std::string format_number(double x, int chars) {
  return std::to_string(x).substr(0, static_cast<std::size_t>(chars));
}

std::string format_mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string format_duration(double s) {
  char buf[48];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
  }
  return buf;
}

Progress::Progress(std::string label, int total, double work_per_step, std::string unit, bool enabled,
                   double min_interval, std::FILE* out)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      work_per_step_(work_per_step),
      min_interval_(min_interval),
      enabled_(enabled),
      tty_(isatty(fileno(out)) != 0),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int done, const std::string& detail) {
  if (!enabled_) return;
  const double t = elapsed();
  const bool last = done >= total_;
  if (!tty_ && !last && t - last_print_ < min_interval_) return;
  last_print_ = t;
  const double rate = t > 0 ? done * work_per_step_ / t : 0.0;
  const double eta = done > 0 ? t / done * (total_ - done) : 0.0;
  char stats[160];
  std::snprintf(stats, sizeof stats, "step %d/%d%s%s  elapsed %s  ETA %s  %.2f %s", done, total_,
                detail.empty() ? "" : " ", detail.c_str(), format_duration(t).c_str(),
                last ? "0.0 s" : format_duration(eta).c_str(), rate, unit_.c_str());
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.append(static_cast<std::size_t>(kWidth - filled), '.');
    std::fprintf(out_, "\r\033[K%s [%s] %s%s", label_.c_str(), bar.c_str(), stats, last ? "\n" : "");
  } else {
    std::fprintf(out_, "%s %s\n", label_.c_str(), stats);
  }
  std::fflush(out_);
}

}  // namespace vinf
