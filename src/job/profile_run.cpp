#include "job/profile_run.hpp"

#include <cstdio>
#include <fstream>
#include <ostream>

#include "core/error.hpp"
#include "ops/profile_json.hpp"

namespace vinf::job {

RunProfile::RunProfile(Job& job, std::string path) : job_(job), path_(std::move(path)) {
  if (!path_.empty()) profiling_.emplace(job_.runtime().ctx());
}

void RunProfile::finish(std::ostream& os) {
  if (!profiling_) return;
  const ProfileReport report = profiling_->report();
  profiling_.reset();
  if (job_.world_session().rank() != 0) return;
  os << "rank 0, ";
  print_profile(os, report);
  nlohmann::ordered_json j = profile_json(report);
  j["rank"] = 0;
  j["device"] = job_.device().name();
  const std::string partial = path_ + ".partial";
  {
    std::ofstream f(partial);
    f << j.dump(2) << "\n";
    VINF_CHECK(f.good(), "--profile: cannot write ", partial);
  }
  VINF_CHECK(std::rename(partial.c_str(), path_.c_str()) == 0, "--profile: cannot rename ", partial, " to ", path_);
  os << "profile written to " << path_ << "\n";
}

}  // namespace vinf::job
