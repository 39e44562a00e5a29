// The plan of a `vinf generate` run (design.md §5): the command line, an INI file (`--config FILE`,
// sections map to dotted names, the command line wins) and an imported Video-Infinity JSON config,
// parsed into typed values (every choice an enum, every derived value derived once) and checked
// before any heavy work.
#pragma once

#include <boost/program_options/options_description.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/generate_spec.hpp"
#include "pipeline/stop_signals.hpp"

namespace vinf::app {

// The typed plan of one video (pipeline/generate_spec.hpp); the options below fill it.
using RunPlan = pipeline::GenerateSpec;

// Parses and checks what does not need the job's size. job_args, when given, are a job list's line
// (as --name=value tokens) and win over args, which win over --config's file; without them, a
// command line with --jobs leaves the prompts to the jobs. Returns 0 to go on, 1 after --help was
// printed, 2 after a bad option was reported. Throws vinf::InputError for bad values. `extend`:
// vinf extend's options (its --video is the video to continue: RunPlan::extend).
int parse_generate_options(const std::vector<std::string>& args, RunPlan& o,
                           const std::vector<std::string>* job_args = nullptr, bool extend = false);

// vinf plan: generate's options (the command line and --config's file) and the plan's `own`,
// parsed and checked as generate checks them, less what a plan does not read: the prompts and the
// text encoder, and the job list that replicas take their jobs from. Returns 0 to go on, 1 after
// --help was printed (`usage`, `own`, then generate's options). Throws vinf::InputError.
int parse_plan_options(const std::vector<std::string>& args, RunPlan& o,
                       const boost::program_options::options_description& own, const std::string& usage);

using pipeline::kExitStopped;

using pipeline::imported_fields_note;
using pipeline::prompt_parts;
using pipeline::PromptParts;

}  // namespace vinf::app
