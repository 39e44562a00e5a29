// vinf: long-video generation with Video-Infinity on GPU clusters. One binary, subcommands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "mpi/communicator.hpp"
#include "mpi/fatal.hpp"
#include "mpi/session.hpp"
#include "ops/runtime.hpp"

namespace vinf::app {

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
  bool starts_mpi = false;  // every rank of a job starts MPI (mpi::set_starts_mpi)
};

const Command kCommands[] = {
    {"generate", "generate a video: the main job (mpirun -np N vinf generate --config FILE)", generate, true},
    {"extend", "continue a video with a Wan image-to-video pipeline from its last frame, joined into one video", extend,
     true},
    {"plan", "a generate layout before it runs: ranks to nodes and groups, memory and bytes per rank, fit", plan},
    {"decode", "VAE decoding only: latents to images (checks a VAE against reference numbers)", decode, true},
    {"encode-text", "prompts through the CLIP tokenizer and text encoder (an embeddings file for generate)",
     encode_text, true},
    {"forward", "one UNet call per timestep on given inputs (checks a model against reference numbers)", forward, true},
    {"prepare-data", "videos and captions to training data: VAE latents and text embeddings in one HDF5 file",
     prepare_data, true},
    {"train", "fine-tune the UNet on prepared data (AdamW, warm-up and cosine, clipping, accumulation)", train, true},
    {"train-step", "one training step on given inputs: loss, gradients, one AdamW step (checks training)", train_step,
     true},
    {"make-model", "write a random-weight UNet or pipeline (tiny, small or vc2 shape) in diffusers layout", make_model},
    {"evaluate", "temporal consistency of a video or latents.h5: frame differences, motion, seams at clip starts",
     evaluate},
    {"inspect", "describe and check a model directory (or a pipeline part), a safetensors or HDF5 file", inspect},
    {"selfcheck", "run every op on every available backend against the CPU reference", selfcheck},
};

void usage(std::ostream& os) {
  os << "usage: vinf <command> [options]    (vinf <command> --help for its options)\n\ncommands:\n";
  for (const Command& c : kCommands)
    os << "  " << c.name << std::string(13 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\nother options:\n  --version   print the version and the backends this build has\n  --help      this text\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    // What a failing multi-node job wants to know per node (slurm/multinode.sbatch runs this on each).
    std::cout << "vinf " << VINF_VERSION << " (CUDA backend: " << (built_with_cuda() ? "yes" : "no") << ")\n";
    const std::string nccl = mpi::nccl_version();
    std::cout << "MPI: " << mpi::library_version() << "\nNCCL: " << (nccl.empty() ? "none (CPU-only build)" : nccl)
              << "\nGPUs visible: " << cuda_device_count() << "\n";
    return 0;
  }
  for (const Command& c : kCommands) {
    if (args[0] != c.name) continue;
    if (c.starts_mpi) mpi::set_starts_mpi();
    return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::string names;
  for (const Command& c : kCommands) names += std::string(names.empty() ? "" : ", ") + c.name;
  VINF_INPUT_FAIL("unknown command '", args[0], "'; the commands are ", names, " (vinf --help says what each does)");
}

}  // namespace vinf::app

int main(int argc, char** argv) {
  try {
    return vinf::app::main(argc, argv);
  } catch (const vinf::InputError& e) {
    // Bad input: the message says which file, key or option (and where a --config file set it).
    vinf::mpi::fatal(vinf::InputError(vinf::app::with_option_origins(e.what())), 2);
  } catch (const std::exception& e) {
    vinf::mpi::fatal(e);
  }
}
