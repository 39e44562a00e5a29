#include "io/h5file.hpp"

#include <algorithm>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/hdf5_check.hpp"
#include "mpi/check.hpp"
#include "mpi/fatal.hpp"

namespace vinf::io {

namespace {

// The most text one attribute may hold when read (a bound on what a damaged file can make vinf
// allocate): far above the names and fingerprints vinf writes, and above HDF5's 64 KiB limit on a
// compact attribute, where format 1 kept the configuration.
constexpr std::size_t kMaxTextAttribute = std::size_t{1} << 20;

// A file whose checksums do not match (its data or, in the 1.10 format, its metadata): the file
// changed after it was written. A damaged input, so vinf::InputError, which a resume can skip.
[[noreturn]] void throw_damaged(const std::string& path, const std::string& what) {
  hdf5_error_text();  // clears the stack
  VINF_INPUT_FAIL(path, ": ", what, " does not match its checksum: the file changed after it was written (a damaged ",
                  "disk, or a copy cut short or overwritten in place), and it cannot be used");
}

// What a failing HDF5 call was doing: writing (the file system's failure: full, over quota, not
// writable), or reading a file the user gave (a damaged or truncated file: vinf::InputError, exit
// status 2, and --resume auto goes on to an older checkpoint).
enum class Access { write, read };

[[noreturn]] void hdf5_failed(const std::string& what, const std::string& path, Access access) {
  if (hdf5_checksum_failed()) throw_damaged(path, "the metadata read for " + what);
  if (access == Access::read)
    VINF_INPUT_FAIL("cannot read ", path, ": HDF5 could not complete ", what,
                    " (truncated or damaged?): ", hdf5_error_text());
  throw Error("HDF5 could not complete " + what + " in " + path +
              " (disk full, quota exceeded, or a damaged file?): " + hdf5_error_text());
}

// Closes an HDF5 handle on scope exit. A failure's message names the file and the operation (with
// the object it was on, where reading), without source locations. Every handle says whether it
// reads a file the user gave (a failure is the input's: exit 2) or not (writing, and the memory
// spaces and property lists vinf makes itself).
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what, const std::string& path, Access access)
      : id_(id), close_(close) {
    if (id < 0) hdf5_failed(what, path, access);
  }
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// vinf reports HDF5 failures itself, with the file's name; the library's own printing is off.
void quiet_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

hid_t access_list(MPI_Comm comm) {
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  VINF_CHECK(fapl >= 0, "HDF5: H5Pcreate failed: ", hdf5_error_text());
  if (comm != MPI_COMM_SELF) VINF_CHECK_HDF5(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  return fapl;
}

hid_t collective_transfer() {
  const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  VINF_CHECK(dxpl >= 0, "HDF5: H5Pcreate failed: ", hdf5_error_text());
  return dxpl;
}

// "[2, 4, 8]"
std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string t = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) t += (i ? ", " : "") + std::to_string(dims[i]);
  return t + "]";
}

// vinf's attributes hold one value: H5Aread writes every element of the attribute's dataspace, and
// an array under one of vinf's names would overrun the one-value buffer it is read into.
void check_single_value(hid_t attr, const std::string& name, const std::string& path) {
  Handle space(H5Aget_space(attr), H5Sclose, "H5Aget_space of attribute '" + name + "'", path, Access::read);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  VINF_INPUT_CHECK(n == 1, path, ": attribute '", name, "' holds ", n, " values, not one (truncated or damaged?)");
}

std::vector<hsize_t> dims_of(const Shape& s) {
  std::vector<hsize_t> d;
  for (int i = 0; i < s.rank(); ++i) d.push_back(static_cast<hsize_t>(s[i]));
  return d;
}

// A read that failed: a checksum that does not match, or else a truncated or damaged file.
[[noreturn]] void throw_read_failure(const std::string& name, const std::string& path, const std::string& where) {
  if (hdf5_checksum_failed()) throw_damaged(path, name + (where.empty() ? "" : " (" + where + ")"));
  VINF_INPUT_FAIL("cannot read ", name, " from ", path, " (truncated or damaged?): ", hdf5_error_text());
}

// A dataset creation list for a whole small array: chunks of whole rows along the first axis, at
// most 64 MiB each, with a Fletcher-32 checksum per chunk. Empty and scalar shapes stay contiguous.
hid_t small_creation_list(const std::vector<hsize_t>& dims, std::size_t element_size) {
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  VINF_CHECK(dcpl >= 0, "HDF5: H5Pcreate failed: ", hdf5_error_text());
  hsize_t row = element_size, numel = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    numel *= dims[i];
    if (i > 0) row *= dims[i];
  }
  if (dims.empty() || numel == 0) return dcpl;
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::clamp<hsize_t>((hsize_t{64} << 20) / std::max<hsize_t>(row, 1), 1, dims[0]);
  VINF_CHECK_HDF5(H5Pset_chunk(dcpl, static_cast<int>(dims.size()), chunk.data()));
  VINF_CHECK_HDF5(H5Pset_fletcher32(dcpl));
  return dcpl;
}

// What a rank passes to H5Dwrite / H5Dread for slices [first, first + count) of `axis` of a
// dataset: the file and memory selections (none when count is 0) and a transfer list, collective
// where asked.
struct SliceTransfer {
  Handle file_space, mem_space, dxpl;
  SliceTransfer(hid_t set, const std::vector<hsize_t>& dims, int axis, std::int64_t first, std::int64_t count,
                bool collective, const std::string& path, Access access)
      : file_space(H5Dget_space(set), H5Sclose, "H5Dget_space", path, access),
        mem_space(H5Screate_simple(static_cast<int>(dims.size()), memory_dims(dims, axis, count).data(), nullptr),
                  H5Sclose, "H5Screate_simple", path, Access::write),
        dxpl(collective_transfer(), H5Pclose, "H5Pcreate", path, Access::write) {
    if (count > 0) {
      std::vector<hsize_t> start(dims.size(), 0), block = dims;
      start[static_cast<std::size_t>(axis)] = static_cast<hsize_t>(first);
      block[static_cast<std::size_t>(axis)] = static_cast<hsize_t>(count);
      VINF_CHECK_HDF5(
          H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, block.data(), nullptr));
    } else {
      VINF_CHECK_HDF5(H5Sselect_none(file_space.get()));
      VINF_CHECK_HDF5(H5Sselect_none(mem_space.get()));
    }
    if (collective) VINF_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  }
  static std::vector<hsize_t> memory_dims(std::vector<hsize_t> dims, int axis, std::int64_t count) {
    dims[static_cast<std::size_t>(axis)] = static_cast<hsize_t>(count);
    for (hsize_t& d : dims) d = std::max<hsize_t>(d, 1);  // a zero-size space cannot be made; it selects none
    return dims;
  }
};

}  // namespace

bool is_hdf5(const std::string& path) {
  quiet_hdf5();
  return H5Fis_hdf5(path.c_str()) > 0;
}

H5File::H5File(hid_t id, MPI_Comm comm, std::string path, bool writable)
    : id_(id),
      writable_(writable),
      comm_(comm),
      unwinding_at_open_(std::uncaught_exceptions()),
      path_(std::move(path)) {
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
}

H5File::H5File(H5File&& o) noexcept
    : id_(std::exchange(o.id_, -1)),
      writable_(o.writable_),
      comm_(o.comm_),
      rank_(o.rank_),
      unwinding_at_open_(o.unwinding_at_open_),
      path_(std::move(o.path_)) {}

H5File::~H5File() {
  if (id_ < 0) return;
  if (writable_ && std::uncaught_exceptions() > unwinding_at_open_) {
    // Left by an error: HDF5 1.10 crashes when it closes (or later flushes, in MPI_Finalize) a file
    // whose writes failed. Leave it open, and keep the fatal path away from MPI_Finalize. (A file
    // opened for reading closes as usual: a failed read leaves nothing to flush.)
    mpi::mark_finalize_unsafe();
    return;
  }
  H5Fclose(id_);
}

void H5File::close() {
  const hid_t id = std::exchange(id_, -1);
  if (H5Fclose(id) < 0)
    throw Error("HDF5 could not finish writing " + path_ + " (disk full or quota exceeded?): " + hdf5_error_text());
}

H5File H5File::create(MPI_Comm comm, const std::string& path) {
  quiet_hdf5();
  Handle fapl(access_list(comm), H5Pclose, "H5Pcreate", path, Access::write);
  // The file format of HDF5 1.10 (read by HDF5 1.10 and later): checksums on the metadata too
  // (superblock, object headers, chunk index), and a fixed-array chunk index, cheaper to fill in a
  // filtered parallel write and to search per frame than the B-tree of the 1.8 format.
  VINF_CHECK_HDF5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110));
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  VINF_INPUT_CHECK(id >= 0, "cannot create ", path,
                   " (is the directory writable and the disk not full?): ", hdf5_error_text());
  return H5File(id, comm, path, true);
}

H5File H5File::open(MPI_Comm comm, const std::string& path) {
  quiet_hdf5();
  VINF_INPUT_CHECK(H5Fis_hdf5(path.c_str()) > 0, path, " is missing or not an HDF5 file");
  Handle fapl(access_list(comm), H5Pclose, "H5Pcreate", path, Access::write);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  VINF_INPUT_CHECK(id >= 0, "cannot open ", path, " (truncated or damaged?): ", hdf5_error_text());
  return H5File(id, comm, path, false);
}

H5File H5File::open_serial(const std::string& path) { return open(MPI_COMM_SELF, path); }

H5File H5File::open_writable(const std::string& path) {
  quiet_hdf5();
  VINF_INPUT_CHECK(H5Fis_hdf5(path.c_str()) > 0, path, " is missing or not an HDF5 file");
  Handle fapl(access_list(MPI_COMM_SELF), H5Pclose, "H5Pcreate", path, Access::write);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get());
  VINF_INPUT_CHECK(id >= 0, "cannot open ", path,
                   " to write (truncated or damaged, or not writable?): ", hdf5_error_text());
  return H5File(id, MPI_COMM_SELF, path, true);
}

void H5File::create_group(const std::string& name) {
  Handle g(H5Gcreate2(id_, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "creating a group", path_,
           Access::write);
}

bool H5File::exists(const std::string& name) const {
  // Each level must exist before the next is asked about. A failure (not "no") is a damaged file.
  auto link = [&](const std::string& path) {
    const htri_t found = H5Lexists(id_, path.c_str(), H5P_DEFAULT);
    if (found < 0) throw_read_failure("the group holding " + path, path_, "");
    return found > 0;
  };
  std::size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos)
    if (!link(name.substr(0, pos))) return false;
  return link(name);
}

void H5File::set_text(const std::string& object, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", path_, Access::write);
  VINF_CHECK_HDF5(H5Tset_size(type.get(), value.empty() ? 1 : value.size()));
  VINF_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", path_, Access::write);
  Handle attr(H5Acreate_by_name(id_, object.c_str(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT),
              H5Aclose, "creating an attribute", path_, Access::write);
  VINF_CHECK_HDF5(H5Awrite(attr.get(), type.get(), value.empty() ? "" : value.c_str()));
}

void H5File::set_int(const std::string& object, const std::string& name, std::int64_t value) {
  if (H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0)
    VINF_CHECK_HDF5(H5Adelete_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT));
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", path_, Access::write);
  Handle attr(H5Acreate_by_name(id_, object.c_str(), name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT),
              H5Aclose, "creating an attribute", path_, Access::write);
  VINF_CHECK_HDF5(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
}

bool H5File::has_attribute(const std::string& object, const std::string& name) const {
  return exists(object == "/" ? "/" : object) && H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

std::string H5File::text(const std::string& object, const std::string& name) const {
  VINF_INPUT_CHECK(has_attribute(object, name), path_, ": ", object, " has no attribute '", name, "'");
  Handle attr(H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              "opening attribute '" + name + "'", path_, Access::read);
  check_single_value(attr.get(), name, path_);
  Handle type(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type of attribute '" + name + "'", path_, Access::read);
  VINF_INPUT_CHECK(H5Tget_class(type.get()) == H5T_STRING && !H5Tis_variable_str(type.get()), path_, ": attribute '",
                   name, "' is not a fixed-length string");
  // The size comes from the file: bounded before anything is allocated.
  const std::size_t size = H5Tget_size(type.get());
  VINF_INPUT_CHECK(size <= kMaxTextAttribute, path_, ": attribute '", name, "' claims ", size,
                   " bytes of text, more than vinf writes (truncated or damaged?)");
  std::string value(size, '\0');
  if (H5Aread(attr.get(), type.get(), value.data()) < 0) throw_read_failure("attribute '" + name + "'", path_, "");
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

std::int64_t H5File::integer(const std::string& object, const std::string& name) const {
  VINF_INPUT_CHECK(has_attribute(object, name), path_, ": ", object, " has no attribute '", name, "'");
  Handle attr(H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              "opening attribute '" + name + "'", path_, Access::read);
  check_single_value(attr.get(), name, path_);
  std::int64_t v = 0;
  VINF_INPUT_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &v) >= 0, path_, ": attribute '", name, "' is not an integer");
  return v;
}

void H5File::create_frames(const std::string& name, const Shape& full, int axis) {
  VINF_CHECK(axis >= 0 && axis < full.rank(), "create_frames: axis ", axis, " of ", full.str());
  const std::vector<hsize_t> dims = dims_of(full);
  std::vector<hsize_t> chunk = dims;
  chunk[static_cast<std::size_t>(axis)] = 1;
  for (hsize_t& c : chunk) c = std::max<hsize_t>(c, 1);
  const int rank = static_cast<int>(dims.size());
  Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose, "H5Screate_simple", path_, Access::write);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate", path_, Access::write);
  VINF_CHECK_HDF5(H5Pset_chunk(dcpl.get(), rank, chunk.data()));
  VINF_CHECK_HDF5(H5Pset_fletcher32(dcpl.get()));
  VINF_CHECK_HDF5(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));  // every element is written
  Handle set(H5Dcreate2(id_, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             "creating a dataset", path_, Access::write);
}

void H5File::write_frames_at(const std::string& name, int axis, std::int64_t first, std::int64_t count,
                             const float* data) {
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path_, Access::write);
  Handle space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space of " + name, path_, Access::write);
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space.get()))));
  VINF_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  VINF_CHECK(axis >= 0 && axis < static_cast<int>(dims.size()) && first >= 0 && count >= 0 &&
                 static_cast<hsize_t>(first + count) <= dims[static_cast<std::size_t>(axis)],
             "write_frames: slices [", first, ", ", first + count, ") of axis ", axis, " of ", name, " ",
             dims_text(dims));
  const SliceTransfer io(set.get(), dims, axis, first, count, comm_ != MPI_COMM_SELF, path_, Access::write);
  const float dummy = 0;
  if (H5Dwrite(set.get(), H5T_NATIVE_FLOAT, io.mem_space.get(), io.file_space.get(), io.dxpl.get(),
               count > 0 ? data : &dummy) < 0)
    throw Error("HDF5 could not write " + name + " to " + path_ +
                " (disk full or quota exceeded?): " + hdf5_error_text());
}

void H5File::write_frames(const std::string& name, const Shape& full, int axis, std::int64_t first, std::int64_t count,
                          const float* data) {
  VINF_CHECK(axis >= 0 && axis < full.rank() && first >= 0 && count >= 0 && first + count <= full[axis],
             "write_frames: slices [", first, ", ", first + count, ") of axis ", axis, " of ", full.str());
  create_frames(name, full, axis);
  write_frames_at(name, axis, first, count, data);
}

void H5File::flush() {
  if (H5Fflush(id_, H5F_SCOPE_LOCAL) < 0)
    throw Error("HDF5 could not write " + path_ + " out (disk full or quota exceeded?): " + hdf5_error_text());
}

Shape H5File::extent(const std::string& name) const {
  VINF_INPUT_CHECK(exists(name), path_, " has no dataset ", name);
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path_, Access::read);
  Handle space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space of " + name, path_, Access::read);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  VINF_INPUT_CHECK(rank >= 0 && rank <= kMaxDims, path_, ": ", name, " has ", rank,
                   " dimensions (truncated or damaged?)");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) throw_read_failure(name, path_, "its shape");
  Shape s;
  for (hsize_t d : dims) s.push_back(static_cast<std::int64_t>(d));
  return s;
}

Shape H5File::shape(const std::string& name) const {
  const Shape declared = extent(name);
  std::vector<hsize_t> dims(declared.begin(), declared.end());
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path_, Access::read);
  Handle type(H5Dget_type(set.get()), H5Tclose, "H5Dget_type of " + name, path_, Access::read);
  // vinf writes every element of its datasets, none of them empty: a shape cannot claim more bytes
  // than the file holds for the dataset, so a damaged header cannot make a reader allocate more than
  // the file's size. An empty dimension would hold no bytes whatever the others claim (a reader
  // sizing one frame from them would allocate what they say): refused as well.
  std::uint64_t bytes = H5Tget_size(type.get());
  bool overflow = false, empty = false;
  for (hsize_t d : dims) {
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(bytes, std::uint64_t{d}, &bytes);
  }
  VINF_INPUT_CHECK(!empty, path_, ": ", name, " has an empty dimension in its shape ", dims_text(dims),
                   " (vinf writes no empty datasets: truncated or damaged?)");
  // A file open to write is one in the making (its frames written as they come): not every chunk
  // is there yet.
  const std::uint64_t stored = H5Dget_storage_size(set.get());
  VINF_INPUT_CHECK(!overflow && (writable_ || bytes <= stored), path_, ": ", name, " claims a shape ", dims_text(dims),
                   " of ", overflow ? std::string("more than 2^64") : std::to_string(bytes),
                   " bytes, but the file holds ", stored, " bytes of it (truncated or damaged?)");
  return declared;
}

void H5File::read_frames(const std::string& name, int axis, std::int64_t first, std::int64_t count, float* data) const {
  const Shape full = shape(name);
  VINF_INPUT_CHECK(axis < full.rank() && first >= 0 && count >= 0 && first + count <= full[axis], path_, ": ", name,
                   " ", full.str(), " has no slices [", first, ", ", first + count, ") along axis ", axis);
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path_, Access::read);
  const SliceTransfer io(set.get(), dims_of(full), axis, first, count, /*collective=*/false, path_, Access::read);
  float dummy = 0;
  if (H5Dread(set.get(), H5T_NATIVE_FLOAT, io.mem_space.get(), io.file_space.get(), io.dxpl.get(),
              count > 0 ? data : &dummy) < 0)
    throw_read_failure(name, path_,
                       "slices " + std::to_string(first) + " to " + std::to_string(first + count - 1) + " along axis " +
                           std::to_string(axis));
  // Latents and training data read back must be finite, as every tensor vinf is given: a NaN in a
  // file (written by another tool, or a diverged run's) is refused here, naming the dataset.
  const std::int64_t n = full[axis] > 0 ? full.numel() / full[axis] * count : 0;
  const std::int64_t bad = first_non_finite(Tensor::wrap(data, DType::f32, Device::cpu(), Shape{n}));
  VINF_INPUT_CHECK(bad < 0, path_, ": dataset ", name, " holds a NaN or infinity (element ", bad, " of slices [", first,
                   ", ", first + count, ") along axis ", axis, "): vinf computes with finite numbers only; write the ",
                   "file again");
}

void H5File::write_small(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  VINF_CHECK(dtype == DType::f32 || dtype == DType::i64, "write_small: f32 or i64");
  const std::vector<hsize_t> dims = dims_of(shape);
  const hid_t file_type = dtype == DType::f32 ? H5T_IEEE_F32LE : H5T_STD_I64LE;
  const hid_t mem_type = dtype == DType::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64;
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "H5Screate_simple",
               path_, Access::write);
  Handle dcpl(small_creation_list(dims, dtype_size(dtype)), H5Pclose, "H5Pcreate", path_, Access::write);
  Handle set(H5Dcreate2(id_, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             "creating a dataset", path_, Access::write);
  Handle file_space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space", path_, Access::write);
  Handle mem_space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "H5Screate_simple",
                   path_, Access::write);
  if (rank_ != 0 || shape.numel() == 0) {
    VINF_CHECK_HDF5(H5Sselect_none(file_space.get()));
    VINF_CHECK_HDF5(H5Sselect_none(mem_space.get()));
  }
  Handle dxpl(collective_transfer(), H5Pclose, "H5Pcreate", path_, Access::write);
  if (comm_ != MPI_COMM_SELF) VINF_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  const std::int64_t dummy = 0;
  if (H5Dwrite(set.get(), mem_type, mem_space.get(), file_space.get(), dxpl.get(),
               rank_ == 0 && shape.numel() > 0 ? data : &dummy) < 0)
    throw Error("HDF5 could not write " + name + " to " + path_ +
                " (disk full or quota exceeded?): " + hdf5_error_text());
}

namespace {

template <class T>
std::vector<T> read_whole(hid_t file, const std::string& name, hid_t mem_type, const std::string& path,
                          const Shape& shape) {
  std::vector<T> v(static_cast<std::size_t>(shape.numel()));
  Handle set(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path, Access::read);
  if (!v.empty() && H5Dread(set.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw_read_failure(name, path, "");
  return v;
}

// Whether a dataset's data carries Fletcher-32 checksums.
bool has_checksum(hid_t set) {
  const hid_t dcpl = H5Dget_create_plist(set);
  if (dcpl < 0) return false;
  bool found = false;
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n && !found; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t nvalues = 0;
    found = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nvalues, nullptr, 0, nullptr, &config) ==
            H5Z_FILTER_FLETCHER32;
  }
  H5Pclose(dcpl);
  return found;
}

}  // namespace

void H5File::write_text(const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", path_, Access::write);
  VINF_CHECK_HDF5(H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1)));
  VINF_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  const std::vector<hsize_t> dims{1};
  Handle space(H5Screate_simple(1, dims.data(), nullptr), H5Sclose, "H5Screate_simple", path_, Access::write);
  Handle dcpl(small_creation_list(dims, H5Tget_size(type.get())), H5Pclose, "H5Pcreate", path_, Access::write);
  Handle set(H5Dcreate2(id_, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             "creating a dataset", path_, Access::write);
  Handle file_space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space", path_, Access::write);
  Handle mem_space(H5Screate_simple(1, dims.data(), nullptr), H5Sclose, "H5Screate_simple", path_, Access::write);
  if (rank_ != 0) {
    VINF_CHECK_HDF5(H5Sselect_none(file_space.get()));
    VINF_CHECK_HDF5(H5Sselect_none(mem_space.get()));
  }
  Handle dxpl(collective_transfer(), H5Pclose, "H5Pcreate", path_, Access::write);
  if (comm_ != MPI_COMM_SELF) VINF_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (H5Dwrite(set.get(), type.get(), mem_space.get(), file_space.get(), dxpl.get(), padded.data()) < 0)
    throw Error("HDF5 could not write " + name + " to " + path_ +
                " (disk full or quota exceeded?): " + hdf5_error_text());
}

std::string H5File::read_text(const std::string& name) const {
  VINF_INPUT_CHECK(exists(name), path_, " has no dataset ", name);
  Handle set(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name, path_, Access::read);
  Handle type(H5Dget_type(set.get()), H5Tclose, "H5Dget_type of " + name, path_, Access::read);
  Handle space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space of " + name, path_, Access::read);
  VINF_INPUT_CHECK(H5Tget_class(type.get()) == H5T_STRING && !H5Tis_variable_str(type.get()) &&
                       H5Sget_simple_extent_npoints(space.get()) == 1,
                   path_, ": ", name, " is not one fixed-length string");
  // As in shape(): the string cannot claim more bytes than the file holds for it.
  const std::size_t size = H5Tget_size(type.get());
  const std::uint64_t stored = H5Dget_storage_size(set.get());
  VINF_INPUT_CHECK(size <= stored, path_, ": ", name, " claims ", size, " bytes of text, but the file holds ", stored,
                   " bytes of it (truncated or damaged?)");
  std::string value(size, '\0');
  if (H5Dread(set.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.data()) < 0)
    throw_read_failure(name, path_, "");
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

std::vector<float> H5File::read_f32(const std::string& name) const {
  return read_whole<float>(id_, name, H5T_NATIVE_FLOAT, path_, shape(name));
}

std::vector<std::int64_t> H5File::read_i64(const std::string& name) const {
  return read_whole<std::int64_t>(id_, name, H5T_NATIVE_INT64, path_, shape(name));
}

std::vector<std::string> H5File::describe() const {
  std::vector<std::string> lines;
  auto visit = [](hid_t obj, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    auto* out = static_cast<std::vector<std::string>*>(data);
    if (std::string(name) == ".") return 0;
    std::string line = std::string("/") + name;
    if (info->type == H5O_TYPE_GROUP) {
      line += "/";
    } else if (info->type == H5O_TYPE_DATASET) {
      const hid_t set = H5Dopen2(obj, name, H5P_DEFAULT);
      const hid_t space = H5Dget_space(set), type = H5Dget_type(set);
      const int rank = H5Sget_simple_extent_ndims(space);
      std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
      H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      line += "  [";
      for (std::size_t i = 0; i < dims.size(); ++i) line += (i ? ", " : "") + std::to_string(dims[i]);
      line += "] ";
      if (H5Tget_class(type) == H5T_STRING) {
        line += "text of " + std::to_string(H5Tget_size(type)) + " bytes";
      } else {
        line += H5Tget_class(type) == H5T_FLOAT ? "f" : "i";
        line += std::to_string(H5Tget_size(type) * 8);
      }
      if (has_checksum(set)) line += ", checksum";
      H5Tclose(type);
      H5Sclose(space);
      H5Dclose(set);
    }
    out->push_back(line);
    return 0;
  };
  if (H5Ovisit(id_, H5_INDEX_NAME, H5_ITER_INC, visit, &lines) < 0)
    throw_read_failure("the list of objects", path_, "");
  return lines;
}

std::vector<std::string> H5File::verify() const {
  std::vector<std::string> problems;
  auto visit = [](hid_t obj, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    if (info->type != H5O_TYPE_DATASET) return 0;
    auto* out = static_cast<std::vector<std::string>*>(data);
    const std::string where = std::string("/") + name;
    const hid_t set = H5Dopen2(obj, name, H5P_DEFAULT);
    const hid_t space = H5Dget_space(set), file_type = H5Dget_type(set);
    const hid_t type = H5Tget_native_type(file_type, H5T_DIR_ASCEND);  // floats in this machine's order
    const hssize_t count = H5Sget_simple_extent_npoints(space);
    const std::size_t size = H5Tget_size(type);
    // Variable-length data (not in vinf's files) would be read as pointers to free: not read here.
    const bool variable = H5Tis_variable_str(type) > 0 || H5Tget_class(type) == H5T_VLEN;
    std::vector<unsigned char> bytes(variable ? 0 : static_cast<std::size_t>(std::max<hssize_t>(count, 0)) * size);
    if (!variable && count > 0) {
      if (H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) {
        const bool checksum = hdf5_checksum_failed();
        const std::string why = hdf5_error_text();
        out->push_back(where + (checksum ? ": its checksum does not match (the stored bytes changed after they were "
                                           "written)"
                                         : ": cannot be read (" + why + ")"));
      } else if (H5Tget_class(type) == H5T_FLOAT && (size == 4 || size == 8)) {
        const Tensor t = Tensor::wrap(bytes.data(), size == 4 ? DType::f32 : DType::f64, Device::cpu(),
                                      Shape{static_cast<std::int64_t>(count)});
        const std::int64_t bad = first_non_finite(t);
        if (bad >= 0) out->push_back(where + ": holds a NaN or infinity (element " + std::to_string(bad) + ")");
      }
    }
    H5Tclose(type);
    H5Tclose(file_type);
    H5Sclose(space);
    H5Dclose(set);
    return 0;
  };
  if (H5Ovisit(id_, H5_INDEX_NAME, H5_ITER_INC, visit, &problems) < 0)
    throw_read_failure("the list of objects", path_, "");
  return problems;
}

}  // namespace vinf::io
