// `vinf evaluate` (design.md §5): its options, for a command that evaluates what it wrote, and the
// lines of --help that define the measures (the measures themselves: evaluate/evaluate.hpp).
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "evaluate/evaluate.hpp"

namespace vinf::app {

// evaluate's own options (--boundaries, --clip-vision), for a command that evaluates what it wrote,
// and the lines of --help that define the measures.
boost::program_options::options_description evaluate_options(std::string& boundaries, std::string& clip_vision_dir);
extern const char* const kEvaluateMeasuresHelp;

}  // namespace vinf::app
