// Many videos in one run (`vinf generate --jobs FILE`) and the pipeline over the denoising steps
// (--parallel.pipeline): every unit (one pipeline stage of one replica) runs the jobs that reach
// it; the first stage takes them from the queue that world rank 0 keeps, the others from the stage
// before them, and each hands the latents and the solver's memory to the next. OUT/jobs.json
// records every job's status, so that a run started again (a requeued allocation) skips the
// finished jobs and resumes the interrupted ones from their checkpoints.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/generate_run.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/video_pipeline.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/atomic_file.hpp"
#include "job/queue.hpp"

namespace fs = std::filesystem;

namespace vinf::app {

namespace {

const Reporter kJobsVoice("vinf generate:", true);

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string now_text() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

// OUT/jobs.json: every job's status, kept by world rank 0's queue thread and rewritten atomically
// on every change.
class JobRecord {
 public:
  JobRecord(std::string dir, const std::vector<JobSpec>& list, const std::string& list_path)
      : path_(dir + "/jobs.json") {
    doc_ = {{"format", "vinf-jobs"}, {"format_version", 1}, {"jobs_file", list_path}, {"updated", now_text()}};
    json jobs = json::array();
    for (const JobSpec& s : list)
      jobs.push_back({{"index", s.index},
                      {"out", s.out},
                      {"dir", dir + "/" + s.out},
                      {"line", s.line},
                      {"spec", s.text},
                      {"status", "pending"},
                      {"message", ""},
                      {"replica", nullptr},
                      {"seconds", 0.0},
                      {"starts", 0},
                      {"started_s", nullptr},
                      {"ended_s", nullptr},
                      {"updated", nullptr}});
    doc_["jobs"] = std::move(jobs);
  }

  // What an earlier run recorded for the same lines: finished jobs stay finished (while their
  // run.json is there), failed ones failed (until their line changes); the rest are to do.
  // Returns the jobs to hand out, in order.
  std::vector<int> take_over_earlier() {
    std::vector<int> open;
    json earlier;
    if (fs::exists(path_)) {
      try {
        std::ifstream in(path_);
        earlier = json::parse(in);
      } catch (const std::exception& e) {
        kJobsVoice.warn(path_, " is not readable JSON (", e.what(),
                        "); every job's own directory decides whether it is finished");
      }
    }
    for (json& j : doc_["jobs"]) {
      const json* old = find_same(earlier, j);
      if (old) {
        const std::string st = (*old)["status"].get<std::string>();
        const bool finished =
            (st == "done" || st == "skipped") && fs::exists(j["dir"].get<std::string>() + "/run.json");
        if (finished || st == "failed") {
          for (const char* k : {"status", "message", "replica", "seconds", "starts", "started_s", "ended_s", "updated"})
            if (old->contains(k)) j[k] = (*old)[k];
          if (finished) j["status"] = "done";
          continue;
        }
        j["starts"] = (*old)["starts"];
        j["seconds"] = (*old)["seconds"];
      }
      open.push_back(j["index"].get<int>());
    }
    write();
    return open;
  }

  void apply(const job::JobReport& r) {
    json& j = doc_["jobs"][static_cast<std::size_t>(r.index)];
    // Seconds since the epoch: when stage 0 began it (this run's first start) and when the last
    // stage finished it, for throughput over the list (perf/pipeline-sweep).
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (r.status == "running") {
      j["starts"] = j["starts"].get<int>() + 1;
      if (j["started_s"].is_null()) j["started_s"] = now;
    }
    if (r.status == "done") j["ended_s"] = now;
    if (r.status != "handed-on") j["status"] = r.status == "skipped" ? "done" : r.status;
    if (r.status == "running" || r.status == "failed" || r.status == "stopped") j["message"] = r.message;
    if (r.status == "skipped") j["message"] = "finished before this run (run.json in its directory)";
    j["replica"] = r.replica;
    j["seconds"] = j["seconds"].get<double>() + r.seconds;
    j["updated"] = now_text();
    write();
  }

  int count(const std::string& status) const {
    int n = 0;
    for (const json& j : doc_["jobs"]) n += j["status"] == status ? 1 : 0;
    return n;
  }
  const json& jobs() const { return doc_["jobs"]; }
  const std::string& path() const { return path_; }

 private:
  static const json* find_same(const json& earlier, const json& j) {
    if (!earlier.is_object() || !earlier.contains("jobs")) return nullptr;
    for (const json& o : earlier["jobs"])
      if (o.value("out", "") == j["out"] && o.value("spec", "") == j["spec"] && o.contains("status")) return &o;
    return nullptr;
  }
  void write() {
    doc_["updated"] = now_text();
    io::write_file_atomically(path_, doc_.dump(2) + "\n");
  }
  std::string path_;
  json doc_;
};

// The plan of job `spec`: the command line with the job's options over it, its directory under
// the list's, and nothing that the replicas share changed. Throws vinf::InputError.
RunPlan plan_job(const std::vector<std::string>& args, const RunPlan& base, const JobSpec& spec,
                 const std::string& list_dir, int world) {
  if (list_dir.empty()) return base;  // one video through the pipeline
  RunPlan o;
  const int status = parse_generate_options(args, o, &spec.args);
  VINF_INPUT_CHECK(status == 0, "--help in a job line");
  const auto same = [&](bool equal, const char* what) {
    VINF_INPUT_CHECK(equal, "its ", what,
                     " differ(s) from the run's (a config file of the job's sets it?); the "
                     "replicas load the model once and keep their layout: run another job list for it");
  };
  // A job's plan names the pipeline's own text encoder and tokenizer where the command line left
  // them to it (the run's plan does not resolve them when its prompts come from the jobs).
  const auto part = [](const RunPlan& p, const std::string& dir, const char* sub) {
    return dir.empty() && !p.builtin() && p.embeddings.empty() ? p.model + "/" + sub : dir;
  };
  same(o.model == base.model && o.unet == base.unet && o.vae == base.vae && o.model_seed == base.model_seed &&
           part(o, o.text_encoder, "text_encoder") == part(base, base.text_encoder, "text_encoder") &&
           part(o, o.tokenizer, "tokenizer") == part(base, base.tokenizer, "tokenizer"),
       "model");
  same(o.job.cfg == base.job.cfg && o.job.tensor == base.job.tensor && o.job.data == base.job.data &&
           o.job.pipeline == base.job.pipeline && o.job.device == base.job.device && o.job.dtype == base.job.dtype &&
           o.job.tf32 == base.job.tf32 && o.job.transport == base.job.transport,
       "layout, device or precision");
  o.jobs_file.clear();
  o.out = list_dir + "/" + spec.out;
  o.name = spec.out;
  o.job_label = spec.out;
  if (o.resume.empty()) o.resume = "auto";  // a job list resumes its interrupted jobs
  pipeline::open_pipeline(o)->check_job(o, world);
  return o;
}

// -- hand-offs between pipeline stages ---------------------------------------------------------

void send_state(job::Job& job, int to, int index, const StageState* s) {
  json h = {{"kind", s ? "job" : "end"}, {"index", index}};
  if (s)
    h.update({{"out_dir", s->out_dir},
              {"step", s->step},
              {"first_step", s->first_step},
              {"step_seconds", s->step_seconds},
              {"denoise_seconds", s->denoise_seconds},
              {"checkpoint_seconds", s->checkpoint_seconds},
              {"resumed_from", s->resumed_from},
              {"text", {s->text.prompts, s->text.tokens, s->text.width}}});
  std::vector<const std::vector<float>*> arrays;
  if (s) arrays = {&s->latents, &s->previous_x0, &s->text.prompt_embeds, &s->text.negative_prompt_embeds};
  job::send_handoff(job.handoff_comm(), to, h.dump(), arrays);
}

// The next hand-off from `from`: a job's index and state, or nullopt at the end.
std::optional<std::pair<int, StageState>> receive_state(job::Job& job, int from) {
  const json h = json::parse(job::receive_handoff_header(job.handoff_comm(), from));
  if (h["kind"] == "end") return std::nullopt;
  StageState s;
  s.out_dir = h["out_dir"];
  s.step = h["step"];
  s.first_step = h["first_step"];
  s.step_seconds = h["step_seconds"].get<std::vector<double>>();
  s.denoise_seconds = h["denoise_seconds"];
  s.checkpoint_seconds = h["checkpoint_seconds"];
  s.resumed_from = h["resumed_from"];
  s.text.prompts = h["text"][0];
  s.text.tokens = h["text"][1];
  s.text.width = h["text"][2];
  for (std::vector<float>* a : {&s.latents, &s.previous_x0, &s.text.prompt_embeds, &s.text.negative_prompt_embeds})
    *a = job::receive_handoff_array(job.handoff_comm(), from);
  return std::make_pair(h["index"].get<int>(), std::move(s));
}

// -- the stages --------------------------------------------------------------------------------

class Stage {
 public:
  Stage(const std::vector<std::string>& args, const RunPlan& base, const std::vector<JobSpec>& list,
        std::string list_dir, job::Job& job, job::JobQueue& queue)
      : args_(args),
        base_(base),
        list_(list),
        list_dir_(std::move(list_dir)),
        job_(job),
        queue_(queue),
        family_(pipeline::open_pipeline(base)) {
    const job::Layout& l = job.layout();
    const int w = job.world_session().rank(), u = l.unit_rank_of(w);
    if (job.stage() > 0) from_ = l.world_rank(job.replica(), job.stage() - 1, u);
    if (job.stage() + 1 < l.pipeline) to_ = l.world_rank(job.replica(), job.stage() + 1, u);
  }

  // Runs every job that reaches this stage; true when a stop signal ended it early.
  bool run() {
    family_->load_ahead(base_, job_);
    if (from_ < 0) {
      while (!stopping()) {
        const int k = next_job();
        if (k < 0) break;
        run_job(k, nullptr);
      }
    } else {
      while (auto got = receive_state(job_, from_)) {
        // Stopping: the job's hand-off is in its checkpoints; take in the rest until the end.
        if (stopping())
          report(got->first, "stopped", "stopped before this stage began it", 0);
        else
          run_job(got->first, &got->second);
      }
    }
    if (to_ >= 0) send_state(job_, to_, -1, nullptr);
    if (to_ < 0 && job_.root()) queue_.replica_finished();
    return stopped_;
  }

 private:
  bool stopping() {
    stopped_ = stopped_ || job_.session().max(static_cast<double>(pipeline::stop_signal())) > 0;
    return stopped_;
  }
  int next_job() {
    std::string k = job_.root() ? std::to_string(queue_.next()) : "";
    job_.session().broadcast(k);
    return std::stoi(k);
  }
  void report(int k, const std::string& status, const std::string& message, double seconds) {
    if (job_.root()) queue_.report({k, status, message, seconds, job_.replica(), job_.stage(), ""});
  }

  void run_job(int k, const StageState* in) {
    const auto t0 = Clock::now();
    const JobSpec spec = list_.empty() ? JobSpec{} : list_[static_cast<std::size_t>(k)];
    if (!in) report(k, "running", "", 0);
    try {
      RunPlan o = plan_job(args_, base_, spec, list_dir_, job_.world_session().size());
      const VideoOutcome v = pipeline::run_spec(*family_, o, job_, in);
      const double took = seconds_since(t0);
      switch (v.end) {
        case VideoEnd::complete: report(k, "done", "", took); break;
        case VideoEnd::finished_before: report(k, "skipped", "", took); break;
        case VideoEnd::stopped:
          stopped_ = true;
          report(k, "stopped",
                 std::string("stopped by ") + pipeline::signal_name(v.stop_signal) + " after a checkpoint", took);
          break;
        case VideoEnd::handed_on:
          report(k, "handed-on", "", took);
          send_state(job_, to_, k, &v.handoff);
          break;
      }
    } catch (const InputError& e) {
      if (list_.empty()) throw;  // one video: refused as a single run is
      // Bad input of this job, seen alike by every rank of the unit: the others go on.
      if (job_.root()) {
        Reporter("vinf generate [" + (spec.out.empty() ? std::string("job") : spec.out) + "]:", true)
            .note("error: ", e.what());
        kJobsVoice.note("the job is recorded as failed; the other jobs go on");
      }
      report(k, "failed", e.what(), seconds_since(t0));
    }
  }

  const std::vector<std::string>& args_;
  const RunPlan& base_;
  const std::vector<JobSpec>& list_;
  std::string list_dir_;
  job::Job& job_;
  job::JobQueue& queue_;
  std::unique_ptr<pipeline::VideoPipeline> family_;  // the list's model family (one model per list)
  int from_ = -1, to_ = -1;
  bool stopped_ = false;
};

// The list's directory (--out, or outputs/<name>-<id>), made on world rank 0; an existing one is
// where an earlier start of the same list left off.
std::string list_directory(const RunPlan& base, job::Job& job) {
  return pipeline::decided_by_root(job.world_session(), [&] {
    const std::string dir = base.out.empty() ? pipeline::default_out_dir(base.name) : base.out;
    std::error_code ec;
    fs::create_directories(dir, ec);
    VINF_INPUT_CHECK(!ec && fs::is_directory(dir), "cannot create the job list's output directory ", dir, ": ",
                     ec ? ec.message() : "a file of that name is in the way");
    return dir;
  });
}

void print_summary(const JobRecord& record) {
  kJobsVoice.note("jobs (", record.path(), "):");
  for (const json& j : record.jobs()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-24s %-8s %8.1f s  ", j["out"].get<std::string>().c_str(),
                  j["status"].get<std::string>().c_str(), j["seconds"].get<double>());
    std::cerr << line << j["message"].get<std::string>() << "\n";
  }
  kJobsVoice.note(record.count("done"), " done, ", record.count("failed"), " failed, ",
                  record.count("stopped") + record.count("pending") + record.count("running"), " to do; ",
                  "jobs/summarize ", fs::path(record.path()).parent_path().string(), " tabulates them");
}

}  // namespace

int run_job_list(const std::vector<std::string>& args, const RunPlan& base, const std::vector<JobSpec>& list,
                 job::Job& job) {
  mpi::Session& world = job.world_session();
  const std::string list_dir = list.empty() ? "" : list_directory(base, job);
  std::unique_ptr<JobRecord> record;
  std::vector<int> order{0};
  if (world.rank() == 0 && !list.empty()) {
    record = std::make_unique<JobRecord>(list_dir, list, base.jobs_file);
    order = record->take_over_earlier();
    const std::string others = order.size() < list.size() ? " (" + list_dir + "/jobs.json has the others)" : "";
    Reporter("vinf generate:", true, base.quiet)
        .say(list.size(), " job(s) in ", base.jobs_file, ", ", order.size(), " to run", others, ", ", job.layout().data,
             " replica(s) x ", job.layout().pipeline, " pipeline stage(s) of ", job.layout().unit(), " rank(s)");
  }
  job::JobQueue queue(job, order, [&](const job::JobReport& r) {
    if (record) record->apply(r);
  });
  Stage stage(args, base, list, list_dir, job, queue);
  const bool stopped = stage.run();
  queue.close();
  const bool any_stopped = world.max(stopped ? 1.0 : 0.0) > 0;
  std::string failed = record ? std::to_string(record->count("failed")) : "0";
  world.broadcast(failed);
  // The table, also under --quiet when a job failed or the run stopped: what to look at next.
  if (record && (!base.quiet || any_stopped || std::stoi(failed) > 0)) print_summary(*record);
  if (any_stopped) return kExitStopped;
  return std::stoi(failed) > 0 ? 2 : 0;
}

}  // namespace vinf::app
