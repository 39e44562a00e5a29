// The MPI and HDF5 checks turn failures into errors that name the call, the library's reason and
// the rank; every rank reaches the same verdict.
#include <doctest/doctest.h>
#include <mpi.h>

#include <string>

#include "core/error.hpp"
#include "io/hdf5_check.hpp"
#include "mpi/check.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "world.hpp"

using namespace vinf;

using test::world_rank;

TEST_CASE("VINF_CHECK_MPI reports the failed call with MPI's own text") {
  set_process_rank(world_rank());
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::string msg;
  try {
    int value = 1;
    VINF_CHECK_MPI(MPI_Bcast(&value, 1, MPI_INT, 1 << 20, MPI_COMM_WORLD));  // no such root
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("MPI call failed: ") != std::string::npos);
  CHECK(msg.find("MPI_Bcast(&value, 1, MPI_INT, 1 << 20, MPI_COMM_WORLD)") != std::string::npos);
  CHECK(msg.find("rank " + std::to_string(world_rank())) != std::string::npos);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

TEST_CASE("collectives work at this world size (odd sizes included)") {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int mine = world_rank() + 1;
  int sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == size * (size + 1) / 2);
}

TEST_CASE("VINF_CHECK_HDF5 carries the HDF5 error stack") {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // no HDF5 printout; the error says it all
  std::string msg;
  try {
    VINF_CHECK_HDF5(H5Fopen("/nonexistent/checkpoint.h5", H5F_ACC_RDONLY, H5P_DEFAULT));
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("HDF5 call failed: ") != std::string::npos);
  CHECK(msg.find("H5Fopen") != std::string::npos);
  CHECK(msg.find("unable to open file") != std::string::npos);
}

TEST_CASE("the MPI transport refuses a buffer off the context's device and reduces one on it") {
  // cpu:1 is host memory that the device checks treat as a device of its own (a GPU's stand-in).
  Runtime rt(Device{DeviceKind::cpu, 1});
  ExecContext& ctx = rt.ctx();
  auto comm = mpi::make_mpi_communicator(MPI_COMM_WORLD);
  comm->set_label("clip group");
  float host[3] = {1, 2, 3};
  const Tensor off = Tensor::wrap(host, DType::f32, Device::cpu(), {3});
  std::string msg;
  try {
    comm->all_reduce_sum(ctx, off);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("all-reduce on the clip group (mpi): buffer") != std::string::npos);
  CHECK(msg.find("is in cpu memory, but the collective runs on cpu:1") != std::string::npos);
  OwnedTensor on = ctx.arena->empty(DType::f32, {3});
  ops::fill(ctx, on, world_rank() + 1.0);
  comm->all_reduce_sum(ctx, on);
  ops::copy(ctx, on, off);
  const int size = comm->size();
  CHECK(host[2] == static_cast<float>(size * (size + 1) / 2));
}
