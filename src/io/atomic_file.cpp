#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "mpi/check.hpp"

namespace vinf::io {

namespace {

bool fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      throw Error("cannot write " + tmp + " (disk full or the directory not writable?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path);
  }
}

void commit_partial(MPI_Comm comm, const std::string& partial, const std::string& path) {
  VINF_CHECK_MPI(MPI_Barrier(comm));
  int rank = 0, ok = 1;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  if (rank == 0) {
    ok = fsync_path(partial) && std::rename(partial.c_str(), path.c_str()) == 0;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (ok) fsync_path(dir.empty() ? "." : dir.string());
  }
  VINF_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  if (!ok) throw Error("cannot sync and rename " + partial + " to " + path + " (disk full or the directory not writable?)");
}

NewDirectory::NewDirectory(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path p = fs::path(path).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created_.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  fs::create_directories(path, ec);
  VINF_INPUT_CHECK(!ec && fs::is_directory(path, ec), option, " ", path, ": cannot create the directory (",
                   ec ? ec.message() : "a file has that name", ")");
}

NewDirectory::~NewDirectory() {
  std::error_code ec;
  for (const std::string& dir : created_)
    if (!std::filesystem::remove(dir, ec)) break;  // not empty (or gone): it and its parents stay
}

}  // namespace vinf::io
