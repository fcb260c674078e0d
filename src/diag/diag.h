// Node diagnostics (issue 17, stop-diagnose; docs/diagnosis.md): short self-tests that
// tell a bad node from a good one, each run in its own process with a time budget.
//
//   matmul  a deterministic float32 matrix product (inputs from a fixed generator),
//           computed twice and checked against a double-precision reference: a wrong
//           result (beyond float rounding) or two runs that differ bit for bit mean
//           the compute is not to be trusted (silent data corruption). On every GPU
//           through cuBLAS when CUDA loads (gpu/cuda_blas.h), else on the CPU.
//   link    one member's part of a ring all-reduce among the nodes of a diagnosis, and
//           the bandwidth and latency of its links (diag/link.h): a slow or broken
//           link, and the node at fault, are judged over every member's report.
//   disk    writes `bytes` of a pattern to a checkpoint directory, fsyncs, reads it
//           back and compares: a full disk, an I/O error, a read-only mount or
//           corruption fails it; the throughput is evidence.
//
// RunChecks (called by `bulwark diagnose` and by an agent for its controller) starts `bulwark-agent
// diagnose --check ...` once per check, reads its one JSON line and kills its process group when it
// exceeds its budget (SIGTERM, 1 s, SIGKILL; reaped): a check that hangs is a failed check, never a
// stuck caller. Judge is the verdict: a pure function of the results. Thread-compatible; RunChecks
// blocks its caller for at most the sum of the budgets.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "diag/link.h"
#include "gpu/cuda_blas.h"

namespace bulwark::diag {

struct CheckResult {
  std::string name;  // "matmul", "disk:/path"
  bool ok = false;
  double seconds = 0;                  // how long it ran
  std::string evidence;                // what was measured or what went wrong, one line
  std::vector<LinkSample> links = {};  // link: this member's incoming links, its outgoing one
};
Json ToJson(const CheckResult& r);
// InvalidArgument naming the field for a malformed result line.
Result<CheckResult> CheckResultFromJson(const Json& j);

// The checks, in this process (what `bulwark-agent diagnose --check` runs).
struct MatmulOptions {
  int n = 256;
  // Chaos: one element of the second run (on the first GPU, or the CPU) is silently wrong.
  bool inject_sdc = false;
  // The GPU path's libraries, each list tried in order (gpu/cuda_blas.h); either list
  // empty = the CPU only.
  std::vector<std::string> cuda_runtimes = gpu::CudaBlas::DefaultRuntimes();
  std::vector<std::string> cublas = gpu::CudaBlas::DefaultBlas();
};
// With CUDA and cuBLAS loadable and a device: the product on every device, each judged
// like the CPU's; a CUDA error, or a CUDA install that loads but is broken, fails the
// check. Otherwise (no library, no driver, no device): the CPU, the reason in the
// evidence.
CheckResult MatmulSelfTest(const MatmulOptions& o);
// The CPU only.
CheckResult MatmulSelfTest(int n, bool inject_sdc = false);
CheckResult DiskSelfTest(const std::string& dir, size_t bytes);

struct CheckSpec {
  std::string check;  // "matmul" | "disk" | "link" | "gpu"
  std::string dir;    // disk: the directory; gpu: the NVML library (gpu/gpu_health.h)
  double budget_s = 30;
  // Chaos, for tests of the checks and the budget: "hang" (the check never finishes),
  // "sdc" (matmul: its second run is silently wrong). "" = none.
  std::string inject;
  // link: this member's place, the ring ("host:port,..."), the session, its listening
  // socket (not owned; the child gets it as fd 3) and chaos slow_link's pace (MiB/s).
  int link_index = 0;
  std::string link_peers = {};
  uint64_t link_session = 0;
  int link_listen_fd = -1;
  double link_throttle_mib_s = 0;
  // matmul: the CUDA runtime and cuBLAS to load ("auto": MatmulOptions' defaults; "":
  // the CPU only).
  std::string cuda_runtime = "auto";
  std::string cublas = "auto";
};

struct RunOptions {
  std::string agent_binary;  // bulwark-agent
  // The command that runs bulwark-agent, when it is more than its binary (an agent
  // bundle: AgentBundleCommand); overrides agent_binary.
  std::vector<std::string> agent_command;
  // Set (by another thread) to start no further check: the rest fail as cancelled.
  // Not owned; null = never cancelled.
  const std::atomic<bool>* cancel = nullptr;
  int matmul_n = 256;
  size_t disk_bytes = 16 << 20;
  size_t link_bytes = size_t{1} << 30;  // link: at most this much per link (diag/link.h)
};

// Runs each check in its own `bulwark-agent diagnose` process, one after another.
std::vector<CheckResult> RunChecks(const std::vector<CheckSpec>& checks, const RunOptions& o);

struct Verdict {
  bool healthy = true;
  std::vector<std::string> failed;  // names of the failed checks
  std::string summary;              // "healthy: ..." or "unhealthy: name: evidence; ..."
};
Verdict Judge(const std::vector<CheckResult>& results);

}  // namespace bulwark::diag
