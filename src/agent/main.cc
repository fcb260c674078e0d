// bulwark-agent: the per-node agent (docs/agent.md).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>

#include "agent/agent.h"
#include "agent/install.h"
#include "common/clock.h"
#include "common/flag_checks.h"
#include "common/install_paths.h"
#include "diag/diag.h"
#include "gpu/gpu_health.h"

#ifndef BULWARK_DEFAULT_PYTHON_DIR
#define BULWARK_DEFAULT_PYTHON_DIR ""
#endif
#ifndef BULWARK_DEFAULT_LIB
#define BULWARK_DEFAULT_LIB ""
#endif
#ifndef BULWARK_VERSION
#define BULWARK_VERSION "unknown"
#endif

namespace {

void OnTermSignal(int sig) { bulwark::Agent::RequestTermination(sig); }

// `bulwark-agent install DIR` (agent/install.h).
int Install(int argc, char** argv) {
  CLI::App app{
      "bulwark-agent install: copies this agent, its loader and libraries, and the "
      "SDK into DIR, to run in a container of any image"};
  app.name("bulwark-agent install");
  bulwark::InstallOptions o;
  o.python_dir = bulwark::DefaultPythonDir(BULWARK_DEFAULT_PYTHON_DIR);
  o.lib_path = bulwark::DefaultSdkLib(BULWARK_DEFAULT_LIB);
  app.add_option("dir", o.dest,
                 "where to install (an emptyDir shared with the training "
                 "container)")
      ->required();
  app.add_option("--python-dir", o.python_dir, "the SDK package root to copy")
      ->capture_default_str();
  app.add_option("--lib", o.lib_path, "libbulwark.so to copy")->capture_default_str();
  app.footer(
      "Example (an init container of the operator's image):\n"
      "  bulwark-agent install /bulwark/agent\n"
      "then the training container runs\n"
      "  /bulwark/agent/lib/ld.so --library-path /bulwark/agent/lib "
      "/bulwark/agent/bin/bulwark-agent ...");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a usage error: 2
  }
  bulwark::Status st = bulwark::InstallAgentBundle(o, std::cout);
  if (!st.ok()) {
    std::cerr << "bulwark-agent install: " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}

// `bulwark-agent diagnose --check matmul|disk|link|gpu ...`: one self-test (diag/diag.h,
// gpu/gpu_health.h), its
// result as one JSON line on stdout, exit 0 (a failed check is a result, not an error).
// `link` listens on fd 3, a TCP socket its agent bound (diag/link.h).
int Diagnose(int argc, char** argv) {
  CLI::App app{"bulwark-agent diagnose: one node self-test, its result as a JSON line"};
  app.name("bulwark-agent diagnose");
  std::string check, dir, inject;
  size_t bytes = 16 << 20;
  int n = 256;
  app.add_option("--check", check, "matmul | disk | link")
      ->required()
      ->check(CLI::IsMember({"matmul", "disk", "link", "gpu"}));
  std::string nvml_library = bulwark::gpu::Nvml::kDefaultLibrary;
  app.add_option("--nvml-library", nvml_library, "gpu: the NVIDIA management library to load");
  std::string peers;
  bulwark::diag::LinkOptions link;
  app.add_option("--index", link.index, "link: this member's place in the ring")
      ->check(bulwark::flags::InRange(0, bulwark::diag::kMaxLinkMembers - 1));
  app.add_option("--peers", peers, "link: every member's HOST:PORT, in ring order");
  app.add_option("--session", link.session, "link: the ring's session number");
  app.add_option("--budget", link.budget_s, "link: every socket op ends by then (seconds)")
      ->check(bulwark::flags::InRange(0.5, 600.0));
  app.add_option("--throttle-mibps", link.throttle_mib_s,
                 "link, chaos slow_link: pace this member's sends (MiB/s)")
      ->check(bulwark::flags::InRange(0.0, 1e6));
  app.add_option("--dir", dir, "disk: the checkpoint directory to test");
  app.add_option("--bytes", bytes,
                 "disk: how much to write and read back; link: how much to stream on each link")
      ->check(bulwark::flags::InRange(size_t{1}, size_t{1} << 36));
  app.add_option("--n", n, "matmul: the matrix size")->check(bulwark::flags::InRange(1, 4096));
  std::string cuda_runtime = "auto", cublas = "auto";
  app.add_option("--cuda-runtime", cuda_runtime,
                 "matmul: the CUDA runtime library (auto: libcudart.so.12, .11.0, .so; '': "
                 "the CPU only)")
      ->capture_default_str();
  app.add_option("--cublas", cublas,
                 "matmul: the cuBLAS library (auto: libcublas.so.12, .11, .so; '': the CPU only)")
      ->capture_default_str();
  app.add_option("--inject", inject, "chaos: hang | sdc")->check(CLI::IsMember({"hang", "sdc"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (check == "disk" && dir.empty()) {
    std::cerr << "bulwark-agent diagnose: --check disk needs --dir DIR\n";
    return 2;
  }
  if (check == "link") {
    auto parsed = bulwark::diag::ParseLinkPeers(peers);
    if (!parsed.ok()) {
      std::cerr << "bulwark-agent diagnose: --peers: " << parsed.status().message() << "\n";
      return 2;
    }
    link.peers = *parsed;
    link.listen_fd = 3;
    link.bytes = bytes;
    const auto t0 = std::chrono::steady_clock::now();
    bulwark::diag::LinkCheckOutput out = bulwark::diag::LinkSelfTest(link);
    bulwark::diag::CheckResult r{"link", out.ok, 0, out.evidence, out.links};
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << bulwark::diag::ToJson(r).dump() << std::endl;
    return 0;
  }
  if (inject == "hang") {
    while (true) ::pause();  // killed by the runner at its budget
  }
  if (check == "gpu") {
    const auto t0 = std::chrono::steady_clock::now();
    const bulwark::gpu::GpuHealth h = bulwark::gpu::CheckGpuHealth(nvml_library);
    bulwark::diag::CheckResult r{"gpu", h.ok, 0, h.evidence};
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << bulwark::diag::ToJson(r).dump() << std::endl;
    return 0;
  }
  bulwark::diag::MatmulOptions mo;
  mo.n = n;
  mo.inject_sdc = inject == "sdc";
  if (cuda_runtime != "auto") mo.cuda_runtimes = {cuda_runtime};
  if (cublas != "auto") mo.cublas = {cublas};
  if (cuda_runtime.empty() || cublas.empty()) mo.cuda_runtimes.clear();
  const bulwark::diag::CheckResult r = check == "matmul" ? bulwark::diag::MatmulSelfTest(mo)
                                                         : bulwark::diag::DiskSelfTest(dir, bytes);
  std::cout << bulwark::diag::ToJson(r).dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Run from a bundle, the process is the loader (ld.so): keep the agent's name.
  prctl(PR_SET_NAME, "bulwark-agent", 0, 0, 0);
  if (argc >= 2 && std::string(argv[1]) == "install") return Install(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "diagnose") return Diagnose(argc - 1, argv + 1);
  CLI::App app{"bulwark-agent: launches a node's training ranks and detects their faults"};
  app.set_version_flag("--version", std::string("bulwark-agent ") + BULWARK_VERSION);
  app.footer(
      "Subcommands: bulwark-agent install DIR, bulwark-agent diagnose --check "
      "matmul|disk|link|gpu "
      "(see their --help)");
  bulwark::AgentOptions o;
  std::string controller;
  app.add_option("--controller", controller, "controller address HOST:PORT")->required();
  app.add_option("--node", o.node, "this node's id, e.g. node-0")->required();
  app.add_option("--run-dir", o.run_dir, "directory for this agent's sockets")->required();
  app.add_option("--heartbeat-interval", o.heartbeat_interval_s, "seconds between heartbeats")
      ->check(bulwark::flags::Positive());
  app.add_option("--connect-timeout", o.connect_timeout_s,
                 "seconds to keep retrying the controller");
  o.python_dir = bulwark::DefaultPythonDir(BULWARK_DEFAULT_PYTHON_DIR);
  o.lib_path = bulwark::DefaultSdkLib(BULWARK_DEFAULT_LIB);
  app.add_option("--python-dir", o.python_dir, "Bulwark Python package root for PYTHONPATH");
  app.add_option("--lib", o.lib_path, "path of libbulwark.so (BULWARK_LIB)");
  app.add_option("--peer-host", o.peer_host,
                 "address this agent's peer-replication server binds and peers dial");
  app.add_option("--peer-port", o.peer_port, "peer-replication port (0 = ephemeral)")
      ->check(bulwark::flags::InRange(0, 65535));
  app.add_option("--orphan-timeout", o.orphan_timeout_s,
                 "seconds the ranks keep running after the controller is lost, for a new "
                 "controller to adopt this agent (0 = stop them at once)")
      ->check(bulwark::flags::AtLeast(0));
  app.add_option("--adopt-port", o.adopt_port,
                 "port an adopting controller dials, on --peer-host (0 = ephemeral)")
      ->check(bulwark::flags::InRange(0, 65535));
  app.add_option("--gdb", o.stacks.gdb_path, "gdb for native stacks of hung ranks ('' = off)");
  app.add_option("--stack-budget", o.stacks.budget_s,
                 "max seconds spent capturing stacks before a hang is reported");
  app.add_option("--metrics-addr", o.metrics_addr,
                 "serve Prometheus /metrics on HOST:PORT (port 0 = a free one; '' = none)");
  app.add_option("--nvml-library", o.nvml_library,
                 "NVML library loaded for GPU health ('' = do not look for GPUs)");
  app.add_option("--cuda-runtime", o.cuda_runtime,
                 "the compute self-test's CUDA runtime (auto: the usual names; '': the CPU only)")
      ->capture_default_str();
  app.add_option("--cublas", o.cublas,
                 "the compute self-test's cuBLAS (auto: the usual names; '': the CPU only)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  size_t colon = controller.rfind(':');
  int port = 0;
  if (colon != std::string::npos) {
    try {
      port = std::stoi(controller.substr(colon + 1));
    } catch (...) {
      port = 0;
    }
  }
  if (colon == std::string::npos || port <= 0 || port > 65535) {
    std::cerr << "bulwark-agent: --controller '" << controller
              << "' must be HOST:PORT, e.g. 127.0.0.1:7070\n";
    return bulwark::kAgentExitSetupFailed;
  }
  o.controller_host = controller.substr(0, colon);
  o.controller_port = port;

  struct sigaction sa {};
  sa.sa_handler = OnTermSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  bulwark::Agent agent(o, bulwark::SystemClock::Get());
  return agent.Run();
}
