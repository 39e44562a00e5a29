#include "mpi/session.hpp"

#include <exception>

#include "core/error.hpp"
#include "mpi/check.hpp"
#include "ops/runtime.hpp"

namespace vinf::mpi {

Session::Session(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_THREAD_MULTIPLE lets the communication watchdog call MPI_Abort from its own thread; with
  // less it ends the process instead (mpirun/srun then end the others).
  int provided = 0;
  if (!initialized) VINF_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  VINF_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  VINF_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  VINF_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  VINF_CHECK_MPI(MPI_Comm_rank(node, &local_rank_));
  MPI_Comm_free(&node);
  set_process_rank(size_ > 1 ? rank_ : -1);
}

Session::~Session() {
  // Unwinding from an error: leave MPI to the fatal path, which aborts every rank. Finalising
  // here would wait for ranks that are still inside a collective.
  if (std::uncaught_exceptions() > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool Session::all(bool ok) const {
  int mine = ok ? 1 : 0, every = 0;
  VINF_CHECK_MPI(MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return every == 1;
}

double Session::max(double v) const {
  double out = v;
  VINF_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return out;
}

Device Session::choose_device(const std::string& choice) const {
  VINF_INPUT_CHECK(choice == "auto" || choice == "cpu" || choice == "cuda", "--device must be auto, cpu or cuda, got '",
                   choice, "'");
  if (choice == "cpu") return Device::cpu();
  const int count = cuda_device_count();
  const bool every_rank_has_gpu = all(count > 0);
  if (choice == "auto" && !every_rank_has_gpu) return Device::cpu();
  if (!every_rank_has_gpu) {
    VINF_INPUT_CHECK(count > 0, "--device cuda: this rank sees no usable GPU (",
                     built_with_cuda() ? "no device visible; check CUDA_VISIBLE_DEVICES and the allocation"
                                       : "this build has no CUDA backend",
                     "); use --device cpu or auto");
    VINF_INPUT_FAIL("--device cuda: another rank sees no usable GPU");
  }
  const Device d = Device::cuda(local_rank_ % count);
  set_process_device(d.name());
  return d;
}

}  // namespace vinf::mpi
