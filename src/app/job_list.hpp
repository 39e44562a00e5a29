// A job list (`vinf generate --jobs FILE`, jobs/README.md): many videos in one run, each line a job
// with its own `vinf generate` options. JSON Lines (one object per line) or CSV (a header naming
// the options, one row per job); `#` lines and blank lines do not count. Keys are generate's
// dotted option names, or the sweep tables' short names (seed, prompt, negative, steps, frames,
// config), and `out`, the job's output directory name under --out.
#pragma once

#include <string>
#include <vector>

namespace vinf::app {

struct JobSpec {
  int index = 0;                  // 0-based, in the file's order
  int line = 0;                   // where it is in the file (1-based)
  std::string out;                // the output directory's name under --out: `out`, or job-<index>
  std::vector<std::string> args;  // the line's options as --name=value tokens (a list: one per item)
  std::string text;               // the line as written (a job whose line changed is a new job)
};

// The options a job line may not set: the replicas load the model once and keep their layout.
// "" when `name` may be set per job, else why not.
std::string per_job_refusal(const std::string& name);

// Reads and checks the list: the format (by the extension .jsonl/.json/.csv, else by the first
// line), every key a name (the options themselves are checked when each job starts), values of a
// JSON type an option can take, `out` a plain name, unique over the list. Throws vinf::InputError
// naming the file, the line and the key.
std::vector<JobSpec> read_job_list(const std::string& path);

// The long option a key stands for: seed -> sampler.seed, prompt -> prompt.text, negative ->
// prompt.negative, steps -> sampler.steps, frames -> video.frames; others as they are.
std::string job_option_name(const std::string& key);

}  // namespace vinf::app
