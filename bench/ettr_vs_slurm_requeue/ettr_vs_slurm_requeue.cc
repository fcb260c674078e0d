// ETTR on Slurm: Bulwark vs plain `sbatch --requeue` + `srun torchrun`, side by side on
// one real Slurm 22.05 test cluster (src/backend/testing/slurm_cluster.h, 3 nodes).
// Same trainer (examples/pytorch-ddp/train.py), steps, checkpoint interval and faults:
// a rank killed at step 40, a rank hung at 110, a NaN at 190, and the machine of a node
// that trains (not the batch host) crashed at step --crash-step (SlurmCluster::CrashNode:
// its slurmd, step daemons and their processes killed; the node goes DOWN).
//
//  * Bulwark: the script `bulwark slurm script` prints (2 nodes x 2 ranks + 1 standby,
//    --no-kill), submitted with sbatch; the spec's chaos fires the first three faults.
//  * Baseline: what a Slurm user writes: `#SBATCH --nodes=2 --requeue`, `srun torchrun
//    --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --max_restarts 6 train.py --mode
//    torchsave` (rank 0 torch.saves every 10 steps; a NaN raises), the first three faults
//    from the trainer's BASELINE_CHAOS hooks. A node failure ends the job (NODE_FAIL);
//    Slurm requeues it and it waits until it is eligible again before it restarts from
//    ckpt.pt on the remaining nodes.
//
// ETTR = productive seconds / wall seconds, both sides measured alike: wall from
// `sbatch` to the job COMPLETED as `scontrol` shows it (polled every 0.2 s); productive
// from Bulwark's ledger (report seconds.productive) and, for the baseline, from rank 0's
// steps.jsonl with the ledger's rules (bench/ettr_vs_torchrun/README.md, "Accounting").
// Bulwark's own ledger ETTR (wall from its controller's start) is reported too.
//
// Usage: ettr_vs_slurm_requeue --out FILE.json [--steps 400] [--crash-step 260]
//        [--work DIR]   (needs Debian's slurm-wlm and python3-torch; about 8 minutes)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/testing/slurm_cluster.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "common/net.h"

#ifndef BW_BUILD_DIR
#define BW_BUILD_DIR ""
#endif
#ifndef BW_SOURCE_DIR
#define BW_SOURCE_DIR ""
#endif

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using testing::SlurmCluster;

double Now() { return SystemClock::Get()->NowMono(); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "ettr_vs_slurm_requeue: %s\n", why.c_str());
  std::exit(1);
}

// Polls until `done` or timeout_s; false on timeout.
template <typename F>
bool WaitFor(F done, double timeout_s, double poll_s = 0.2) {
  const double deadline = Now() + timeout_s;
  while (!done()) {
    if (Now() >= deadline) return false;
    PollReadable({}, poll_s);
  }
  return true;
}

// The highest value of group 1 of `re` in `text` (-1 if none).
long HighestMatch(const std::string& text, const std::regex& re) {
  long best = -1;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    best = std::max(best, std::stol((*it)[1]));
  }
  return best;
}

struct Side {
  double wall_s = 0;        // sbatch to COMPLETED
  double productive_s = 0;  // new steps' time
  long steps = 0;
  int requeues = 0;
  std::string state;
  double crash_to_lost_s = -1;     // Bulwark: crash -> NodeLost event seen
  double crash_to_restart_s = -1;  // baseline: crash -> the requeued script starts
  Json extra = Json::object();
};

class Bench {
 public:
  Bench(SlurmCluster* c, std::string work, int steps, int crash_step)
      : c_(c), work_(std::move(work)), steps_(steps), crash_step_(crash_step) {}

  Side Bulwark();
  Side Baseline();

 private:
  std::string Submit(const std::string& script, const std::string& dir) {
    std::ofstream(dir + "/job.sbatch") << script;
    auto r = c_->Run({"sbatch", "--parsable", dir + "/job.sbatch"}, 30, dir);
    if (!r.ok() || !r->exit.ok()) Die("sbatch: " + (r.ok() ? r->output : r.status().ToString()));
    return std::to_string(std::stol(r->output));
  }
  std::string Field(const std::string& job, const std::string& key) {
    auto r = c_->Run({"scontrol", "--oneliner", "show", "job", job});
    if (!r.ok()) return "";
    std::smatch m;
    return std::regex_search(r->output, m, std::regex(" " + key + "=([^ \n]*)")) ? m[1].str() : "";
  }
  // Waits for COMPLETED (or FAILED/CANCELLED/TIMEOUT); a NODE_FAIL or PENDING after a
  // requeue is not the end.
  std::string WaitDone(const std::string& job, double timeout_s) {
    std::string state;
    WaitFor(
        [&] {
          state = Field(job, "JobState");
          return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" ||
                 state == "TIMEOUT";
        },
        timeout_s);
    return state;
  }

  SlurmCluster* c_;
  std::string work_;
  int steps_, crash_step_;
};

Side Bench::Bulwark() {
  const std::string dir = work_ + "/bulwark";
  fs::create_directories(dir);
  std::ostringstream y;
  y << "name: demo\nnodes: 2\nprocsPerNode: 2\n"
    << "command: [\"/usr/bin/python3\", \"" << BW_SOURCE_DIR
    << "/examples/pytorch-ddp/train.py\"]\n"
    << "args: [\"--steps\", \"" << steps_
    << "\", \"--log-every\", \"10\", \"--val-every\", \"0\"]\n"
    << "checkpoint: {dir: " << dir << "/ckpt, intervalSteps: 10, keep: 3, memorySlots: 4}\n"
    << "slurm: {growNodes: 1}\n"
    << "faultPolicy: {restartBudget: 6, backoff: {baseSeconds: 0.2, capSeconds: 2}, "
       "hangTimeout: {floorSeconds: 3, multiplier: 10, startupSeconds: 180}, spareNodes: 1, "
       "heartbeat: {intervalSeconds: 1, misses: 3}, stopGraceSeconds: 3}\n"
    << "chaos:\n  - {kind: kill_rank, atStep: 40, rank: 1}\n"
       "  - {kind: hang_rank, atStep: 110, rank: 2}\n"
       "  - {kind: nan_loss, atStep: 190, rank: 0}\n";
  std::ofstream(dir + "/demo.yaml") << y.str();
  auto script = testing::RunCommand(
      {std::string(BW_BUILD_DIR) + "/bin/bulwark", "slurm", "script", dir + "/demo.yaml", "--",
       "--report", dir + "/report.json", "--run-dir", dir + "/run"},
      c_->ClientEnv(), 60);
  if (!script.ok() || !script->exit.ok()) Die("bulwark slurm script failed");
  const double t0 = Now();
  const std::string job = Submit(script->output, dir);
  const std::string log = dir + "/bulwark-demo-" + job + ".out";
  // Rank 0's step lines, from whichever node serves slot 0 (stop-diagnose may have put a
  // standby there: "[node-1/0] step ...").
  const std::regex step_re("\\[node-[0-9]+/0\\] step +([0-9]+) loss");
  if (!WaitFor([&] { return HighestMatch(ReadFile(log), step_re) >= crash_step_; }, 600)) {
    Die("Bulwark: never reached step " + std::to_string(crash_step_));
  }
  // The node serving slot 1 now: node-1, or the standby stop-diagnose promoted after the
  // hang.
  std::string text = ReadFile(log), slot1 = "node-1";
  const std::regex promoted("StandbyPromoted: (node-[0-9]+) takes slot 1 ");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), promoted);
       it != std::sregex_iterator(); ++it) {
    slot1 = (*it)[1];
  }
  std::smatch m;
  if (!std::regex_search(text, m,
                         std::regex("\\[bulwark\\] slurm: " + slot1 + " on (node[0-9]+)"))) {
    Die("Bulwark: " + slot1 + " was never placed:\n" + text);
  }
  const std::string host = m[1];
  if (host == "node1") Die("Bulwark: slot 1 runs on the batch host");
  const double crashed = Now();
  if (Status st = c_->CrashNode(host); !st.ok()) Die(st.ToString());
  std::printf("bulwark: crashed %s (%s, slot 1) at step %ld\n", host.c_str(), slot1.c_str(),
              HighestMatch(ReadFile(log), step_re));
  Side s;
  if (WaitFor([&] { return ReadFile(log).find("NodeLost: " + slot1) != std::string::npos; }, 120,
              0.05)) {
    s.crash_to_lost_s = Now() - crashed;
  }
  s.state = WaitDone(job, 900);
  s.wall_s = Now() - t0;
  const Json r = Json::parse(ReadFile(dir + "/report.json"), nullptr, false);
  if (r.is_discarded() || !r.is_object()) Die("Bulwark: no report:\n" + ReadFile(log));
  s.productive_s = r["seconds"].value("productive", 0.0);
  s.steps = r.value("last_step", 0L);
  s.extra["ledger_ettr"] = r.value("ettr", 0.0);
  s.extra["ledger_wall_s"] = r.value("wall_s", 0.0);
  s.extra["restarts"] = r.value("restarts", 0);
  Json kinds = Json::array();
  for (const auto& inc : r["incidents"]) kinds.push_back(inc.value("kind", "?"));
  s.extra["incidents"] = kinds;
  if (Status st = c_->StartSlurmd(host); !st.ok()) Die("restart slurmd: " + st.ToString());
  return s;
}

Side Bench::Baseline() {
  const std::string dir = work_ + "/baseline";
  fs::create_directories(dir + "/ckpt");
  std::ostringstream sh;
  sh << "#!/bin/bash\n"
     << "#SBATCH --job-name=baseline\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
     << "#SBATCH --exclusive\n#SBATCH --requeue\n#SBATCH --open-mode=append\n"
     << "#SBATCH --output=" << dir << "/baseline-%j.out\n"
     << "export BASELINE_CHAOS=kill:40:1,hang:110:2,nan:190:0 BASELINE_PROCS_PER_NODE=2 "
        "PYTHONUNBUFFERED=1\n"
     << "r=${SLURM_RESTART_COUNT:-0}\n"
     // A rendezvous port free now, on the batch host, for this start (a requeued start
     // picks anew), as a user's script does.
     << "port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); "
        "s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])')\n"
     << "echo \"baseline: start $(date +%s.%N) restart $r on $SLURM_JOB_NODELIST\"\n"
     << "srun /usr/bin/python3 -m torch.distributed.run --nnodes 2 --nproc_per_node 2 "
     << "--rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$port "
     << "--rdzv_id job$SLURM_JOB_ID-$r --max_restarts 6 --redirects 1 --tee 2 --log_dir " << dir
     << "/torchrun " << BW_SOURCE_DIR << "/examples/pytorch-ddp/train.py --mode torchsave "
     << "--steps " << steps_ << " --ckpt-every 10 --ckpt-dir " << dir
     << "/ckpt --pg-timeout 30 --log-every 10 --val-every 0\n";
  const double t0 = Now();
  const std::string job = Submit(sh.str(), dir);
  const std::string steplog = dir + "/ckpt/steps.jsonl";
  const std::regex step_re("\"step\": ([0-9]+)");
  if (!WaitFor([&] { return HighestMatch(ReadFile(steplog), step_re) >= crash_step_; }, 900)) {
    Die("baseline: never reached step " + std::to_string(crash_step_) + "\n" +
        ReadFile(dir + "/baseline-" + job + ".out"));
  }
  // The second node of the job (the first runs the batch script).
  auto hosts = c_->Run({"scontrol", "show", "hostnames", Field(job, "NodeList")});
  std::istringstream hs(hosts.ok() ? hosts->output : "");
  std::string first, host;
  hs >> first >> host;
  if (host.empty()) Die("baseline: no second node in " + Field(job, "NodeList"));
  if (Status st = c_->CrashNode(host); !st.ok()) Die(st.ToString());
  const double crashed_wall = SystemClock::Get()->NowWall();
  std::printf("baseline: crashed %s at step %ld\n", host.c_str(),
              HighestMatch(ReadFile(steplog), step_re));
  Side s;
  s.state = WaitDone(job, 1200);
  s.wall_s = Now() - t0;
  std::smatch m;
  const std::string out = ReadFile(dir + "/baseline-" + job + ".out");
  if (std::regex_search(out, m, std::regex("baseline: start ([0-9.]+) restart 1 "))) {
    s.crash_to_restart_s = std::stod(m[1]) - crashed_wall;
  }
  s.requeues = std::atoi(Field(job, "Restarts").c_str());
  // The ledger's rules over rank 0's step log (bench/ettr_vs_torchrun/README.md).
  long hw = 0;
  double ckpt = 0, rework = 0;
  std::istringstream lines(ReadFile(steplog));
  for (std::string l; std::getline(lines, l);) {
    const Json r = Json::parse(l, nullptr, false);
    if (r.is_discarded() || !r.is_object()) continue;  // a line torn by the crash
    const long step = r.value("step", 0L);
    const double t = r.value("step_time", 0.0), stall = r.value("ckpt_stall", 0.0);
    ckpt += stall;
    if (step > hw) {
      s.productive_s += t - stall;
      hw = step;
    } else {
      rework += t - stall;
    }
  }
  s.steps = hw;
  s.extra["ckpt_stall_s"] = ckpt;
  s.extra["rework_s"] = rework;
  if (Status st = c_->StartSlurmd(host); !st.ok()) Die("restart slurmd: " + st.ToString());
  return s;
}

Json ToJson(const Side& s) {
  Json j = s.extra;
  j["state"] = s.state;
  j["wall_s"] = s.wall_s;
  j["productive_s"] = s.productive_s;
  j["ettr"] = s.wall_s > 0 ? s.productive_s / s.wall_s : 0;
  j["steps"] = s.steps;
  if (s.requeues > 0) j["requeues"] = s.requeues;
  if (s.crash_to_lost_s >= 0) j["crash_to_node_lost_s"] = s.crash_to_lost_s;
  if (s.crash_to_restart_s >= 0) j["crash_to_requeued_start_s"] = s.crash_to_restart_s;
  return j;
}

// The block of docs/benchmarks.md between the ettr_vs_slurm_requeue markers, from a
// measured.json (the section's prose above it is not touched).
std::string DocBlock(const Json& j, const std::string& command) {
  const Json& b = j["bulwark"];
  const Json& q = j["baseline_sbatch_requeue_torchrun"];
  auto f = [](const char* fmt, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  auto per_step = [&](const Json& side) {
    const double steps = side.value("steps", 0L);
    return steps > 0 ? f("%.3f s", side.value("productive_s", 0.0) / steps) : std::string("-");
  };
  std::ostringstream o;
  o << "<!-- BEGIN ettr_vs_slurm_requeue (generated by "
       "bench/ettr_vs_slurm_requeue --update-docs) -->\n\n"
    << "Machine: " << j.value("machine", "?") << "; run " << j.value("run_at", "?") << ".\n\n"
    << "Command: `" << command << "`\n\n"
    << "| | Bulwark | sbatch --requeue + srun torchrun | ratio |\n|---|---|---|---|\n"
    << "| ETTR (productive / sbatch-to-COMPLETED) | " << f("%.3f", b.value("ettr", 0.0)) << " | "
    << f("%.3f", q.value("ettr", 0.0)) << " | " << f("%.2f", j.value("ratio", 0.0)) << " |\n"
    << "| wall clock, sbatch to COMPLETED | " << f("%.1f s", b.value("wall_s", 0.0)) << " | "
    << f("%.1f s", q.value("wall_s", 0.0)) << " | "
    << f("%.2f", q.value("wall_s", 0.0) / std::max(1e-9, b.value("wall_s", 0.0))) << " |\n"
    << "| productive | " << f("%.1f s", b.value("productive_s", 0.0)) << " | "
    << f("%.1f s", q.value("productive_s", 0.0)) << " | |\n"
    << "| productive time per step | " << per_step(b) << " | " << per_step(q) << " | |\n"
    << "| steps | " << b.value("steps", 0L) << " | " << q.value("steps", 0L) << " | |\n"
    << "| node crash to | `NodeLost` after "
    << (b.contains("crash_to_node_lost_s") ? f("%.2f s", b["crash_to_node_lost_s"].get<double>())
                                           : std::string("-"))
    << ", the standby takes the slot | requeued job starts after "
    << (q.contains("crash_to_requeued_start_s")
            ? f("%.1f s", q["crash_to_requeued_start_s"].get<double>())
            : std::string("-"))
    << " | |\n"
    << "| Bulwark's own ledger ETTR (wall from its controller's start) | "
    << f("%.3f", b.value("ledger_ettr", 0.0)) << " | | |\n\n"
    << "<!-- END ettr_vs_slurm_requeue -->";
  return o.str();
}

// Replaces the marked block of `doc` (or appends it) with DocBlock.
void UpdateDocs(const std::string& doc, const Json& j, const std::string& command) {
  std::string text = ReadFile(doc);
  const std::string begin = "<!-- BEGIN ettr_vs_slurm_requeue";
  const std::string end = "<!-- END ettr_vs_slurm_requeue -->";
  const size_t a = text.find(begin), z = text.find(end);
  const std::string block = DocBlock(j, command);
  if (a != std::string::npos && z != std::string::npos && z > a) {
    text.replace(a, z + end.size() - a, block);
  } else {
    text += "\n" + block + "\n";
  }
  std::ofstream(doc) << text;
  std::printf("updated %s\n", doc.c_str());
}

}  // namespace
}  // namespace bulwark

int main(int argc, char** argv) {
  using namespace bulwark;
  std::string out, work, docs, from;
  int steps = 400, crash_step = 260;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out") {
      out = v;
    } else if (k == "--steps") {
      steps = std::atoi(v.c_str());
    } else if (k == "--crash-step") {
      crash_step = std::atoi(v.c_str());
    } else if (k == "--work") {
      work = v;
    } else if (k == "--update-docs") {
      docs = v;
    } else if (k == "--from") {
      from = v;
    } else {
      Die("unknown flag " + k +
          " (flags: --out FILE --steps N --crash-step N --work DIR --update-docs "
          "docs/benchmarks.md, or --from measured.json --update-docs FILE)");
    }
  }
  const std::string command =
      "build/bin/ettr_vs_slurm_requeue --out bench/ettr_vs_slurm_requeue/measured.json "
      "--update-docs docs/benchmarks.md";
  if (!from.empty()) {  // render an earlier run
    const Json j = Json::parse(ReadFile(from), nullptr, false);
    if (j.is_discarded() || docs.empty()) Die("--from needs a measured.json and --update-docs");
    UpdateDocs(docs, j, command);
    return 0;
  }
  if (out.empty()) Die("give --out FILE.json");
  if (work.empty()) work = "/tmp/bw-slurm-bench-" + std::to_string(getpid());
  fs::remove_all(work);
  fs::create_directories(work);
  // Four hosts: Bulwark's allocation takes three (two nodes and a standby); the fourth is
  // what it grows onto (slurm.growNodes) once a replay quarantined the NaN's node and the
  // crash took another. The baseline's two nodes, requeued, find two of those left.
  testing::SlurmClusterOptions co;
  co.nodes = 4;
  auto cluster = testing::SlurmCluster::Start(co);
  if (!cluster.ok()) Die(cluster.status().ToString());
  Bench b(cluster->get(), work, steps, crash_step);
  const Side bw = b.Bulwark();
  std::printf("bulwark: %s, wall %.1f s, productive %.1f s\n", bw.state.c_str(), bw.wall_s,
              bw.productive_s);
  const Side base = b.Baseline();
  std::printf("baseline: %s, wall %.1f s, productive %.1f s, requeued %d\n", base.state.c_str(),
              base.wall_s, base.productive_s, base.requeues);
  Json j = {{"bulwark", ToJson(bw)},
            {"baseline_sbatch_requeue_torchrun", ToJson(base)},
            {"steps", steps},
            {"crash_step", crash_step},
            {"cluster", "Slurm 22.05 test cluster, " + std::to_string(co.nodes) +
                            " nodes on one machine (SlurmdTimeout=3)"}};
  const double be = j["bulwark"]["ettr"], re = j["baseline_sbatch_requeue_torchrun"]["ettr"];
  j["ratio"] = re > 0 ? be / re : 0;
  char when[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  j["run_at"] = when;
  j["machine"] = std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) +
                 " cores, the Slurm test cluster's " + std::to_string(co.nodes) +
                 " nodes on it, torch from Debian's python3-torch";
  std::ofstream(out) << j.dump(2) << "\n";
  if (!docs.empty()) UpdateDocs(docs, j, command);
  std::printf("ETTR: Bulwark %.3f, sbatch --requeue + srun torchrun %.3f, ratio %.2f\n", be, re,
              re > 0 ? be / re : 0);
  cluster->get()->Stop();
  if (std::getenv("BW_BENCH_KEEP") == nullptr) fs::remove_all(work);
  return bw.state == "COMPLETED" && base.state == "COMPLETED" ? 0 : 1;
}
