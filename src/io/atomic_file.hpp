// Files that appear complete or not at all: written under PATH.partial, then renamed.
#pragma once

#include <mpi.h>

#include <string>

namespace vinf::io {

// Writes bytes to path (one process). Throws vinf::Error naming the file when the disk is full or
// the directory not writable; the partial file is removed then.
void write_file_atomically(const std::string& path, const std::string& bytes);

// After every rank of comm closed `partial`: rank 0 syncs it, renames it to `path` and syncs the
// directory; every rank learns the outcome (vinf::Error on failure).
void commit_partial(MPI_Comm comm, const std::string& partial, const std::string& path);

}  // namespace vinf::io
