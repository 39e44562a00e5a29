#include "io/latents_h5.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "io/hdf5_check.hpp"
#include "mpi/check.hpp"

namespace vinf::io {

namespace {

// Closes an HDF5 handle on scope exit (H5Fclose, H5Dclose, ...).
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  // Closes now and reports a failure (a close is where buffered data reaches the file).
  void close() {
    const hid_t id = id_;
    id_ = -1;
    VINF_CHECK_HDF5(close_(id));
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

hid_t checked(hid_t id, const char* what, const std::string& path) {
  VINF_CHECK(id >= 0, "HDF5: ", what, " failed for ", path, ": ", hdf5_error_text());
  return id;
}

void write_attributes(hid_t file, const H5Attributes& attributes, const std::string& path) {
  for (const auto& [name, value] : attributes.text) {
    Handle type(checked(H5Tcopy(H5T_C_S1), "H5Tcopy", path), H5Tclose);
    VINF_CHECK_HDF5(H5Tset_size(type.get(), value.empty() ? 1 : value.size()));
    VINF_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
    Handle space(checked(H5Screate(H5S_SCALAR), "H5Screate", path), H5Sclose);
    Handle attr(checked(H5Acreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                        "creating an attribute", path),
                H5Aclose);
    VINF_CHECK_HDF5(H5Awrite(attr.get(), type.get(), value.empty() ? "" : value.c_str()));
  }
  for (const auto& [name, value] : attributes.integers) {
    Handle space(checked(H5Screate(H5S_SCALAR), "H5Screate", path), H5Sclose);
    Handle attr(checked(H5Acreate2(file, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                        "creating an attribute", path),
                H5Aclose);
    VINF_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
  }
}

}  // namespace

void write_latents_h5(MPI_Comm comm, const std::string& path, const Shape& full, std::int64_t first,
                      std::int64_t count, const float* frames, const H5Attributes& attributes) {
  VINF_CHECK(full.rank() == 4, "latents must be [F, C, H, W], got ", full.str());
  VINF_CHECK(first >= 0 && count >= 0 && first + count <= full[0], "frames [", first, ", ", first + count,
             ") are outside the ", full[0], " frames of the video");
  int rank = 0;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  const std::string partial = path + ".partial";
  {
    Handle fapl(checked(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", path), H5Pclose);
    VINF_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
    Handle file(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    // Every rank sees the same outcome here (the create is collective).
    VINF_INPUT_CHECK(file.get() >= 0, "cannot create ", partial, " (is the directory writable and the disk not full?): ",
                     hdf5_error_text());
    write_attributes(file.get(), attributes, path);

    const hsize_t dims[4] = {static_cast<hsize_t>(full[0]), static_cast<hsize_t>(full[1]),
                             static_cast<hsize_t>(full[2]), static_cast<hsize_t>(full[3])};
    const hsize_t chunk[4] = {1, dims[1], dims[2], dims[3]};
    Handle space(checked(H5Screate_simple(4, dims, nullptr), "H5Screate_simple", path), H5Sclose);
    Handle dcpl(checked(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", path), H5Pclose);
    VINF_CHECK_HDF5(H5Pset_chunk(dcpl.get(), 4, chunk));
    Handle data(checked(H5Dcreate2(file.get(), "/latents", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                                   H5P_DEFAULT),
                        "creating /latents", path),
                H5Dclose);

    const hsize_t start[4] = {static_cast<hsize_t>(first), 0, 0, 0};
    const hsize_t block[4] = {static_cast<hsize_t>(count), dims[1], dims[2], dims[3]};
    Handle file_space(checked(H5Dget_space(data.get()), "H5Dget_space", path), H5Sclose);
    Handle mem_space(checked(H5Screate_simple(4, block, nullptr), "H5Screate_simple", path), H5Sclose);
    if (count > 0) {
      VINF_CHECK_HDF5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, block, nullptr));
    } else {
      VINF_CHECK_HDF5(H5Sselect_none(file_space.get()));
      VINF_CHECK_HDF5(H5Sselect_none(mem_space.get()));
    }
    Handle dxpl(checked(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", path), H5Pclose);
    VINF_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    const float dummy = 0;
    VINF_CHECK_HDF5(H5Dwrite(data.get(), H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), dxpl.get(),
                             count > 0 ? frames : &dummy));
    data.close();
    file.close();
  }
  VINF_CHECK_MPI(MPI_Barrier(comm));
  int ok = 1;
  std::string why;
  if (rank == 0) {
    // Durable before it becomes visible under its name.
    const int fd = ::open(partial.c_str(), O_RDONLY);
    if (fd < 0 || ::fsync(fd) != 0) ok = 0;
    if (fd >= 0) ::close(fd);
    if (ok && std::rename(partial.c_str(), path.c_str()) != 0) ok = 0;
  }
  VINF_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  VINF_INPUT_CHECK(ok, "cannot sync and rename ", partial, " to ", path, " (disk full or the directory not writable?)");
}

}  // namespace vinf::io
