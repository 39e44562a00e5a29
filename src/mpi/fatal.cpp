#include "mpi/fatal.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "mpi/check.hpp"

namespace vinf::mpi {

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len)) + " (code " + std::to_string(code) + ")";
}

namespace {

std::atomic<bool> g_finalize_unsafe{false}, g_starts_mpi{false};

// A failing rank sends its message to rank 0 under this tag (MPI guarantees tags up to 32767).
constexpr int kReportTag = 32001;
constexpr std::size_t kMaxReport = 16384;
// Rank 0 collects the other ranks' messages for this long after its own failure (less when every
// rank has reported); another failing rank waits this long for rank 0 to end the job before it
// reports itself. Ranks that fail on the same input do so within moments of each other.
constexpr double kCollectSeconds = 2.0, kWaitForRootSeconds = 5.0;

struct Report {
  int rank = 0;
  bool labelled = false;  // the text names its rank already (an internal error's process label)
  std::string text;
};

// The world size the launcher announces, for an error before MPI_Init (1 when not launched as a job).
int launched_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  }
  return 1;
}

void print(const std::string& text) {
  std::fprintf(stderr, "vinf: error: %s\n", text.c_str());
  std::fflush(stderr);
}

// "rank 2", "ranks 0, 2", "ranks 0-3, 5".
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (i ? ", " : "") + std::to_string(ranks[i]) + (j > i ? (j > i + 1 ? "-" : ", ") + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return s;
}

// Rank 0: one line per distinct message; the ranks are named unless every rank has the message.
void print_reports(const std::vector<Report>& reports, int size) {
  std::vector<bool> done(reports.size(), false);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (done[i]) continue;
    std::vector<int> ranks;
    for (std::size_t k = i; k < reports.size(); ++k) {
      if (reports[k].text == reports[i].text) {
        ranks.push_back(reports[k].rank);
        done[k] = true;
      }
    }
    const bool everyone = static_cast<int>(ranks.size()) == size;
    print(reports[i].labelled || everyone ? reports[i].text : reports[i].text + " (" + rank_list(ranks) + ")");
  }
}

// Takes the messages that have arrived from other failing ranks.
void collect(std::vector<Report>& reports) {
  for (;;) {
    int arrived = 0;
    MPI_Message message;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kReportTag, MPI_COMM_WORLD, &arrived, &message, &status) != MPI_SUCCESS || !arrived)
      return;
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string buffer(static_cast<std::size_t>(std::max(count, 0)), '\0');
    if (MPI_Mrecv(buffer.data(), count, MPI_CHAR, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS || buffer.empty()) return;
    reports.push_back({status.MPI_SOURCE, buffer[0] == 'L', buffer.substr(1)});
  }
}

// Prints the message once for the job: rank 0 gathers what the other ranks report and prints each
// distinct message once; any other rank sends its message to rank 0 and prints it itself only when
// rank 0 has not ended the job in time (rank 0 is then busy elsewhere, e.g. in a collective).
void report(const Report& mine, int rank, int size) {
  using Clock = std::chrono::steady_clock;
  const auto since = [start = Clock::now()] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (rank == 0) {
    std::vector<Report> reports{mine};
    while (static_cast<int>(reports.size()) < size && since() < kCollectSeconds) {
      collect(reports);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::sort(reports.begin(), reports.end(), [](const Report& a, const Report& b) { return a.rank < b.rank; });
    print_reports(reports, size);
    return;
  }
  // Static: the send may still read it while this rank waits and then aborts.
  static std::string payload;
  payload.assign(1, mine.labelled ? 'L' : 'U');
  payload.append(mine.text, 0, kMaxReport);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(payload.data(), static_cast<int>(payload.size()), MPI_CHAR, 0, kReportTag, MPI_COMM_WORLD, &request) ==
      MPI_SUCCESS) {
    while (since() < kWaitForRootSeconds) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Still here: rank 0 did not fail, so this rank speaks for itself (the request is left behind).
  print(mine.labelled ? mine.text : mine.text + " (" + rank_list({rank}) + ")");
}

[[noreturn]] void end(const Report& mine, int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // An error before MPI_Init (an option, a file) on a rank of a multi-rank job: join the job, so
  // that the ranks agree on what is printed and the others are ended too.
  if (!initialized && !finalized && g_starts_mpi && launched_size() > 1) {
    int provided = 0;
    initialized = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS;
    if (initialized) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  int rank = 0, size = 1;
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size > 1) {
    report(mine, rank, size);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  print(mine.text);
  if (initialized && !finalized) {
    if (g_finalize_unsafe) {
      std::fflush(stdout);
      std::_Exit(exit_code);
    }
    MPI_Finalize();
  }
  std::exit(exit_code);
}

}  // namespace

void mark_finalize_unsafe() { g_finalize_unsafe = true; }

void set_starts_mpi() { g_starts_mpi = true; }

[[noreturn]] void fatal(const char* message, int exit_code) { end({0, false, message}, exit_code); }

[[noreturn]] void fatal(const std::exception& e, int exit_code) {
  // A vinf::InputError is about the user's input, the same on every rank that has it; every other
  // vinf::Error carries the process label (host, rank, device) of where it happened.
  if (dynamic_cast<const InputError*>(&e)) end({0, false, e.what()}, exit_code);
  if (dynamic_cast<const Error*>(&e)) end({0, true, e.what()}, exit_code);
  // Not one of ours (std::bad_alloc, a library exception): add the process label.
  end({0, true, std::string(e.what()) + " (" + process_label_text() + ")"}, exit_code);
}

}  // namespace vinf::mpi
