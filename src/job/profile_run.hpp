// --profile FILE of `vinf generate` and `vinf forward`: every model call of the run timed op by op
// (exec/profile.hpp) on each rank; at the end the first rank of the world prints its top 20 op
// kinds and modules and writes all of its rows to FILE (JSON, written under a temporary name and
// renamed).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "job/job.hpp"
#include "ops/runtime.hpp"

namespace vinf::job {

class RunProfile {
 public:
  // Nothing is timed when `path` is empty.
  RunProfile(Job& job, std::string path);
  // World rank 0: the table on `os`, the JSON in the file. Throws vinf::Error when the file cannot be
  // written.
  void finish(std::ostream& os);

 private:
  Job& job_;
  std::string path_;
  std::optional<Profiling> profiling_;
};

}  // namespace vinf::job
