// Job lists (vinf generate --jobs) and the layout of replicas and pipeline stages: what each line
// becomes, what is refused with which words, and where every rank and step goes.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "app/job_list.hpp"
#include "core/error.hpp"
#include "job/plan.hpp"

namespace {

struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text) : path("/tmp/vinf-test-" + name) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

std::string refusal(const std::string& name, const std::string& text) {
  TempFile f(name, text);
  try {
    vinf::app::read_job_list(f.path);
  } catch (const vinf::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("job list, JSON Lines: types, lists, short names, out, comments") {
  TempFile f("list.jsonl",
             "# a comment\n"
             "{\"out\": \"kite\", \"seed\": 11, \"sampler.guidance\": 7.25, \"output.video\": false,"
             " \"prompt\": [\"a\", \"b, c\"]}\n"
             "\n"
             "{\"steps\": 3, \"negative\": \"blur\", \"frames\": 48, \"vi.local-frames\": null, \"config\": \"x.ini\"}\n");
  const auto jobs = vinf::app::read_job_list(f.path);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].out == "kite");
  CHECK(jobs[0].line == 2);
  CHECK(jobs[0].args == std::vector<std::string>{"--output.video=false", "--prompt.text=a", "--prompt.text=b, c",
                                                 "--sampler.guidance=7.25", "--sampler.seed=11"});
  CHECK(jobs[1].index == 1);
  CHECK(jobs[1].out == "job-1");
  CHECK(jobs[1].args == std::vector<std::string>{"--config=x.ini", "--video.frames=48", "--prompt.negative=blur",
                                                 "--sampler.steps=3"});
  CHECK(jobs[1].text.front() == '{');
}

TEST_CASE("job list, CSV: header, quotes, empty cells, out column") {
  TempFile f("list.csv",
             "out,seed,prompt,vi.local-frames\n"
             "a,1,\"a \"\"quoted\"\" word, and a comma\",\n"
             "# skipped\n"
             ",2,plain,8\n");
  const auto jobs = vinf::app::read_job_list(f.path);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].out == "a");
  CHECK(jobs[0].args == std::vector<std::string>{"--sampler.seed=1", "--prompt.text=a \"quoted\" word, and a comma"});
  CHECK(jobs[1].out == "job-1");
  CHECK(jobs[1].args == std::vector<std::string>{"--sampler.seed=2", "--prompt.text=plain", "--vi.local-frames=8"});
}

TEST_CASE("job list refusals name the file, the line and the key") {
  CHECK(refusal("r1.jsonl", "{\"seed\": 1}\n{\"seed\": 2, \"out\": \"job-0\"}\n").find("lines 1 and 2: both write out 'job-0'") !=
        std::string::npos);
  CHECK(refusal("r2.jsonl", "{\"seed\": 1,}\n").find("line 1: not a JSON object") != std::string::npos);
  CHECK(refusal("r3.jsonl", "[1, 2]\n").find("line 1: a JSON array, not an object") != std::string::npos);
  CHECK(refusal("r4.jsonl", "{\"model\": \"builtin:small\"}\n").find("'model' cannot be set per job: the replicas load") !=
        std::string::npos);
  CHECK(refusal("r5.jsonl", "{\"parallel.cfg\": 2}\n").find("the layout and the device are the whole run's") !=
        std::string::npos);
  CHECK(refusal("r6.jsonl", "{\"seed\": [1, 2]}\n").find("\"seed\" is a list, but --sampler.seed takes one value") !=
        std::string::npos);
  CHECK(refusal("r7.jsonl", "{\"seed\": {\"a\": 1}}\n").find("has a value of JSON type object") != std::string::npos);
  CHECK(refusal("r8.jsonl", "{\"out\": \"../x\"}\n").find("must be a plain directory name") != std::string::npos);
  CHECK(refusal("r9.jsonl", "{\"Seed Value\": 1}\n").find("'Seed Value' is not a vinf generate option name") !=
        std::string::npos);
  CHECK(refusal("r10.csv", "seed,prompt\n1,\"open\n").find("line 2: a quote is not closed") != std::string::npos);
  CHECK(refusal("r11.csv", "seed,prompt\n1\n").find("line 2: 1 field(s), the header has 2") != std::string::npos);
  CHECK(refusal("r12.jsonl", "# nothing\n\n").find("no jobs") != std::string::npos);
  CHECK(refusal("r13.csv", "resume,seed\nauto,1\n").find("'resume' cannot be set per job") != std::string::npos);
}

TEST_CASE("layout: replicas x pipeline stages x units, rank by rank") {
  vinf::job::JobPlan plan;
  plan.data = 2;
  plan.pipeline = 3;
  plan.cfg = 2;
  const vinf::job::Layout l = vinf::job::make_layout(plan, 24);
  CHECK(l.clips == 2);
  CHECK(l.unit() == 4);
  CHECK(l.world() == 24);
  // World rank 17 = replica 1 (ranks 12-23), stage (17 / 4) % 3 = 1, rank 1 in its unit.
  CHECK(l.replica_of(17) == 1);
  CHECK(l.stage_of(17) == 1);
  CHECK(l.unit_rank_of(17) == 1);
  CHECK(l.world_rank(1, 1, 1) == 17);
  for (int w = 0; w < 24; ++w) CHECK(l.world_rank(l.replica_of(w), l.stage_of(w), l.unit_rank_of(w)) == w);
  try {
    vinf::job::make_layout(plan, 20);
    FAIL("20 ranks over 2 x 3 x 2 were accepted");
  } catch (const vinf::InputError& e) {
    CHECK(std::string(e.what()).find("launch a multiple of 12 ranks") != std::string::npos);
  }
}

TEST_CASE("pipeline stages share the steps out evenly, also when they do not divide") {
  using vinf::job::stage_steps;
  // 30 steps over 4 stages: 7, 8, 7, 8.
  int next = 0;
  std::vector<int> sizes;
  for (int s = 0; s < 4; ++s) {
    const auto r = stage_steps(30, 4, s);
    CHECK(r.first == next);
    sizes.push_back(r.end - r.first);
    next = r.end;
  }
  CHECK(next == 30);
  CHECK(sizes == std::vector<int>{7, 8, 7, 8});
  CHECK(stage_steps(2, 3, 0).end == 0);  // more stages than steps: the first has none
  CHECK(stage_steps(2, 3, 2).end == 2);
}
