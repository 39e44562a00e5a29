// The checkpoint reader (io/checkpoint.cpp on io/h5file.cpp) on raw bytes: a damaged, truncated or
// foreign file given to --resume. The input is written to a file and opened as a checkpoint, so
// HDF5's own decoder meets the damage first; it has memory errors of its own on such files (see
// README.md), which is why scripts/fuzz runs fuzz_checkpoint (well-formed HDF5 files of any content)
// by default and this target on request.
//
// With VINF_FUZZ_WRITE_SEED=PATH the program writes a small valid checkpoint to PATH and exits
// (fuzz/make-corpus uses it for the seed corpus: the writer is compiled here anyway).
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "checkpoint_contract.hpp"
#include "fuzz_support.hpp"
#include "io/checkpoint.hpp"

namespace {

void write_seed(const char* path) {
  vinf::io::RunStamp stamp;
  stamp.config_json = R"({"model":"builtin:tiny"})";
  stamp.numerics_json = R"({"dtype":"f32"})";
  stamp.model_fingerprint = "fuzz-seed";
  stamp.noise_mode = "invariant";
  stamp.scheduler = "dpmpp-sde";
  stamp.seed = 123;
  vinf::io::FramePart part;
  part.full = vinf::Shape{2, 1, 2, 2};
  part.first = 0;
  part.count = 2;
  const std::vector<float> latents(8, 0.5f), previous(8, -0.25f);
  vinf::io::SolverState state;
  state.step = 1;
  state.timesteps = {999, 500};
  state.sigmas = {14.6, 1.2, 0.0};
  vinf::io::TextCache text;
  text.prompts = 1;
  text.tokens = 2;
  text.width = 3;
  text.prompt_embeds.assign(6, 0.125f);
  text.negative_prompt_embeds.assign(6, -0.125f);
  vinf::io::write_checkpoint(MPI_COMM_SELF, path, stamp, part, latents.data(), previous.data(), state, text);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // libFuzzer reads its flags after this returns. A single malloc of up to 1 TiB is not reported:
  // HDF5 asks for what a damaged header claims, and gets null (an HDF5 error) beyond ASan's limit
  // or an untouched mapping below it; memory actually used still counts against -rss_limit_mb.
  static std::vector<char*> args(*argv, *argv + *argc);
  static char malloc_limit[] = "-malloc_limit_mb=1048576";
  args.insert(args.begin() + 1, malloc_limit);
  args.push_back(nullptr);
  *argc = static_cast<int>(args.size()) - 1;
  *argv = args.data();
  // Open MPI would install its own handlers for SIGABRT, SIGSEGV...; libFuzzer's must stay, to
  // report a crash and keep its input.
  ::setenv("OMPI_MCA_opal_signal", "", 1);
  MPI_Init(argc, argv);
  if (const char* seed = std::getenv("VINF_FUZZ_WRITE_SEED")) {
    write_seed(seed);
    MPI_Finalize();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("step-000001.h5", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::read_checkpoint_checked(path);
  return 0;
}
