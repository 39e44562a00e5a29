#include "app/job_list.hpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"

namespace vinf::app {

namespace {

using json = nlohmann::json;

std::string trim_field(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") + 1 - a);
}

bool skipped(const std::string& line) {
  const std::string t = trim_field(line);
  return t.empty() || t.front() == '#';
}

// The CSV fields of one line: "..." quotes a field with commas, "" inside quotes is a quote,
// spaces around fields go. False for an unterminated quote.
bool split_csv(const std::string& line, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') field += c;
      else if (i + 1 < line.size() && line[i + 1] == '"') field += '"', ++i;
      else quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(trim_field(field));
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  fields.push_back(trim_field(field));
  return !quoted;
}

// A JSON number as the option parser reads it: integers exactly, others round-tripping.
std::string number_text(const json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  if (v.is_number_unsigned()) return std::to_string(v.get<unsigned long long>());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
  return buf;
}

// key = value as --name=value tokens (a list: one token per item).
void add_value(JobSpec& job, const std::string& key, const json& v, const std::string& where) {
  const std::string name = job_option_name(key);
  const auto token = [&](const json& item) -> std::string {
    if (item.is_string()) return item.get<std::string>();
    if (item.is_boolean()) return item.get<bool>() ? "true" : "false";
    if (item.is_number()) return number_text(item);
    VINF_INPUT_FAIL(where, ": \"", key, "\" has a value of JSON type ", item.type_name(),
                    "; give a string, a number, true/false, or a list of them (for a repeatable option)");
  };
  if (v.is_null()) return;  // left to the command line and the config file
  if (v.is_array()) {
    VINF_INPUT_CHECK(name == "prompt.text", where, ": \"", key, "\" is a list, but --", name,
                     " takes one value (only prompt.text is repeatable)");
    for (const json& item : v) job.args.push_back("--" + name + "=" + token(item));
    return;
  }
  job.args.push_back("--" + name + "=" + token(v));
}

void check_key(const std::string& key, const std::string& where) {
  bool ok = !key.empty() && key.front() >= 'a' && key.front() <= 'z';
  for (char c : key) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-');
  VINF_INPUT_CHECK(ok, where, ": '", key, "' is not a vinf generate option name (e.g. sampler.seed, vi.local-frames, ",
                   "seed, prompt, out)");
  const std::string why = per_job_refusal(job_option_name(key));
  VINF_INPUT_CHECK(why.empty(), where, ": '", key, "' cannot be set per job: ", why);
}

void set_out(JobSpec& job, const std::string& out, const std::string& where) {
  VINF_INPUT_CHECK(!out.empty() && out != "." && out != ".." && out.find('/') == std::string::npos, where,
                   ": out '", out, "' must be a plain directory name (no '/'), made under --out");
  job.out = out;
}

JobSpec parse_json_line(const std::string& line, const std::string& where) {
  json obj;
  try {
    obj = json::parse(line);
  } catch (const json::exception& e) {
    VINF_INPUT_FAIL(where, ": not a JSON object (", e.what(), "); each line of a JSON Lines job list is one object");
  }
  VINF_INPUT_CHECK(obj.is_object(), where, ": a JSON ", obj.type_name(), ", not an object");
  JobSpec job;
  for (const auto& [key, v] : obj.items()) {
    if (key == "out") {
      VINF_INPUT_CHECK(v.is_string(), where, ": \"out\" must be a string");
      set_out(job, v.get<std::string>(), where);
      continue;
    }
    check_key(key, where);
    add_value(job, key, v, where);
  }
  return job;
}

JobSpec parse_csv_row(const std::vector<std::string>& header, const std::vector<std::string>& row,
                      const std::string& where) {
  VINF_INPUT_CHECK(row.size() == header.size(), where, ": ", row.size(), " field(s), the header has ", header.size(),
                   " (quote fields that hold commas)");
  JobSpec job;
  for (std::size_t j = 0; j < header.size(); ++j) {
    if (row[j].empty()) continue;
    if (header[j] == "out") set_out(job, row[j], where);
    else job.args.push_back("--" + job_option_name(header[j]) + "=" + row[j]);
  }
  return job;
}

bool is_csv(const std::string& path, const std::vector<std::string>& lines) {
  const auto ends = [&](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".csv")) return true;
  if (ends(".jsonl") || ends(".json") || ends(".ndjson")) return false;
  for (const std::string& l : lines)
    if (!skipped(l)) return trim_field(l).front() != '{';
  return false;
}

}  // namespace

std::string job_option_name(const std::string& key) {
  static const std::map<std::string, std::string> shorts = {{"seed", "sampler.seed"},   {"prompt", "prompt.text"},
                                                            {"negative", "prompt.negative"}, {"steps", "sampler.steps"},
                                                            {"frames", "video.frames"}};
  const auto it = shorts.find(key);
  return it == shorts.end() ? key : it->second;
}

std::string per_job_refusal(const std::string& name) {
  if (name == "jobs" || name == "help" || name == "out" || name == "name")
    return "it belongs to the whole run (give `out` for the job's directory)";
  if (name.rfind("parallel.", 0) == 0 || name == "device" || name == "comm-backend" || name == "comm-timeout")
    return "the layout and the device are the whole run's; run another job list for another layout";
  if (name == "model" || name.rfind("model.", 0) == 0 || name == "dtype" || name == "tf32")
    return "the replicas load the model once; run another job list for another model or precision";
  if (name == "resume") return "a job list resumes every interrupted job from its own checkpoints";
  return "";
}

std::vector<JobSpec> read_job_list(const std::string& path) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "--jobs ", path, ": cannot read the file");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const bool csv = is_csv(path, lines);
  std::vector<JobSpec> jobs;
  std::vector<std::string> header, row;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (skipped(lines[i])) continue;
    const std::string where = "--jobs " + path + " line " + std::to_string(i + 1);
    if (csv && header.empty()) {
      VINF_INPUT_CHECK(split_csv(lines[i], header), where, ": a quote is not closed");
      for (const std::string& key : header)
        if (key != "out") check_key(key, where);
      continue;
    }
    if (csv) VINF_INPUT_CHECK(split_csv(lines[i], row), where, ": a quote is not closed");
    JobSpec job = csv ? parse_csv_row(header, row, where) : parse_json_line(lines[i], where);
    job.index = static_cast<int>(jobs.size());
    job.line = static_cast<int>(i + 1);
    job.text = trim_field(lines[i]);
    if (job.out.empty()) job.out = "job-" + std::to_string(job.index);
    jobs.push_back(std::move(job));
  }
  VINF_INPUT_CHECK(!jobs.empty(), "--jobs ", path, ": no jobs (", csv ? "a CSV header and one row per job" : "one JSON "
                   "object per line", "; blank and # lines do not count)");
  std::map<std::string, int> seen;
  for (const JobSpec& j : jobs) {
    const auto [it, fresh] = seen.emplace(j.out, j.line);
    VINF_INPUT_CHECK(fresh, "--jobs ", path, " lines ", it->second, " and ", j.line, ": both write out '", j.out,
                     "'; give each job its own out");
  }
  return jobs;
}

}  // namespace vinf::app
