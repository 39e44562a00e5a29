// Files that appear complete or not at all: written under PATH.partial, then renamed.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace vinf::io {

// Writes bytes to path (one process). Throws vinf::Error naming the file when the disk is full or
// the directory not writable; the partial file is removed then.
void write_file_atomically(const std::string& path, const std::string& bytes);

// After every rank of comm closed `partial`: rank 0 syncs it, renames it to `path` and syncs the
// directory; every rank learns the outcome (vinf::Error on failure).
void commit_partial(MPI_Comm comm, const std::string& partial, const std::string& path);

// An output directory a command creates (with its missing parents) for what it is about to write:
// when the command fails before keep() and the directories it created are still empty, they are
// removed, so that a refused run leaves nothing behind. A directory that existed is never touched.
class NewDirectory {
 public:
  // Creates path; throws vinf::InputError naming `option` when it cannot.
  NewDirectory(const std::string& path, const std::string& option);
  ~NewDirectory();
  NewDirectory(const NewDirectory&) = delete;
  NewDirectory& operator=(const NewDirectory&) = delete;
  void keep() { created_.clear(); }

 private:
  std::vector<std::string> created_;  // innermost first
};

}  // namespace vinf::io
