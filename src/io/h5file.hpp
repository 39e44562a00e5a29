// A parallel HDF5 file as vinf uses it: opened by every rank of a communicator (MPI-IO), frame
// arrays written collectively (each rank its hyperslab of frames along one axis, chunked one frame
// per chunk), small arrays, texts and attributes written by rank 0's data. Every method that
// touches the file's structure is collective: all ranks call it with the same arguments.
//
// Every non-empty dataset is chunked with HDF5's Fletcher-32 filter: each chunk carries a checksum
// of its bytes, written with it (parallel HDF5 filters collective writes since 1.10.2) and checked
// by every read, so a file whose data changed after it was written is refused instead of read.
// Reads are independent (each rank its own slices): a rank whose chunk fails its check returns
// the error without leaving the others waiting in a collective read.
//
// The files are plain HDF5: h5dump, h5py and `vinf inspect` read them serially.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace vinf::io {

class H5File {
 public:
  // Creates (truncating) path. Throws vinf::InputError naming the path when it cannot be created.
  static H5File create(MPI_Comm comm, const std::string& path);
  // Opens path read-only. comm may be MPI_COMM_SELF for one process. Throws vinf::InputError naming
  // the path when it is missing, not HDF5 or damaged.
  static H5File open(MPI_Comm comm, const std::string& path);
  // Opens path read-only in this process alone (a serial reader: inspect, decode). MPI must be
  // running. Throws as open().
  static H5File open_serial(const std::string& path);
  // Opens path to read and write in this process alone (a file written as a run goes: the
  // latents of a diffusion-forcing video). Throws as open().
  static H5File open_writable(const std::string& path);

  H5File(H5File&& o) noexcept;
  H5File& operator=(H5File&&) = delete;
  H5File(const H5File&) = delete;
  ~H5File();
  // Closes and reports a failure (where buffered data reaches the file).
  void close();
  const std::string& path() const { return path_; }

  void create_group(const std::string& name);
  bool exists(const std::string& name) const;

  // Attributes on an object ("/" for the root); text is UTF-8.
  void set_text(const std::string& object, const std::string& name, const std::string& value);
  void set_int(const std::string& object, const std::string& name, std::int64_t value);  // replaces one there
  bool has_attribute(const std::string& object, const std::string& name) const;
  std::string text(const std::string& object, const std::string& name) const;
  std::int64_t integer(const std::string& object, const std::string& name) const;

  // F32 dataset of shape `full`, chunked one slice per chunk along `axis`; this rank writes slices
  // [first, first + count) along that axis from `data` (contiguous in that sub-shape; count may be 0).
  void write_frames(const std::string& name, const Shape& full, int axis, std::int64_t first, std::int64_t count,
                    const float* data);
  // The same in steps: the dataset made (no data), then slices written into it, in any number of
  // calls; flush() puts what was written on disk.
  void create_frames(const std::string& name, const Shape& full, int axis);
  void write_frames_at(const std::string& name, int axis, std::int64_t first, std::int64_t count, const float* data);
  void flush();
  void read_frames(const std::string& name, int axis, std::int64_t first, std::int64_t count, float* data) const;
  Shape shape(const std::string& name) const;
  // The shape a dataset declares, whatever the file holds of it yet (a file written as a run goes;
  // shape() refuses a dataset whose declared bytes the file does not hold).
  Shape extent(const std::string& name) const;

  // A whole small dataset: rank 0's `data` is written (the others' is ignored); reads give every
  // rank the whole array. dtype f32 or i64.
  void write_small(const std::string& name, DType dtype, const Shape& shape, const void* data);
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<std::int64_t> read_i64(const std::string& name) const;

  // A UTF-8 text of any length as a dataset (one fixed-length string, [1]), rank 0's `value`:
  // unlike an attribute (at most 64 KiB in an object header) its size is not limited.
  void write_text(const std::string& name, const std::string& value);
  std::string read_text(const std::string& name) const;

  // Every object below the root: "path  shape  type" lines (", checksum" where the data carries
  // one), for `vinf inspect`.
  std::vector<std::string> describe() const;
  // Reads every dataset whole (each chunk's checksum is checked on the way) and looks at every
  // float for NaN or infinity: one line per damaged dataset, none when the file is sound.
  std::vector<std::string> verify() const;

 private:
  H5File(hid_t id, MPI_Comm comm, std::string path, bool writable);
  hid_t id_ = -1;
  bool writable_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int unwinding_at_open_ = 0;  // std::uncaught_exceptions() when opened: a larger count at destruction means an error
  std::string path_;
};

// Whether path holds an HDF5 file (by its signature).
bool is_hdf5(const std::string& path);

}  // namespace vinf::io
