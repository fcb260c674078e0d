#include "cli/jobs_cmd.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>

#include "cli/stores.h"
#include "common/flag_checks.h"
#include "common/net.h"
#include "controller/controller.h"
#include "store/store.h"
#include "trainjob/yaml_json.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

struct FoundJob {
  std::string store;  // the store's path
  JobRecord job;
  std::vector<EventRecord> events;     // filled by LoadJobs for `details_for` only
  std::vector<std::string> incidents;  // JSON texts, idem
};

// Every job of the stores `store_flag` names (or KnownStores), in store order then by
// creation; the events and incidents of the jobs named `details_for` ("" = none) too.
// Errors are written to `err` and returned as the exit status (1).
int LoadJobs(const std::string& store_flag, const std::string& details_for,
             std::vector<FoundJob>* jobs, std::ostream& err) {
  const std::string registry = StoreRegistryPath();
  const std::vector<std::string> paths =
      store_flag.empty() ? KnownStores(registry) : std::vector<std::string>{store_flag};
  if (paths.empty()) {
    err << "bulwark: no store found: none at ./.bulwark/bulwark.db and none remembered in "
        << registry << " (every `bulwark run` remembers its store there); give --store PATH\n";
    return 1;
  }
  for (const std::string& path : paths) {
    auto store = Store::OpenReadOnly(path);
    if (!store.ok()) {
      err << "bulwark: " << store.status().message() << "\n";
      return 1;
    }
    auto list = (*store)->ListJobs();
    if (!list.ok()) {
      err << "bulwark: " << path << ": " << list.status().message() << "\n";
      return 1;
    }
    for (JobRecord& j : *list) {
      FoundJob f{path, std::move(j), {}, {}};
      if (!details_for.empty() && f.job.name == details_for) {
        auto ev = (*store)->ListEvents(f.job.name);
        if (ev.ok()) {
          for (EventRecord& e : *ev) {
            // Events of an earlier run of a job of this name are not this job's.
            if (e.t + 1e-3 >= f.job.created) f.events.push_back(std::move(e));
          }
        }
        auto inc = (*store)->ListIncidents(f.job.name);
        if (inc.ok()) f.incidents = std::move(*inc);
      }
      jobs->push_back(std::move(f));
    }
  }
  return 0;
}

// The newest job named `name` (a job name can exist in several stores), or null after
// writing why to `err`.
const FoundJob* FindJob(const std::vector<FoundJob>& jobs, const std::string& name,
                        std::ostream& err) {
  const FoundJob* best = nullptr;
  for (const FoundJob& f : jobs) {
    if (f.job.name == name && (best == nullptr || f.job.created > best->job.created)) best = &f;
  }
  if (best == nullptr) {
    std::vector<std::string> names;
    for (const FoundJob& f : jobs) names.push_back(f.job.name);
    err << "bulwark: job \"" << name << "\" not found";
    if (!names.empty()) {
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      err << " (jobs: ";
      for (size_t i = 0; i < names.size() && i < 10; ++i) err << (i ? ", " : "") << names[i];
      err << (names.size() > 10 ? ", ..." : "") << ")";
    }
    err << "; `bulwark get` lists the jobs\n";
  }
  return best;
}

std::string RunDirOf(const FoundJob& f) {
  if (!f.job.run_dir.empty()) return f.job.run_dir;
  // Stores older than the run_dir column: the default, <store dir>/<job>.
  return (fs::path(f.store).parent_path() / f.job.name).string();
}

Json ReportOf(const JobRecord& j) {
  if (j.report_json.empty()) return Json();
  Json r = Json::parse(j.report_json, nullptr, false);
  return r.is_discarded() ? Json() : r;
}

// The job as an object of -o json/yaml (camelCase, times in RFC 3339).
Json JobObject(const FoundJob& f, bool details) {
  const JobRecord& j = f.job;
  Json o = {{"kind", "Job"},
            {"name", j.name},
            {"phase", JobPhaseName(j.phase)},
            {"runId", j.run_id},
            {"attempt", j.attempt},
            {"restarts", j.restarts},
            {"step", j.high_water_step},
            {"committedStep", j.last_committed_step},
            {"created", FormatRfc3339(j.created)},
            {"updated", FormatRfc3339(j.updated)},
            {"message", j.message},
            {"spec", j.spec_path},
            {"store", f.store},
            {"runDir", RunDirOf(f)}};
  const Json report = ReportOf(j);
  if (report.is_object() && report.contains("ettr")) o["ettr"] = report["ettr"];
  if (!details) return o;
  Json events = Json::array();
  for (const EventRecord& e : f.events) {
    events.push_back({{"time", FormatRfc3339(e.t)},
                      {"seconds", e.t - j.created},
                      {"reason", e.reason},
                      {"message", e.message}});
  }
  o["events"] = std::move(events);
  Json incidents = Json::array();
  for (const std::string& text : f.incidents) {
    Json i = Json::parse(text, nullptr, false);
    if (!i.is_discarded()) incidents.push_back(std::move(i));
  }
  o["incidents"] = std::move(incidents);
  if (!report.is_null()) o["report"] = report;
  return o;
}

// Writes `objects` as -o json (one object, or a List) or yaml.
void PrintObjects(const std::vector<Json>& objects, bool single, const std::string& output,
                  std::ostream& out) {
  Json doc =
      single && objects.size() == 1 ? objects[0] : Json{{"kind", "List"}, {"items", Json(objects)}};
  if (output == "json") {
    out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    out << trainjob::EmitYaml({doc});
  }
}

std::string Ettr(const JobRecord& j) {
  const Json r = ReportOf(j);
  if (!r.is_object() || !r["ettr"].is_number()) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.3f", r["ettr"].get<double>());
  return buf;
}

// A rank's log and how far it has been printed.
struct LogFile {
  int rank = 0;
  std::string path;
  std::streamoff offset = 0;
  std::string partial;  // a last line not yet ended by '\n'
};

// Prints the lines of `lf` written since the last call (all of them the first time,
// or the last `tail`), each prefixed by `prefix`; `flush_partial` also prints an
// unterminated last line.
void PrintNew(LogFile* lf, const std::string& prefix, long tail, bool flush_partial,
              std::ostream& out) {
  std::ifstream in(lf->path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < lf->offset) {  // truncated or replaced: start over
    lf->offset = 0;
    lf->partial.clear();
  }
  in.seekg(lf->offset);
  std::string chunk(static_cast<size_t>(size - lf->offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  lf->offset += static_cast<std::streamoff>(chunk.size());
  std::string text = lf->partial + chunk;
  lf->partial.clear();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lf->partial = text.substr(start);
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (flush_partial && !lf->partial.empty()) {
    lines.push_back(lf->partial);
    lf->partial.clear();
  }
  size_t first = 0;
  if (tail >= 0 && lines.size() > static_cast<size_t>(tail)) first = lines.size() - tail;
  for (size_t i = first; i < lines.size(); ++i) out << prefix << lines[i] << "\n";
  out.flush();
}

}  // namespace

std::string FormatAge(double s) {
  if (!(s > 0)) return "0s";
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%ds", static_cast<int>(s));
  } else if (s < 2 * 3600) {
    std::snprintf(buf, sizeof buf, "%dm", static_cast<int>(s / 60));
  } else if (s < 2 * 86400) {
    std::snprintf(buf, sizeof buf, "%dh", static_cast<int>(s / 3600));
  } else {
    std::snprintf(buf, sizeof buf, "%dd", static_cast<int>(s / 86400));
  }
  return buf;
}

int GetJobs(const GetFlags& f, std::ostream& out, std::ostream& err, Clock* clock) {
  std::vector<FoundJob> all;
  if (int rc = LoadJobs(f.store, "", &all, err); rc != 0) return rc;
  std::vector<const FoundJob*> shown;
  int rc = 0;
  if (f.names.empty()) {
    for (const FoundJob& j : all) shown.push_back(&j);
  } else {
    for (const std::string& name : f.names) {
      const FoundJob* j = FindJob(all, name, err);
      if (j == nullptr) {
        rc = 1;
      } else {
        shown.push_back(j);
      }
    }
  }
  if (f.output == "json" || f.output == "yaml") {
    std::vector<Json> objects;
    for (const FoundJob* j : shown) objects.push_back(JobObject(*j, false));
    PrintObjects(objects, f.names.size() == 1, f.output, out);
    return rc;
  }
  if (f.output == "name") {
    for (const FoundJob* j : shown) out << "job/" << j->job.name << "\n";
    return rc;
  }
  if (shown.empty()) {
    if (f.names.empty()) err << "No jobs found.\n";
    return rc;
  }
  const bool wide = f.output == "wide";
  const double now = clock->NowWall();
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "PHASE", "STEP", "COMMITTED", "RESTARTS", "AGE"});
  if (wide) {
    for (const char* c : {"ATTEMPT", "ETTR", "STORE", "RUN-DIR"}) rows[0].push_back(c);
  }
  rows[0].push_back("MESSAGE");
  for (const FoundJob* fj : shown) {
    const JobRecord& j = fj->job;
    std::vector<std::string> r = {j.name,
                                  JobPhaseName(j.phase),
                                  std::to_string(j.high_water_step),
                                  std::to_string(j.last_committed_step),
                                  std::to_string(j.restarts),
                                  FormatAge(now - j.created)};
    if (wide) {
      for (const std::string& c : {std::to_string(j.attempt), Ettr(j), fj->store, RunDirOf(*fj)}) {
        r.push_back(c);
      }
    }
    r.push_back(j.message);
    rows.push_back(std::move(r));
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c + 1 < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return rc;
}

int DescribeJob(const DescribeFlags& f, std::ostream& out, std::ostream& err, Clock*) {
  std::vector<FoundJob> all;
  if (int rc = LoadJobs(f.store, f.name, &all, err); rc != 0) return rc;
  const FoundJob* fj = FindJob(all, f.name, err);
  if (fj == nullptr) return 1;
  if (f.output == "json" || f.output == "yaml") {
    PrintObjects({JobObject(*fj, true)}, true, f.output, out);
    return 0;
  }
  const JobRecord& j = fj->job;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "Name:      %s\nStore:     %s\nRun dir:   %s\nSpec:      %s\nPhase:     %s\n"
                "Attempt:   %d (restarts %d)\nStep:      %ld (committed %ld)\n",
                j.name.c_str(), fj->store.c_str(), RunDirOf(*fj).c_str(),
                j.spec_path.empty() ? "-" : j.spec_path.c_str(), JobPhaseName(j.phase), j.attempt,
                j.restarts, j.high_water_step, j.last_committed_step);
  out << buf << "Message:   " << j.message << "\n";
  out << "Events:\n";
  for (const EventRecord& e : fj->events) {
    std::snprintf(buf, sizeof buf, "  %8.3f  %-22s ", e.t - j.created, e.reason.c_str());
    out << buf << e.message << "\n";
  }
  const Json rep = ReportOf(j);
  if (!rep.is_null()) {
    out << FormatReport(rep);
    return 0;
  }
  // Still running: the incidents so far, as the store holds them.
  int n = 0;
  for (const std::string& text : fj->incidents) {
    const Json x = Json::parse(text, nullptr, false);
    if (!x.is_object() || x.value("secondary", false)) continue;
    if (n == 0) out << "Incidents:\n";
    ++n;
    out << "  " << n << " " << x.value("kind", std::string("?"))
        << (x.value("rank", -1) >= 0 ? " on rank " + std::to_string(x.value("rank", -1)) : "")
        << " at step " << x.value("step", -1L) << ": " << x.value("detail", std::string()) << "\n";
    if (x.contains("decision") && x["decision"].is_object()) {
      out << "    " << x["decision"].value("action", std::string()) << ": "
          << x["decision"].value("reason", std::string()) << "\n";
    }
    out << FormatIncidentDiagnosis(x, j.name, n, "    ");
  }
  return 0;
}

int JobLogs(const LogsFlags& f, std::ostream& out, std::ostream& err, Clock* clock) {
  std::vector<FoundJob> all;
  if (int rc = LoadJobs(f.store, "", &all, err); rc != 0) return rc;
  const FoundJob* fj = FindJob(all, f.name, err);
  if (fj == nullptr) return 1;
  const std::string run_dir = RunDirOf(*fj);
  const std::string dir = run_dir + "/logs";
  std::map<int, std::string> ranks;  // every rank-N.log, by rank
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("rank-", 0) != 0 || n.size() < 10 || n.substr(n.size() - 4) != ".log") continue;
    const std::string num = n.substr(5, n.size() - 9);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) continue;
    if (num.size() > 6) continue;
    ranks[std::stoi(num)] = e.path().string();
  }
  if (ranks.empty()) {
    err << "bulwark logs: job \"" << f.name << "\" has no rank logs in " << dir
        << (ec ? " (" + ec.message() + ")" : std::string()) << "\n";
    return 1;
  }
  std::vector<LogFile> files;
  if (f.all_ranks) {
    for (const auto& [r, p] : ranks) files.push_back(LogFile{r, p, 0, ""});
  } else if (ranks.count(f.rank) != 0) {
    files.push_back(LogFile{f.rank, ranks[f.rank], 0, ""});
  } else {
    err << "bulwark logs: job \"" << f.name << "\" has no log of rank " << f.rank
        << "; it has ranks " << ranks.begin()->first << ".." << ranks.rbegin()->first
        << " (--rank N, or --all-ranks)\n";
    return 2;
  }
  auto prefix = [&](const LogFile& lf) {
    return f.all_ranks ? "[rank " + std::to_string(lf.rank) + "] " : std::string();
  };
  for (LogFile& lf : files) PrintNew(&lf, prefix(lf), f.tail, !f.follow, out);
  if (!f.follow) return 0;
  // Until the controller is gone (it removes controller.addr when it stops).
  const std::string addr_file = run_dir + "/controller.addr";
  while (true) {
    const bool running = fs::exists(addr_file, ec);
    clock->SleepFor(f.poll_s);
    for (LogFile& lf : files) PrintNew(&lf, prefix(lf), -1, !running, out);
    if (!running) return 0;
  }
}

int CancelJob(const CancelFlags& f, std::ostream& out, std::ostream& err, Clock* clock) {
  std::vector<FoundJob> all;
  if (int rc = LoadJobs(f.store, "", &all, err); rc != 0) return rc;
  const FoundJob* fj = FindJob(all, f.name, err);
  if (fj == nullptr) return 1;
  if (IsTerminal(fj->job.phase)) {
    err << "bulwark cancel: job \"" << f.name << "\" is not running (phase "
        << JobPhaseName(fj->job.phase) << ")\n";
    return 1;
  }
  const std::string addr_file = RunDirOf(*fj) + "/controller.addr";
  std::string addr;
  if (std::ifstream in(addr_file); !(in >> addr)) {
    err << "bulwark cancel: job \"" << f.name << "\" is " << JobPhaseName(fj->job.phase)
        << " in its store but no controller is running for it (" << addr_file
        << " missing): its `bulwark run` was stopped; `bulwark run " << fj->job.spec_path
        << "` resumes it\n";
    return 1;
  }
  auto r = SendCancelRequest(addr, 5);
  if (!r.ok()) {
    err << "bulwark cancel: " << r.status().message() << "\n";
    return 1;
  }
  out << *r << "\n";
  if (f.wait_s <= 0) return 0;
  const std::string store = fj->store;
  const double deadline = clock->NowMono() + f.wait_s;
  while (clock->NowMono() < deadline) {
    auto s = Store::OpenReadOnly(store);
    if (s.ok()) {
      auto j = (*s)->GetJob(f.name);
      if (j.ok() && j->has_value() && IsTerminal((*j)->phase)) {
        out << "job/" << f.name << " " << JobPhaseName((*j)->phase) << "\n";
        return (*j)->phase == JobPhase::kCancelled ? 0 : 1;
      }
    }
    clock->SleepFor(0.1);
  }
  err << "bulwark cancel: job \"" << f.name << "\" did not end within " << f.wait_s
      << " s (--wait 0 does not wait)\n";
  return 1;
}

std::vector<CLI::App*> AddJobCommands(CLI::App& app, int* exit_code, std::ostream& out,
                                      std::ostream& err, const CommandFilter& filter) {
  const std::string store_help =
      "SQLite store (default: ./.bulwark/bulwark.db and every store a `bulwark run` used, "
      "remembered in " +
      StoreRegistryPath() + ")";
  Clock* clock = SystemClock::Get();

  auto g = std::make_shared<GetFlags>();
  auto* get = app.add_subcommand("get", "list jobs with their phase, step and age");
  if (filter.Full("get")) {
    get->add_option("name", g->names, "only these jobs (default: every job)");
    get->add_option("--store", g->store, store_help)->check(CLI::ExistingFile);
    get->add_option("-o,--output", g->output, "wide | name | json | yaml (default: a table)")
        ->check(CLI::IsMember({"", "wide", "name", "json", "yaml"}));
    get->footer(
        "Examples:\n  bulwark get                  every job of every store\n"
        "  bulwark get gpt-char -o wide  one job, with ETTR, store and run dir\n"
        "  bulwark get -o json | jq '.items[] | {name, phase, ettr}'");
    get->callback([=, &out, &err] { *exit_code = GetJobs(*g, out, err, clock); });
  }

  auto d = std::make_shared<DescribeFlags>();
  auto* describe = app.add_subcommand("describe", "show a job's events, incidents and ETTR report");
  if (filter.Full("describe")) {
    describe->add_option("name", d->name, "job name")->required();
    describe->add_option("--store", d->store, store_help)->check(CLI::ExistingFile);
    describe->add_option("-o,--output", d->output, "json | yaml (default: text)")
        ->check(CLI::IsMember({"", "json", "yaml"}));
    describe->footer("Examples:\n  bulwark describe gpt-char\n  bulwark describe gpt-char -o json");
    describe->callback([=, &out, &err] { *exit_code = DescribeJob(*d, out, err, clock); });
  }

  auto l = std::make_shared<LogsFlags>();
  auto* logs = app.add_subcommand("logs", "print a rank's log (stdout and stderr) of a job");
  if (filter.Full("logs")) {
    logs->add_option("name", l->name, "job name")->required();
    logs->add_option("--rank", l->rank, "global rank")->check(flags::AtLeast(0));
    logs->add_flag("--all-ranks", l->all_ranks, "every rank's log, lines prefixed [rank N]");
    logs->add_option("--tail", l->tail, "only the last N lines (-1: all)")
        ->check(flags::AtLeast(-1));
    logs->add_flag("-f,--follow", l->follow, "keep printing new lines until the job ends");
    logs->add_option("--store", l->store, store_help)->check(CLI::ExistingFile);
    logs->footer(
        "Examples:\n  bulwark logs gpt-char                rank 0's log\n"
        "  bulwark logs gpt-char --rank 3 -f    follow rank 3\n"
        "  bulwark logs gpt-char --all-ranks --tail 20");
    logs->callback([=, &out, &err] { *exit_code = JobLogs(*l, out, err, clock); });
  }

  auto c = std::make_shared<CancelFlags>();
  auto* cancel = app.add_subcommand("cancel", "stop a running job (it ends Cancelled)");
  if (filter.Full("cancel")) {
    cancel->add_option("name", c->name, "job name")->required();
    cancel->add_option("--wait", c->wait_s, "seconds to wait for it to end (0: do not wait)")
        ->check(flags::InRange(0.0, 86400.0));
    cancel->add_option("--store", c->store, store_help)->check(CLI::ExistingFile);
    cancel->footer("Example:\n  bulwark cancel gpt-char");
    cancel->callback([=, &out, &err] { *exit_code = CancelJob(*c, out, err, clock); });
  }
  return {get, describe, logs, cancel};
}

}  // namespace bulwark::cli
