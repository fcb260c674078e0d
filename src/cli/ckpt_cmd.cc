// `bulwark ckpt`: see ckpt_cmd.h.
#include "cli/ckpt_cmd.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "ckpt/checkpoint.h"
#include "ckpt/object_tier.h"
#include "cli/replay_pins.h"
#include "common/json_util.h"
#include "common/str_format.h"

namespace bulwark::cli {
namespace {

using Json = nlohmann::json;

std::string HumanBytes(uint64_t b) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (b < 1024) return std::to_string(b) + " B";
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 5) {
    v /= 1024;
    ++i;
  }
  return Fmt("%.1f %s", v, kUnits[i]);
}

std::string IsoUtc(double t) {
  if (t <= 0) return "-";
  time_t s = static_cast<time_t>(t);
  struct tm tm;
  if (gmtime_r(&s, &tm) == nullptr) return "-";
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Hex(uint64_t v) { return Fmt("%016" PRIx64, v); }

template <typename T>
std::string Join(const T& v, const char* sep = ",") {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += sep;
    s += std::to_string(x);
  }
  return s;
}

std::string Dims(const std::vector<int64_t>& v) { return "[" + Join(v, ", ") + "]"; }

double Ratio(uint64_t stored, uint64_t logical) {
  return logical == 0 ? 0.0 : static_cast<double>(stored) / static_cast<double>(logical);
}

// A usage error: "bulwark ckpt CMD: MSG", exit code 2.
int Usage(std::ostream& err, const char* cmd, const std::string& msg) {
  err << "bulwark ckpt" << (*cmd ? " " : "") << cmd << ": " << msg << "\n";
  return 2;
}

bool IsObjectTier(const std::string& dir) { return dir.rfind("s3://", 0) == 0; }

// Opens the object tier an "s3://..." DIR names; nullptr after writing the usage
// error (the caller exits 2).
std::unique_ptr<ckpt::ObjectTier> OpenObjectTier(const char* cmd, const std::string& url,
                                                 std::ostream& err) {
  Result<std::unique_ptr<ckpt::ObjectTier>> t = ckpt::ObjectTier::OpenUrl(url);
  if (!t.ok()) {
    Usage(err, cmd,
          "DIR '" + url + "': " + t.status().message() +
              " (an object tier is s3://BUCKET[/PREFIX][?endpoint=URL&region=R], credentials "
              "from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
    return nullptr;
  }
  return std::move(*t);
}

// Checks DIR is given and is an existing directory; "" if fine, else the message.
std::string CheckDir(ckpt::Env* env, const std::string& dir) {
  if (dir.empty()) {
    return "missing DIR: give the checkpoint directory (the job spec's checkpoint.dir, which "
           "holds the step-* directories)";
  }
  if (!env->IsDir(dir)) {
    return "DIR '" + dir +
           "' does not exist or is not a directory; give the checkpoint directory (the job "
           "spec's checkpoint.dir, which holds the step-* directories)";
  }
  return "";
}

// Parses a non-negative integer (digits only); false if `s` is not one.
bool ParseNonNegative(const std::string& s, long* out) {
  if (s.empty() || s.size() > 18) return false;
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *out = std::stol(s);
  return true;
}

// Why a step directory is not committed, from ReadCommitted's status.
std::string NotCommittedReason(const Status& st) {
  if (st.code() == Code::kNotFound) return "uncommitted: COMMIT missing";
  return "invalid: " + st.message();
}

// Parses STEP and checks its directory exists; 0 if fine, else the exit code.
int ParseStep(ckpt::Env* env, const char* cmd, const std::string& dir, const std::string& s,
              long* step, std::ostream& err) {
  if (s.empty())
    return Usage(err, cmd, "missing STEP: give a step number (`bulwark ckpt ls DIR` lists them)");
  if (!ParseNonNegative(s, step)) {
    return Usage(err, cmd,
                 "STEP must be a non-negative integer step number such as 100, got '" + s +
                     "' (`bulwark ckpt ls " + dir + "` lists the steps)");
  }
  if (!env->IsDir(ckpt::StepDir(dir, *step))) {
    Result<std::vector<long>> steps = ListStepDirs(env, dir);
    std::string have = steps.ok() && !steps->empty() ? Join(*steps, ", ") : "none";
    return Usage(err, cmd,
                 "STEP " + s + ": no directory " + ckpt::StepDir(dir, *step) +
                     " (step directories present: " + have + ")");
  }
  return 0;
}

// One step directory as `ls` shows it.
struct StepInfo {
  long step = 0;
  bool committed = false;
  std::string reason;  // when not committed
  ckpt::Manifest m;
};

Json StepJson(const StepInfo& s) {
  Json j = {{"step", s.step}, {"committed", s.committed}};
  if (!s.committed) {
    j["reason"] = s.reason;
    return j;
  }
  j["world"] = s.m.world;
  j["logical_bytes"] = s.m.logical_bytes;
  j["stored_bytes"] = s.m.stored_bytes;
  j["ratio"] = Ratio(s.m.stored_bytes, s.m.logical_bytes);
  j["depends"] = s.m.depends;
  j["time"] = s.m.time;
  j["time_utc"] = IsoUtc(s.m.time);
  return j;
}

// "2 local, 2 refs (step 20 rank 1 x2)"
std::string ChunkSummary(const ckpt::TensorEntry& e, long step, Json* refs_json) {
  size_t local = 0;
  std::map<std::pair<long, int>, int> refs;
  for (const ckpt::ChunkLoc& c : e.chunks) {
    if (c.local()) {
      ++local;
    } else {
      ++refs[{c.ref_step, c.ref_rank}];
    }
  }
  std::string s = std::to_string(e.chunks.size()) + " chunks (" + std::to_string(local) + " local";
  if (!refs.empty()) {
    s += ", " + std::to_string(e.chunks.size() - local) + " refs:";
    const char* sep = " ";
    for (const auto& [k, n] : refs) {
      s += sep;
      sep = ", ";
      s += Fmt("step %ld%s rank %d x%d", k.first, k.first == step ? " (this step)" : "", k.second,
               n);
      refs_json->push_back({{"step", k.first}, {"rank", k.second}, {"chunks", n}});
    }
  }
  return s + ")";
}

}  // namespace

Result<std::vector<long>> ListStepDirs(ckpt::Env* env, const std::string& root) {
  Result<std::vector<std::string>> names = env->ListDir(root);
  if (!names.ok()) return names.status();
  std::vector<long> steps;
  for (const std::string& name : *names) {
    long step = 0;
    if (name.size() != 17 || name.compare(0, 5, "step-") != 0) continue;
    if (!ParseNonNegative(name.substr(5), &step)) continue;
    steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

GcPlan ComputeGcPlan(ckpt::Env* env, const std::string& root, const std::vector<long>& step_dirs,
                     int keep, long golden_every, const std::map<long, std::string>& pinned) {
  std::map<long, std::vector<long>> deps;  // committed step -> direct dependencies
  std::map<long, std::string> uncommitted;
  for (long s : step_dirs) {
    Result<ckpt::Manifest> m = ckpt::ReadCommitted(env, root, s);
    if (m.ok()) {
      deps[s] = m->depends;
    } else {
      uncommitted[s] = NotCommittedReason(m.status());
    }
  }
  return ComputeGcPlan(deps, uncommitted, step_dirs, keep, golden_every, pinned);
}

GcPlan ComputeGcPlan(const std::map<long, std::vector<long>>& deps,
                     const std::map<long, std::string>& uncommitted,
                     const std::vector<long>& step_dirs, int keep, long golden_every,
                     const std::map<long, std::string>& pinned) {
  GcPlan p;
  if (deps.empty()) {
    for (long s : step_dirs) p.kept_other.push_back(s);
    return p;
  }
  p.newest = deps.rbegin()->first;
  ckpt::RetainOptions ro;
  ro.keep = keep;
  ro.golden_every = golden_every;
  for (const auto& [step, by] : pinned) ro.pinned.push_back(step);
  p.remove = ckpt::PlanRetain(deps, step_dirs, ro);  // the decision; the rest explains it
  std::set<long> kept;
  int n = 0;
  for (auto it = deps.rbegin(); it != deps.rend(); ++it) {
    if (n++ < keep) {
      p.kept_newest.insert(it->first);
    } else if (golden_every > 0 && it->first % golden_every == 0) {
      p.kept_golden.insert(it->first);
    } else if (auto pin = pinned.find(it->first); pin != pinned.end()) {
      p.kept_pinned.emplace(it->first, pin->second);
    } else {
      continue;
    }
    kept.insert(it->first);
  }
  std::vector<long> todo(kept.begin(), kept.end());
  while (!todo.empty()) {
    long s = todo.back();
    todo.pop_back();
    auto it = deps.find(s);
    if (it == deps.end()) continue;
    for (long d : it->second) {
      if (kept.insert(d).second) {
        p.kept_deps.insert(d);
        todo.push_back(d);
      }
    }
  }
  const std::set<long> remove(p.remove.begin(), p.remove.end());
  for (long s : step_dirs) {
    if (!remove.count(s)) {
      if (!kept.count(s)) p.kept_other.push_back(s);
      continue;
    }
    auto u = uncommitted.find(s);
    if (u != uncommitted.end()) {
      p.why[s] = u->second + "; older than the newest committed step " + std::to_string(p.newest);
    } else {
      p.why[s] = "committed; not among the newest " + std::to_string(keep) +
                 (golden_every > 0 ? ", not golden (every " + std::to_string(golden_every) + ")"
                                   : std::string()) +
                 (pinned.empty() ? "" : ", not pinned by a replay bundle") +
                 ", no kept step depends on it";
    }
  }
  return p;
}

int CkptLs(ckpt::Env* env, const CkptLsFlags& f, std::ostream& out, std::ostream& err) {
  std::vector<StepInfo> found;  // every step directory (or object-tier step prefix)
  if (IsObjectTier(f.dir)) {
    std::unique_ptr<ckpt::ObjectTier> tier = OpenObjectTier("ls", f.dir, err);
    if (tier == nullptr) return 2;
    Result<std::vector<ckpt::ObjectTier::StepState>> scan = tier->Scan();
    if (!scan.ok()) {
      err << "bulwark ckpt ls: " << scan.status().message() << "\n";
      return 1;
    }
    for (ckpt::ObjectTier::StepState& s : *scan) {
      StepInfo info;
      info.step = s.step;
      info.committed = s.status.ok();
      if (info.committed) {
        info.m = std::move(s.manifest);
      } else {
        info.reason = NotCommittedReason(s.status);
      }
      found.push_back(std::move(info));
    }
  } else {
    if (std::string e = CheckDir(env, f.dir); !e.empty()) return Usage(err, "ls", e);
    Result<std::vector<long>> steps = ListStepDirs(env, f.dir);
    if (!steps.ok()) {
      err << "bulwark ckpt ls: " << steps.status().message() << "\n";
      return 1;
    }
    for (long s : *steps) {
      StepInfo info;
      info.step = s;
      Result<ckpt::Manifest> m = ckpt::ReadCommitted(env, f.dir, s);
      if (m.ok()) {
        info.committed = true;
        info.m = std::move(*m);
      } else {
        info.reason = NotCommittedReason(m.status());
      }
      found.push_back(std::move(info));
    }
  }
  std::vector<StepInfo> rows;
  int hidden = 0;
  for (StepInfo& info : found) {
    if (!info.committed && !f.all) {
      ++hidden;
      continue;
    }
    rows.push_back(std::move(info));
  }
  if (f.json) {
    Json arr = Json::array();
    for (const StepInfo& r : rows) arr.push_back(StepJson(r));
    out << DumpText(arr, 2) << "\n";
    return 0;
  }
  if (rows.empty() && hidden == 0) {
    out << "no step directories in " << f.dir << "\n";
    return 0;
  }
  out << Fmt("%-12s %5s %11s %11s %6s %-12s %-20s %s\n", "STEP", "WORLD", "LOGICAL", "STORED",
             "RATIO", "DEPENDS", "COMMITTED (UTC)", "STATUS");
  for (const StepInfo& r : rows) {
    if (!r.committed) {
      out << Fmt("%-12ld %5s %11s %11s %6s %-12s %-20s ", r.step, "-", "-", "-", "-", "-", "-")
          << r.reason << "\n";
      continue;
    }
    std::string deps = r.m.depends.empty() ? "-" : Join(r.m.depends);
    out << Fmt("%-12ld %5d %11s %11s %6.2f %-12s %-20s %s\n", r.step, r.m.world,
               HumanBytes(r.m.logical_bytes).c_str(), HumanBytes(r.m.stored_bytes).c_str(),
               Ratio(r.m.stored_bytes, r.m.logical_bytes), deps.c_str(), IsoUtc(r.m.time).c_str(),
               "committed");
  }
  if (hidden > 0) {
    out << hidden << " uncommitted or invalid step director" << (hidden == 1 ? "y" : "ies")
        << " not shown (--all lists them)\n";
  }
  return 0;
}

int CkptInspect(ckpt::Env* env, const CkptInspectFlags& f, std::ostream& out, std::ostream& err) {
  if (std::string e = CheckDir(env, f.dir); !e.empty()) return Usage(err, "inspect", e);
  long step = 0;
  if (int rc = ParseStep(env, "inspect", f.dir, f.step, &step, err); rc != 0) return rc;
  long want_rank = -1;
  if (!f.rank.empty() && !ParseNonNegative(f.rank, &want_rank)) {
    return Usage(err, "inspect",
                 "--rank must be a non-negative integer rank, got '" + f.rank + "'");
  }
  Result<ckpt::Manifest> m = ckpt::ReadCommitted(env, f.dir, step);
  if (!m.ok()) {
    err << "bulwark ckpt inspect: step " << step << " is not committed ("
        << NotCommittedReason(m.status()) << "); nothing to inspect\n";
    return 1;
  }
  if (want_rank >= m->world) {
    return Usage(err, "inspect",
                 "--rank " + f.rank + " is out of range: step " + std::to_string(step) +
                     " was saved by world " + std::to_string(m->world) + " (ranks 0.." +
                     std::to_string(m->world - 1) + ")");
  }
  int rc = 0;
  Json j = {{"step", step},
            {"format", m->format},
            {"world", m->world},
            {"logical_bytes", m->logical_bytes},
            {"stored_bytes", m->stored_bytes},
            {"ratio", Ratio(m->stored_bytes, m->logical_bytes)},
            {"depends", m->depends},
            {"time", m->time},
            {"time_utc", IsoUtc(m->time)}};
  std::string text;
  text +=
      Fmt("step %ld  format %u  world %d  committed %s  depends %s\n", step, m->format, m->world,
          IsoUtc(m->time).c_str(), m->depends.empty() ? "-" : Join(m->depends).c_str());
  text += "logical " + HumanBytes(m->logical_bytes) + "  stored " + HumanBytes(m->stored_bytes) +
          Fmt("  ratio %.2f\n", Ratio(m->stored_bytes, m->logical_bytes));
  text += "shards:\n";
  Json shards = Json::array();
  for (const ckpt::ManifestShard& s : m->shards) {
    text += Fmt("  rank %-5d %s  %10s (%" PRIu64 " B)  index xxh3 %s\n", s.rank, s.file.c_str(),
                HumanBytes(s.size).c_str(), s.size, Hex(s.index_xxh3).c_str());
    shards.push_back(
        {{"rank", s.rank}, {"file", s.file}, {"size", s.size}, {"index_xxh3", Hex(s.index_xxh3)}});
  }
  j["shards"] = std::move(shards);
  Json ranks = Json::array();
  for (int r = 0; r < m->world; ++r) {
    if (want_rank >= 0 && r != want_rank) continue;
    Json rj = {{"rank", r}};
    Result<ckpt::ShardIndex> idx = ckpt::ReadShardIndex(env, f.dir, step, r, m->world);
    if (!idx.ok()) {
      text += Fmt("rank %d: ERROR ", r) + idx.status().ToString() + "\n";
      rj["error"] = idx.status().ToString();
      ranks.push_back(std::move(rj));
      rc = 1;
      continue;
    }
    text += Fmt("rank %d: %zu tensors, chunk size %s\n", r, idx->tensors.size(),
                HumanBytes(idx->chunk_size).c_str());
    rj["chunk_size"] = idx->chunk_size;
    Json tensors = Json::array();
    for (const ckpt::TensorEntry& e : idx->tensors) {
      const ckpt::TensorMeta& t = e.meta;
      Json refs = Json::array();
      std::string chunks = ChunkSummary(e, step, &refs);
      size_t local = static_cast<size_t>(std::count_if(
          e.chunks.begin(), e.chunks.end(), [](const ckpt::ChunkLoc& c) { return c.local(); }));
      std::string line = "  " + t.name + "  " + ckpt::DTypeName(t.dtype) + " " + Dims(t.shape);
      Json tj = {{"name", t.name},        {"dtype", ckpt::DTypeName(t.dtype)},
                 {"shape", t.shape},      {"replicated", t.replicated},
                 {"bytes", t.nbytes()},   {"chunks", e.chunks.size()},
                 {"local_chunks", local}, {"refs", std::move(refs)}};
      if (!t.global_shape.empty()) {
        line += "  global " + Dims(t.GlobalShape()) + " at " + Dims(t.Offsets());
        tj["global_shape"] = t.GlobalShape();
        tj["offsets"] = t.Offsets();
      }
      if (t.replicated) line += "  replicated";
      line += "  " + HumanBytes(t.nbytes()) + "  " + chunks + "\n";
      text += line;
      tensors.push_back(std::move(tj));
    }
    rj["tensors"] = std::move(tensors);
    ranks.push_back(std::move(rj));
  }
  j["ranks"] = std::move(ranks);
  out << (f.json ? DumpText(j, 2) + "\n" : text);
  return rc;
}

int CkptVerify(ckpt::Env* env, const CkptVerifyFlags& f, std::ostream& out, std::ostream& err) {
  if (std::string e = CheckDir(env, f.dir); !e.empty()) return Usage(err, "verify", e);
  if (f.all && !f.step.empty()) {
    return Usage(err, "verify", "give either STEP or --all, not both");
  }
  std::vector<long> steps;
  if (!f.step.empty()) {
    long step = 0;
    if (int rc = ParseStep(env, "verify", f.dir, f.step, &step, err); rc != 0) return rc;
    steps.push_back(step);
  } else {
    Result<std::vector<long>> all = ListStepDirs(env, f.dir);
    if (!all.ok()) {
      err << "bulwark ckpt verify: " << all.status().message() << "\n";
      return 1;
    }
    steps = std::move(*all);
  }
  int verified = 0, failed = 0, skipped = 0;
  Json arr = Json::array();
  std::ostringstream text;
  for (long s : steps) {
    Json sj = {{"step", s}};
    Result<ckpt::Manifest> m = ckpt::ReadCommitted(env, f.dir, s);
    if (!m.ok() && m.status().code() == Code::kNotFound) {
      const std::string why = NotCommittedReason(m.status());
      if (f.step.empty()) {
        // Listing every step: an unfinished save is not corruption.
        ++skipped;
        text << Fmt("step %ld: skipped (", s) << why << ")\n";
        sj["result"] = "skipped";
        sj["reason"] = why;
        arr.push_back(std::move(sj));
        continue;
      }
    }
    ckpt::VerifyReport rep;
    Status st = m.ok() ? ckpt::VerifyStep(env, f.dir, s, /*full=*/true, &rep) : m.status();
    if (!st.ok() && rep.problems.empty()) rep.problems.push_back(st.ToString());
    sj["chunks"] = rep.chunks;
    sj["bytes"] = rep.bytes;
    sj["problems"] = rep.problems;
    if (rep.problems.empty()) {
      ++verified;
      sj["result"] = "ok";
      text << Fmt("step %ld: OK  %" PRIu64 " chunks, ", s, rep.chunks) << HumanBytes(rep.bytes)
           << " verified\n";
    } else {
      ++failed;
      sj["result"] = "failed";
      text << Fmt("step %ld: FAILED  %" PRIu64 " chunks, ", s, rep.chunks) << HumanBytes(rep.bytes)
           << " verified, " << rep.problems.size() << " problem"
           << (rep.problems.size() == 1 ? "" : "s") << ":\n";
      for (const std::string& p : rep.problems) text << "  " << p << "\n";
    }
    arr.push_back(std::move(sj));
  }
  if (f.json) {
    Json j = {{"steps", std::move(arr)},
              {"verified", verified},
              {"failed", failed},
              {"skipped", skipped}};
    out << DumpText(j, 2) << "\n";
  } else {
    out << text.str() << Fmt("%d verified, %d failed, %d skipped\n", verified, failed, skipped);
  }
  return failed > 0 ? 1 : 0;
}

int CkptGc(ckpt::Env* env, const CkptGcFlags& f, std::ostream& out, std::ostream& err) {
  const bool object_tier = IsObjectTier(f.dir);
  if (!object_tier) {
    if (std::string e = CheckDir(env, f.dir); !e.empty()) return Usage(err, "gc", e);
  }
  long keep = 0, golden = 0;
  if (f.keep.empty()) {
    return Usage(err, "gc",
                 "--keep is required: the number of newest committed steps to keep (>= 1)");
  }
  if (!ParseNonNegative(f.keep, &keep) || keep < 1 || keep > 1000000) {
    return Usage(err, "gc",
                 "--keep must be an integer >= 1 (the newest committed steps to keep), got '" +
                     f.keep + "'");
  }
  if (!ParseNonNegative(f.golden_every, &golden)) {
    return Usage(err, "gc",
                 "--golden-every must be a non-negative integer (0 = no golden steps; M keeps "
                 "every committed step divisible by M), got '" +
                     f.golden_every + "'");
  }
  ckpt::RetainOptions ro;
  ro.keep = static_cast<int>(keep);
  ro.golden_every = golden;
  // What `bulwark replay` needs stays, as the controller's retention keeps it.
  std::map<long, std::string> pinned;
  if (!f.ignore_replay_pins) pinned = ReplayPinnedSteps(f.dir, f.stores);
  for (const auto& [step, by] : pinned) ro.pinned.push_back(step);
  GcPlan plan;
  std::vector<long> removed;
  Status st;
  if (object_tier) {
    std::unique_ptr<ckpt::ObjectTier> tier = OpenObjectTier("gc", f.dir, err);
    if (tier == nullptr) return 2;
    Result<std::vector<ckpt::ObjectTier::StepState>> scan = tier->Scan();
    if (!scan.ok()) {
      err << "bulwark ckpt gc: " << scan.status().message() << "\n";
      return 1;
    }
    std::map<long, std::vector<long>> deps;
    std::map<long, std::string> uncommitted;
    std::vector<long> steps;
    for (const ckpt::ObjectTier::StepState& s : *scan) {
      steps.push_back(s.step);
      if (s.status.ok()) {
        deps[s.step] = s.manifest.depends;
      } else {
        uncommitted[s.step] = NotCommittedReason(s.status);
      }
    }
    plan = ComputeGcPlan(deps, uncommitted, steps, ro.keep, golden, pinned);
    if (!f.dry_run) st = tier->Retain(ro, &removed);
  } else {
    Result<std::vector<long>> steps = ListStepDirs(env, f.dir);
    if (!steps.ok()) {
      err << "bulwark ckpt gc: " << steps.status().message() << "\n";
      return 1;
    }
    plan = ComputeGcPlan(env, f.dir, *steps, ro.keep, golden, pinned);
    if (!f.dry_run) st = ckpt::Retain(env, f.dir, ro, &removed);
  }
  if (f.dry_run) removed = plan.remove;
  if (f.json) {
    Json j = {{"dry_run", f.dry_run},
              {"newest_committed", plan.newest},
              {"removed", removed},
              {"kept_newest", plan.kept_newest},
              {"kept_golden", plan.kept_golden},
              {"kept_dependencies", plan.kept_deps},
              {"kept_pinned", Json::array()},
              {"untouched", plan.kept_other}};
    for (const auto& [step, by] : plan.kept_pinned) {
      j["kept_pinned"].push_back({{"step", step}, {"by", by}});
    }
    if (!st.ok()) j["error"] = st.ToString();
    out << DumpText(j, 2) << "\n";
  } else {
    const char* verb = f.dry_run ? "would remove" : "removed";
    for (long s : removed) {
      auto it = plan.why.find(s);
      out << verb << Fmt(" step %ld", s)
          << (it != plan.why.end() ? " (" + it->second + ")" : std::string()) << "\n";
    }
    if (plan.newest < 0) out << "no committed step in " << f.dir << ": nothing to remove\n";
    auto list = [](const std::set<long>& s) { return s.empty() ? std::string("-") : Join(s); };
    out << "kept: newest " << list(plan.kept_newest) << "; golden " << list(plan.kept_golden)
        << "; dependencies " << list(plan.kept_deps);
    for (const auto& [step, by] : plan.kept_pinned) {
      out << "; step " << step << " (pinned by " << by << ")";
    }
    if (!plan.kept_other.empty()) {
      out << "; untouched (at/after newest committed) " << Join(plan.kept_other);
    }
    out << "\n"
        << removed.size() << " step director" << (removed.size() == 1 ? "y " : "ies ")
        << (f.dry_run ? "would be removed (dry run: nothing deleted)" : "removed") << "\n";
  }
  if (!st.ok()) {
    err << "bulwark ckpt gc: " << st.ToString() << "\n";
    return st.code() == Code::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

CLI::App* AddCkptCommands(CLI::App& app, int* exit_code, std::ostream& out, std::ostream& err,
                          const CommandFilter& filter) {
  auto* ckpt = app.add_subcommand("ckpt", "list, inspect, verify and garbage-collect checkpoints");
  if (!filter.Full("ckpt")) return ckpt;
  // Not require_subcommand: CLI11 would exit 106; a usage error here exits 2.
  ckpt->require_subcommand(0, 1);
  ckpt->callback([ckpt, exit_code, &err] {
    if (ckpt->get_subcommands().empty()) {
      *exit_code = Usage(err, "", "give a subcommand: ls | inspect | verify | gc (see --help)");
    }
  });
  const char* kDir = "checkpoint directory holding step-* dirs (the job's checkpoint.dir)";
  const char* kDirOrS3 =
      "checkpoint directory holding step-* dirs (the job's checkpoint.dir), or an object "
      "tier s3://BUCKET[/PREFIX][?endpoint=URL]";
  ckpt::Env* env = ckpt::Env::Default();

  auto ls = std::make_shared<CkptLsFlags>();
  auto* lsc = ckpt->add_subcommand("ls", "one line per step: committed?, sizes, dependencies");
  lsc->add_option("dir", ls->dir, kDirOrS3);
  lsc->add_flag("--all", ls->all, "also list uncommitted and invalid step directories");
  lsc->add_flag("--json", ls->json, "print a JSON array");
  lsc->callback([=, &out, &err] { *exit_code = CkptLs(env, *ls, out, err); });

  auto in = std::make_shared<CkptInspectFlags>();
  auto* inc = ckpt->add_subcommand("inspect", "a step's manifest, shards and tensors");
  inc->add_option("dir", in->dir, kDir);
  inc->add_option("step", in->step, "step number");
  inc->add_option("--rank", in->rank, "only this rank's tensors");
  inc->add_flag("--json", in->json, "print JSON");
  inc->callback([=, &out, &err] { *exit_code = CkptInspect(env, *in, out, err); });

  auto ve = std::make_shared<CkptVerifyFlags>();
  auto* vec = ckpt->add_subcommand(
      "verify",
      "read back and check every chunk of one step or of every step (exit 1 if any fails)");
  vec->add_option("dir", ve->dir, kDir);
  vec->add_option("step", ve->step, "step number (default: every step)");
  vec->add_flag("--all", ve->all, "every step (the default without STEP)");
  vec->add_flag("--json", ve->json, "print JSON");
  vec->callback([=, &out, &err] { *exit_code = CkptVerify(env, *ve, out, err); });

  auto gc = std::make_shared<CkptGcFlags>();
  auto* gcc = ckpt->add_subcommand("gc", "apply retention: remove old and uncommitted steps");
  gcc->add_option("dir", gc->dir, kDirOrS3);
  gcc->add_option("--keep", gc->keep, "newest committed steps to keep (>= 1, required)");
  gcc->add_option("--golden-every", gc->golden_every,
                  "also keep committed steps divisible by this (0: none)");
  gcc->add_flag("--dry-run", gc->dry_run, "print what would be removed; remove nothing");
  gcc->add_flag("--json", gc->json, "print JSON");
  gcc->add_option("--store", gc->stores,
                  "read replay bundles' pins from this job store (repeatable; default: every "
                  "store `bulwark get` knows)");
  gcc->add_flag("--ignore-replay-pins", gc->ignore_replay_pins,
                "also remove steps kept for `bulwark replay` of recorded incidents");
  gcc->callback([=, &out, &err] { *exit_code = CkptGc(env, *gc, out, err); });
  return ckpt;
}

}  // namespace bulwark::cli
