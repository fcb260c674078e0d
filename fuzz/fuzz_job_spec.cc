// Job spec reader (spec/job_spec.h): ParseJobSpec on arbitrary text, as `bulwark
// validate/run` call it through LoadJobSpec. Contracts checked beyond "no crash":
//  * an error is InvalidArgument, each line "fuzz.yaml:<line>: <field>: ...";
//  * a spec that parses satisfies the documented invariants (name, sizes, absolute
//    normalised paths, one trigger per chaos fault, finite numbers);
//  * parsing is deterministic and a spec is an update of nothing to itself
//    (PlanJobUpdate(s, s) is FailedPrecondition: every field equals itself, so no
//    NaN or unordered value slipped through).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "spec/job_spec.h"
#include "spec/job_update.h"

namespace {

using bulwark::fuzz::Check;

bool Normalised(const std::string& p) {
  if (p.empty() || p[0] != '/') return false;
  if (p.size() > 1 && p.back() == '/') return false;
  return p.find("//") == std::string::npos && p.find("/./") == std::string::npos &&
         p.find("/../") == std::string::npos && !p.ends_with("/.") && !p.ends_with("/..");
}

void CheckSpec(const bulwark::JobSpec& s) {
  Check(!s.name.empty() && s.name.size() <= 63, "name is not a DNS-1123 label", s.name);
  for (char c : s.name) {
    Check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-',
          "name is not a DNS-1123 label", s.name);
  }
  Check(s.nodes >= 1 && s.procs_per_node >= 1, "nodes/procsPerNode below 1");
  Check(!s.command.empty(), "empty command accepted");
  Check(Normalised(s.workdir), "workdir not absolute and normalised", s.workdir);
  Check(Normalised(s.checkpoint.dir), "checkpoint.dir not absolute and normalised",
        s.checkpoint.dir);
  Check(s.source_path.empty(), "source_path set for text");
  Check(s.checkpoint.keep >= 1, "checkpoint.keep below 1");
  const auto& f = s.fault_policy;
  for (double v :
       {f.backoff_base_seconds, f.backoff_cap_seconds, f.hang_timeout_floor_seconds,
        f.hang_timeout_multiplier, f.startup_timeout_seconds, f.failures_per_node_day,
        f.replacement_lead_seconds, f.heartbeat_interval_seconds, f.stop_grace_seconds,
        f.park_timeout_seconds, s.checkpoint.interval_seconds, s.elastic.wait_seconds,
        s.monitoring.peak_flops, s.monitoring.price_per_gpu_hour, s.monitoring.ettr_target}) {
    Check(std::isfinite(v), "non-finite number accepted");
  }
  if (s.elastic.enabled()) Check(s.elastic.min_nodes <= s.nodes, "elastic.minNodes > nodes");
  for (const auto& c : s.chaos) {
    Check((c.at_seconds >= 0) != (c.at_step >= 0), "chaos fault without exactly one trigger");
    Check(std::isfinite(c.at_seconds) && std::isfinite(c.factor) && std::isfinite(c.delay_seconds),
          "non-finite chaos number");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = bulwark::ParseJobSpec(text, "fuzz.yaml", "/base/dir");
  if (!r.ok()) {
    Check(r.status().code() == bulwark::Code::kInvalidArgument, "error other than InvalidArgument",
          r.status().ToString());
    bulwark::fuzz::CheckErrorLines(r.status(), "fuzz.yaml");
    return 0;
  }
  CheckSpec(*r);
  auto again = bulwark::ParseJobSpec(text, "fuzz.yaml", "/base/dir");
  Check(again.ok(), "second parse of the same text failed");
  auto self = bulwark::PlanJobUpdate(*r, *again);
  Check(!self.ok() && self.status().code() == bulwark::Code::kFailedPrecondition,
        "a spec differs from its own second parse", self.ok() ? "" : self.status().ToString());
  return 0;
}
