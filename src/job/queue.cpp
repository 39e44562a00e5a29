#include "job/queue.hpp"

#include <chrono>
#include <cstdio>
#include <climits>
#include <deque>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "mpi/check.hpp"

namespace vinf::job {

namespace {

using json = nlohmann::json;

enum Tag : int { kNext = 7201, kReply = 7202, kReport = 7203, kFinished = 7204, kHandoffHeader = 7211, kHandoffArray = 7212 };

// synchronous: returns once the receiver has taken the message (MPI_Ssend).
void send_text(MPI_Comm comm, const std::string& s, int to, int tag, bool synchronous = false) {
  VINF_CHECK(s.size() <= static_cast<std::size_t>(INT_MAX), "a message of ", s.size(), " bytes is over MPI's count limit");
  const int n = static_cast<int>(s.size());
  if (synchronous) VINF_CHECK_MPI(MPI_Ssend(s.data(), n, MPI_CHAR, to, tag, comm));
  else VINF_CHECK_MPI(MPI_Send(s.data(), n, MPI_CHAR, to, tag, comm));
}

// Waits for a message without spinning: a rank waiting for the stage before it (or for the last
// replica at the end) leaves the cores to the ranks that compute, also when ranks outnumber them.
MPI_Status wait_for(MPI_Comm comm, int from, int tag) {
  MPI_Status st;
  for (int arrived = 0;;) {
    VINF_CHECK_MPI(MPI_Iprobe(from, tag, comm, &arrived, &st));
    if (arrived) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string receive_text(MPI_Comm comm, int from, int tag, MPI_Status* status = nullptr) {
  const MPI_Status st = wait_for(comm, from, tag);
  int n = 0;
  MPI_Get_count(&st, MPI_CHAR, &n);
  std::string s(static_cast<std::size_t>(n), '\0');
  VINF_CHECK_MPI(MPI_Recv(s.data(), n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, comm, MPI_STATUS_IGNORE));
  if (status) *status = st;
  return s;
}

}  // namespace

JobQueue::JobQueue(Job& job, std::vector<int> order, std::function<void(const JobReport&)> on_report)
    : job_(job), comm_(job.queue_comm()) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  VINF_CHECK(level == MPI_THREAD_MULTIPLE, "a job list needs an MPI library that runs with MPI_THREAD_MULTIPLE ",
             "(the queue is served by a thread of rank 0); this one gives level ", level);
  if (job.world_session().rank() == 0)
    server_ = std::thread([this, order = std::move(order), on_report = std::move(on_report)]() mutable {
      serve(std::move(order), std::move(on_report));
    });
}

JobQueue::~JobQueue() {
  // Unwinding from an error: the fatal path ends every rank; the thread must not outlive us joined.
  if (server_.joinable()) server_.detach();
}

void JobQueue::serve(std::vector<int> order, std::function<void(const JobReport&)> on_report) {
  std::deque<int> left(order.begin(), order.end());
  int finished = 0;
  const int replicas = job_.layout().data;
  while (finished < replicas) {
    // Polling, not a blocking receive: an MPI library spinning in a receive would take a core
    // from the rank's own threads for the whole run. Only the server's own tags: rank 0's main
    // thread receives its replies (kReply) on this communicator too.
    MPI_Status st;
    int arrived = 0;
    for (const int tag : {kNext, kReport, kFinished}) {
      VINF_CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &arrived, &st));
      if (arrived) break;
    }
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    const std::string text = receive_text(comm_, st.MPI_SOURCE, st.MPI_TAG);
    if (st.MPI_TAG == kNext) {
      const int k = left.empty() ? -1 : left.front();
      if (!left.empty()) left.pop_front();
      VINF_CHECK_MPI(MPI_Send(&k, 1, MPI_INT, st.MPI_SOURCE, kReply, comm_));
    } else if (st.MPI_TAG == kReport) {
      const json j = json::parse(text);
      // A stop signal ends the run: no replica starts another job.
      if (j["status"] == "stopped") left.clear();
      try {
        on_report({j["index"].get<int>(), j["status"].get<std::string>(), j["message"].get<std::string>(),
                   j["seconds"].get<double>(), j["replica"].get<int>(), j["stage"].get<int>(),
                   j["detail"].get<std::string>()});
      } catch (const std::exception& e) {
        // The record is a convenience for the next start; the jobs' own directories still say
        // what is done (run.json). Say so and go on serving.
        std::fprintf(stderr, "vinf generate: warning: could not record job %d's status: %s\n", j["index"].get<int>(),
                     e.what());
      }
    } else if (st.MPI_TAG == kFinished) {
      ++finished;
    }
  }
}

int JobQueue::next() {
  send_text(comm_, "", 0, kNext);
  int k = -1;
  VINF_CHECK_MPI(MPI_Recv(&k, 1, MPI_INT, 0, kReply, comm_, MPI_STATUS_IGNORE));
  return k;
}

void JobQueue::report(const JobReport& r) {
  const json j = {{"index", r.index},     {"status", r.status}, {"message", r.message}, {"seconds", r.seconds},
                  {"replica", r.replica}, {"stage", r.stage},   {"detail", r.detail}};
  // Synchronous: what a rank does after reporting (hand a job on, say that its replica is done)
  // happens after the keeper has the report. MPI orders neither messages of other tags from the
  // same rank (a replica's "finished" could be matched before its last report, and the keeper
  // would end without it) nor messages from different ranks.
  send_text(comm_, j.dump(), 0, kReport, true);
}

void JobQueue::replica_finished() { send_text(comm_, "", 0, kFinished); }

void JobQueue::close() {
  if (closed_) return;
  closed_ = true;
  if (server_.joinable()) server_.join();
  MPI_Request barrier;
  VINF_CHECK_MPI(MPI_Ibarrier(comm_, &barrier));
  for (int done = 0; !done;) {
    VINF_CHECK_MPI(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void send_handoff(MPI_Comm comm, int to, const std::string& header, const std::vector<const std::vector<float>*>& arrays) {
  send_text(comm, header, to, kHandoffHeader);
  for (const std::vector<float>* a : arrays) {
    VINF_CHECK(a->size() <= static_cast<std::size_t>(INT_MAX), "a hand-off of ", a->size(),
               " values is over MPI's count limit; use more frame ranks");
    VINF_CHECK_MPI(MPI_Send(a->data(), static_cast<int>(a->size()), MPI_FLOAT, to, kHandoffArray, comm));
  }
}

std::string receive_handoff_header(MPI_Comm comm, int from) { return receive_text(comm, from, kHandoffHeader); }

std::vector<float> receive_handoff_array(MPI_Comm comm, int from) {
  const MPI_Status st = wait_for(comm, from, kHandoffArray);
  int n = 0;
  MPI_Get_count(&st, MPI_FLOAT, &n);
  std::vector<float> a(static_cast<std::size_t>(n));
  VINF_CHECK_MPI(MPI_Recv(a.data(), n, MPI_FLOAT, from, kHandoffArray, comm, MPI_STATUS_IGNORE));
  return a;
}

}  // namespace vinf::job
