// The job queue of a job list (`vinf generate --jobs`) and the pipeline's hand-offs.
//
// The queue is kept by world rank 0: a thread there hands out job indices to the replicas as they
// ask (dynamic: a replica that finishes early takes the next job) and passes the reports of
// started, finished, failed and stopped jobs to one callback, in the order they arrive. The
// replicas talk to it over their own copy of the world (Job::queue_comm), so it meets no other
// message. Needs MPI_THREAD_MULTIPLE (vinf asks for it; Open MPI and MPICH give it).
//
// A hand-off is what one pipeline stage gives the next for one job: a header (text) and this
// rank's arrays, point to point between the same unit rank of the two stages (Job::handoff_comm).
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "job/job.hpp"

namespace vinf::job {

// A unit's report on one job, to the queue's keeper.
struct JobReport {
  int index = 0;
  std::string status;   // "running", "done", "skipped" (finished before), "failed", "stopped"
  std::string message;  // failed: the error; others: a note
  double seconds = 0;   // this stage's time on the job
  int replica = 0, stage = 0;
  std::string detail;   // JSON text the keeper records as it is (outputs, resumed_from, ...)
};

class JobQueue {
 public:
  // Collective over the job's world. `order`: the job indices to hand out, in order (the list
  // without the jobs finished or failed before). on_report runs on world rank 0's serving thread,
  // one report at a time.
  JobQueue(Job& job, std::vector<int> order, std::function<void(const JobReport&)> on_report);
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // A unit root of stage 0: the next job's index, or -1 when none is left.
  int next();
  // Any unit root.
  void report(const JobReport& r);
  // Each replica's last-stage unit root, once, when its replica will report nothing more. The
  // server ends when every replica has said so.
  void replica_finished();
  // Collective over the world: waits for the server to end (world rank 0) and lines up the ranks.
  void close();

 private:
  void serve(std::vector<int> order, std::function<void(const JobReport&)> on_report);
  Job& job_;
  MPI_Comm comm_;
  std::thread server_;
  bool closed_ = false;
};

// One pipeline hand-off, point to point over comm (blocking, without the collectives' watchdog:
// a stage may wait a whole stage's worth of steps for the one before it).
void send_handoff(MPI_Comm comm, int to, const std::string& header, const std::vector<const std::vector<float>*>& arrays);
std::string receive_handoff_header(MPI_Comm comm, int from);
std::vector<float> receive_handoff_array(MPI_Comm comm, int from);

}  // namespace vinf::job
