// One family of error checks. Every failure becomes a vinf::Error whose message says what failed,
// the statement, file:line, host, rank and device; the program's top level turns it into one fatal
// path (src/mpi/fatal.hpp) that ends every rank. Shape and dtype checks use VINF_CHECK and stay on
// in release builds. Parsers of user input return errors instead of throwing through here.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace vinf {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A problem with what the user gave the program (a file, a config value, an option), as opposed
// to a failure inside it: the message names the input and says what to do, without source
// locations or ranks (the fatal path names the ranks where not all have it), and the program
// exits with status 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// Who this process is, for messages. The rank starts from the launcher's environment
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) and the bootstrap refines it.
struct ProcessLabel {
  std::string host;
  int rank = -1;
  std::string device = "cpu";
};
const ProcessLabel& process_label();
void set_process_rank(int rank);
void set_process_device(const std::string& device);
std::string process_label_text();  // "host vm, rank 3, device cuda:1"

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream s;
  (s << ... << std::forward<Args>(args));
  return s.str();
}
[[noreturn]] void raise(const char* file, int line, const std::string& what, const std::string& detail);
[[noreturn]] void raise_input(const std::string& what);
}  // namespace detail

}  // namespace vinf

// VINF_CHECK(cond, message parts...): throws vinf::Error when cond is false.
#define VINF_CHECK(cond, ...)                                                                        \
  do {                                                                                               \
    if (!(cond)) [[unlikely]]                                                                        \
      ::vinf::detail::raise(__FILE__, __LINE__, ::vinf::detail::concat(__VA_ARGS__), "check `" #cond "`"); \
  } while (0)

// VINF_INPUT_CHECK(cond, message parts...) / VINF_INPUT_FAIL(...): throw vinf::InputError, for bad
// user input.
#define VINF_INPUT_CHECK(cond, ...)                                                                  \
  do {                                                                                               \
    if (!(cond)) [[unlikely]]                                                                        \
      ::vinf::detail::raise_input(::vinf::detail::concat(__VA_ARGS__));                              \
  } while (0)
#define VINF_INPUT_FAIL(...) ::vinf::detail::raise_input(::vinf::detail::concat(__VA_ARGS__))

// VINF_FAIL(message parts...): throws unconditionally.
#define VINF_FAIL(...) ::vinf::detail::raise(__FILE__, __LINE__, ::vinf::detail::concat(__VA_ARGS__), "")

// The generic status check the library-specific macros are built on: `ok` is an expression in the
// variable `status_`; `describe` turns the status into text; `text` is the statement as written
// (stringised by the outer macro, before library macros such as MPI_INT expand).
#define VINF_CHECK_STATUS(library, stmt, text, ok, describe)                                         \
  do {                                                                                               \
    auto status_ = (stmt);                                                                           \
    if (!(ok)) [[unlikely]]                                                                          \
      ::vinf::detail::raise(__FILE__, __LINE__, ::vinf::detail::concat(library " call failed: ", describe), \
                            "statement `" text "`");                                                 \
  } while (0)
