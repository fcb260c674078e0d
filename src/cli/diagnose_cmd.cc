// `bulwark diagnose` (diagnose_cmd.h).
#include "cli/diagnose_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/flag_checks.h"
#include "common/install_paths.h"
#include "diag/diag.h"

namespace bulwark::cli {

int DiagnoseRun(const DiagnoseFlags& f, std::ostream& out, std::ostream& err) {
  if (!f.output.empty() && f.output != "json") {
    err << "bulwark diagnose: -o must be json (or omitted for a table), not \"" << f.output
        << "\"\n";
    return 2;
  }
  diag::RunOptions o;
  const char* env = std::getenv("BULWARK_AGENT");
  o.agent_binary = !f.agent.empty()                ? f.agent
                   : (env != nullptr && *env != 0) ? std::string(env)
                                                   : ExeDir() + "/bulwark-agent";
  o.matmul_n = f.matmul_n;
  o.disk_bytes = static_cast<size_t>(f.disk_mib) << 20;
  std::vector<diag::CheckSpec> checks = {{"matmul", "", f.budget_s, f.inject}};
  checks[0].cuda_runtime = f.cuda_runtime;
  checks[0].cublas = f.cublas;
  for (const std::string& d : f.checkpoint_dirs) checks.push_back({"disk", d, f.budget_s, ""});
  if (!f.nvml_library.empty()) checks.push_back({"gpu", f.nvml_library, f.budget_s, ""});
  const std::vector<diag::CheckResult> results = diag::RunChecks(checks, o);
  const diag::Verdict v = diag::Judge(results);
  if (f.output == "json") {
    Json j = {{"healthy", v.healthy}, {"summary", v.summary}, {"checks", Json::array()}};
    for (const diag::CheckResult& r : results) j["checks"].push_back(diag::ToJson(r));
    out << j.dump(2) << "\n";
  } else {
    out << "CHECK                          RESULT  SECONDS  EVIDENCE\n";
    for (const diag::CheckResult& r : results) {
      char line[96];
      std::snprintf(line, sizeof line, "%-30s %-7s %7.2f  ", r.name.c_str(), r.ok ? "ok" : "FAILED",
                    r.seconds);
      out << line << r.evidence << "\n";
    }
    out << v.summary << "\n";
  }
  return v.healthy ? 0 : 1;
}

CLI::App* AddDiagnoseCommand(CLI::App& app, int* exit_code, std::ostream& out, std::ostream& err,
                             const CommandFilter& filter) {
  auto f = std::make_shared<DiagnoseFlags>();
  auto* cmd = app.add_subcommand(
      "diagnose",
      "run this node's self-tests (compute on every GPU through CUDA or on the CPU, "
      "checkpoint disks, GPUs through NVML) and say if it is healthy");
  if (!filter.Full("diagnose")) return cmd;
  cmd->add_option("--checkpoint-dir", f->checkpoint_dirs,
                  "a checkpoint directory to write, fsync and read back (repeatable)");
  cmd->add_option("--budget", f->budget_s, "seconds each check may take; past it, it fails")
      ->check(flags::InRange(0.01, 86400.0))
      ->capture_default_str();
  cmd->add_option("--matmul-n", f->matmul_n, "size of the compute check's matrices")
      ->check(flags::InRange(1, 4096))
      ->capture_default_str();
  cmd->add_option("--disk-mib", f->disk_mib, "MiB each disk check writes and reads back")
      ->check(flags::InRange(1, 65536))
      ->capture_default_str();
  cmd->add_option("--nvml-library", f->nvml_library,
                  "the gpu check's NVIDIA management library (\"\": no gpu check)")
      ->capture_default_str();
  cmd->add_option("--cuda-runtime", f->cuda_runtime,
                  "the compute check's CUDA runtime on GPUs (auto: libcudart.so.12, .11.0, .so; "
                  "\"\": the CPU only)")
      ->capture_default_str();
  cmd->add_option(
         "--cublas", f->cublas,
         "the compute check's cuBLAS (auto: libcublas.so.12, .11, .so; \"\": the CPU only)")
      ->capture_default_str();
  cmd->add_option("-o,--output", f->output, "json (default: a table)");
  cmd->add_option("--inject", f->inject, "chaos: make the compute check hang or be silently wrong")
      ->check(CLI::IsMember({"hang", "sdc"}));
  cmd->add_option("--agent", f->agent,
                  "bulwark-agent to run the checks (default: next to bulwark)");
  cmd->footer(
      "Exit status: 0 healthy, 1 a check failed, 2 usage.\n"
      "Examples:\n"
      "  bulwark diagnose --checkpoint-dir /nvme/ckpt --checkpoint-dir /shared/ckpt\n"
      "  bulwark diagnose --budget 10 -o json\n"
      "docs/diagnosis.md says what each check does.");
  cmd->callback([f, exit_code, &out, &err] { *exit_code = DiagnoseRun(*f, out, err); });
  return cmd;
}

}  // namespace bulwark::cli
