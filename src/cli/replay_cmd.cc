#include "cli/replay_cmd.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "cli/replay_pins.h"
#include "cli/stores.h"
#include "common/code_digest.h"
#include "common/json_util.h"
#include "common/str_format.h"
#include "controller/incident_json.h"
#include "controller/replay_bundle.h"
#include "store/store.h"
#include "trainjob/trainjob.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

// Hard-links (copies, across file systems) every file under `from` into `to`.
Status LinkTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Internal("create " + to.string() + ": " + ec.message());
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(from, ec)) {
    const fs::path dst = to / fs::relative(e.path(), from);
    if (e.is_directory()) {
      fs::create_directories(dst, ec);
    } else {
      fs::create_hard_link(e.path(), dst, ec);
      if (ec) fs::copy_file(e.path(), dst, fs::copy_options::overwrite_existing, ec);
    }
    if (ec)
      return Internal("link " + e.path().string() + " to " + dst.string() + ": " + ec.message());
  }
  if (ec) return Internal("read " + from.string() + ": " + ec.message());
  return Status();
}

}  // namespace

Result<ReplayPlan> PlanReplay(const ReplayFlags& f) {
  if (f.incident < 1) {
    return InvalidArgument("INCIDENT: incidents are numbered from 1, as `bulwark describe " +
                           f.job + "` lists them");
  }
  const std::vector<std::string> paths =
      f.store.empty() ? KnownStores(StoreRegistryPath()) : std::vector<std::string>{f.store};
  if (paths.empty()) {
    return NotFound("no store found: none at ./.bulwark/bulwark.db and none remembered in " +
                    StoreRegistryPath() + "; give --store PATH");
  }
  std::unique_ptr<Store> store;
  std::optional<JobRecord> job;
  for (const std::string& p : paths) {
    auto s = Store::OpenReadOnly(p);
    if (!s.ok()) return s.status();
    auto j = (*s)->GetJob(f.job);
    if (!j.ok()) return j.status();
    if (j->has_value() && (!job || (*j)->created > job->created)) {
      job = **j;
      store = std::move(*s);
    }
  }
  if (!job) {
    return NotFound("no job named '" + f.job + "' in " + std::to_string(paths.size()) +
                    " store(s); `bulwark get` lists the jobs");
  }
  const std::vector<Json> incidents = RecordedIncidents(store.get(), *job);
  if (incidents.empty()) return NotFound("job '" + f.job + "' has no incidents: nothing to replay");
  if (f.incident > static_cast<int>(incidents.size())) {
    return NotFound(
        Fmt("job '%s' has %zu incident(s), numbered 1 to %zu; `bulwark describe %s` "
            "lists them",
            f.job.c_str(), incidents.size(), incidents.size(), f.job.c_str()));
  }
  const Json& inc = incidents[f.incident - 1];
  const std::string what = IncidentTitle(inc, f.incident, f.job);
  BW_ASSIGN_OR_RETURN(ReplayBundle bundle, ReadReplayBundle(inc, what));
  const long ckpt = bundle.checkpoint_step;
  const bool from_scratch = ckpt < 0;
  const std::string& ckpt_dir = bundle.checkpoint_dir;
  auto committed = from_scratch ? Result<std::vector<long>>(std::vector<long>{})
                                : ckpt::ListCommitted(ckpt::Env::Default(), ckpt_dir);
  if (!from_scratch && (!committed.ok() || std::find(committed->begin(), committed->end(), ckpt) ==
                                               committed->end())) {
    std::string now = "none";
    if (committed.ok() && !committed->empty()) {
      now.clear();
      for (long s : *committed) now += (now.empty() ? "" : ", ") + std::to_string(s);
    }
    return NotFound(
        Fmt("%s: its checkpoint, step %ld, is not in %s (committed there now: %s); "
            "the replay needs it. Retention keeps the checkpoints of a job's 4 "
            "newest incidents; an older one, or a directory that moved, is gone",
            what.c_str(), ckpt, ckpt_dir.c_str(), now.c_str()));
  }
  const std::string& yaml = bundle.spec_yaml;
  const std::string& spec_path = bundle.spec_path;
  if (yaml.empty()) {
    return FailedPrecondition(what + ": the job was run without a spec file (an ad-hoc " +
                              "`bulwark run train.py`), and the replay needs one: run the job " +
                              "from a spec to replay its incidents");
  }
  auto manifest =
      trainjob::ParseManifest(yaml, spec_path.empty() ? "the recorded spec" : spec_path,
                              fs::path(spec_path).parent_path().string(), trainjob::Target::kLocal);
  if (!manifest.ok()) {
    return manifest.status().Annotate(what + ": the spec recorded with it no longer parses");
  }
  ReplayPlan plan;
  plan.spec = manifest->job.job;
  plan.job = f.job;
  plan.incident = f.incident;
  plan.fault = inc;
  // The code: the digest recorded with the incident against the working directory's now.
  const Json& code = bundle.code;
  const std::string then = code.value("digest", std::string());
  std::vector<std::string> exclude = {ckpt_dir, job->run_dir};
  if (!plan.spec.checkpoint.shared_dir.empty()) exclude.push_back(plan.spec.checkpoint.shared_dir);
  Result<CodeDigest> now = DigestCode(plan.spec.workdir, exclude);
  if (!now.ok()) return now.status().Annotate(what + ": the job's working directory");
  if (now->hash == then) {
    plan.code_note =
        "unchanged (digest " + then + " over " + std::to_string(now->files) + " files)";
  } else if (!f.allow_code_change) {
    return FailedPrecondition(
        Fmt("%s: the code in %s changed since the incident (digest %s then, %s now): a re-run of "
            "other code says nothing of the fault. Restore it (e.g. git stash), or pass "
            "--allow-code-change to re-run it anyway",
            what.c_str(), plan.spec.workdir.c_str(), then.c_str(), now->hash.c_str()));
  } else {
    plan.code_note = "CHANGED since the incident (digest " + then + " then, " + now->hash +
                     " now; --allow-code-change)";
  }
  const int world = bundle.world > 0 ? bundle.world : plan.spec.world_size();
  const int ppn =
      std::max(1, bundle.procs_per_node > 0 ? bundle.procs_per_node : plan.spec.procs_per_node);
  const int nodes = std::max(1, world / ppn);
  plan.recorded_nodes = bundle.nodes;
  if (!f.nodes.empty()) {
    if (static_cast<int>(f.nodes.size()) != nodes) {
      std::string then;
      for (const std::string& n : plan.recorded_nodes) then += (then.empty() ? "" : ", ") + n;
      return InvalidArgument(
          Fmt("--nodes: %s ran on %d node%s%s; name %d host%s, one per node, "
              "not %zu",
              what.c_str(), nodes, nodes == 1 ? "" : "s",
              then.empty() ? "" : (" (" + then + ")").c_str(), nodes, nodes == 1 ? "" : "s",
              f.nodes.size()));
    }
    for (size_t i = 0; i < f.nodes.size(); ++i) {
      if (f.nodes[i].empty()) return InvalidArgument("--nodes: an empty host name");
      for (size_t j = 0; j < i; ++j) {
        if (f.nodes[i] == f.nodes[j]) {
          return InvalidArgument("--nodes names " + f.nodes[i] + " twice: one node per host");
        }
      }
    }
    plan.hosts = f.nodes;
  }
  // The run: its own directory, store and checkpoint links.
  const std::string base =
      job->run_dir.empty() ? plan.spec.workdir + "/.bulwark/" + f.job : job->run_dir;
  // A directory of its own, even for two replays in the same second.
  const std::string stem =
      Fmt("%s/replay-%d-%ld", base.c_str(), f.incident, static_cast<long>(time(nullptr)));
  std::error_code mk;
  fs::create_directories(base, mk);
  for (int k = 0; plan.run_dir.empty(); ++k) {
    const std::string dir = k == 0 ? stem : stem + "." + std::to_string(k);
    if (::mkdir(dir.c_str(), 0755) == 0) {
      plan.run_dir = dir;
    } else if (errno != EEXIST || k >= 1000) {
      return ErrnoStatus("create the replay's directory " + dir, errno);
    }
  }
  plan.store_path = plan.run_dir + "/replay.db";
  const std::string links = plan.run_dir + "/checkpoints";
  for (long step : *committed) {
    if (step > ckpt) continue;
    BW_RETURN_IF_ERROR(LinkTree(ckpt::StepDir(ckpt_dir, step), ckpt::StepDir(links, step)));
  }
  JobSpec& s = plan.spec;
  s.name = f.job + "-replay-" + std::to_string(f.incident);
  s.nodes = nodes;
  s.procs_per_node = ppn;
  s.chaos.clear();  // faults that were injected are outside events, not the program's
  s.fault_policy.restart_budget = 0;  // a fault ends the replay: it came back or it did not
  s.fault_policy.spare_nodes = 0;
  s.fault_policy.diagnose_suspect_nodes = false;
  s.checkpoint.dir = links;
  plan.checkpoint_links = links;
  s.checkpoint.shared_dir.clear();
  s.checkpoint.object_store.clear();
  plan.replay = std::move(bundle.replay);
  return plan;
}

std::string FormatReplay(const ReplayPlan& plan, const Json& o) {
  std::ostringstream out;
  out << "replay of incident " << plan.incident << " of " << plan.job << ": "
      << DescribeIncident(plan.fault) << " at step " << plan.fault.value("step", -1L) << "\n"
      << "  re-run from "
      << (plan.replay.resume < 0 ? std::string("scratch (no checkpoint before the fault)")
                                 : "checkpoint step " + std::to_string(plan.replay.resume))
      << " up to step " << o.value("fault_step", -1L) << "; code " << plan.code_note << "\n";
  if (o.contains("steps") && o["steps"].is_array() && !o["steps"].empty()) {
    out << "\n  STEP  LOSSES  EQUAL\n";
    for (const Json& s : o["steps"]) {
      out << Fmt("  %4ld  %6d  %5d%s\n", s.value("step", -1L), s.value("compared", 0),
                 s.value("equal", 0),
                 s.value("equal", 0) == s.value("compared", 0) ? "" : "  <- differs");
    }
  }
  out << "\n  losses: " << o.value("summary", std::string("-")) << "\n";
  out << ReplayVerdictLines(o);
  out << "  logs:   " << plan.run_dir << "/logs\n";
  return out.str();
}

int ReplayExitCode(const Json& o) { return ReplayAllEqual(o) ? 0 : 1; }

}  // namespace bulwark::cli
