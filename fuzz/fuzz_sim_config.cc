// Simulator and scheduler configuration readers: sim::ParseSimConfig (`bulwark sim
// CONFIG`) and sched::ParseSchedulingConfig (`bulwark operator --queues FILE`; the
// same section parsers inside the simulator's config), on the same text. Contracts
// checked beyond "no crash":
//  * errors are InvalidArgument, each line naming the source;
//  * a config that parses is usable: a positive finite duration, jobs and injected
//    faults referring to existing nodes, finite numbers; parsing is deterministic;
//  * what ParseSimConfig accepts in its `scheduler`/`queues` sections,
//    ParseSchedulingConfig accepts too when the text holds nothing else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "sched/config.h"
#include "sim/sim.h"

namespace {

using bulwark::fuzz::Check;

void CheckSim(const bulwark::sim::SimConfig& c) {
  Check(std::isfinite(c.duration_s) && c.duration_s > 0, "duration not positive and finite");
  Check(std::isfinite(c.sample_s) && c.sample_s >= 0, "sample interval negative or not finite");
  for (const auto& f : c.faults) {
    Check(f.node >= 0 && f.node < static_cast<int>(c.nodes.size()),
          "injected fault names a node that does not exist");
    Check(std::isfinite(f.at_s) && f.at_s >= 0, "injected fault at a bad time");
  }
  for (double r : c.failures.per_node_day) {
    Check(std::isfinite(r) && r >= 0, "failure rate negative or not finite");
  }
  Check(c.source == "fuzz.yaml", "source not kept", c.source);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto sim = bulwark::sim::ParseSimConfig(text, "fuzz.yaml");
  if (!sim.ok()) {
    Check(sim.status().code() == bulwark::Code::kInvalidArgument,
          "sim: error other than "
          "InvalidArgument",
          sim.status().ToString());
    bulwark::fuzz::CheckErrorLines(sim.status(), "fuzz.yaml");
  } else {
    CheckSim(*sim);
    auto again = bulwark::sim::ParseSimConfig(text, "fuzz.yaml");
    Check(again.ok() && again->nodes.size() == sim->nodes.size() &&
              again->jobs.size() == sim->jobs.size() && again->seed == sim->seed,
          "second parse of the same text differs");
  }
  auto sched = bulwark::sched::ParseSchedulingConfig(text, "fuzz.yaml");
  if (!sched.ok()) {
    Check(sched.status().code() == bulwark::Code::kInvalidArgument,
          "sched: error other than "
          "InvalidArgument",
          sched.status().ToString());
    bulwark::fuzz::CheckErrorLines(sched.status(), "fuzz.yaml");
  } else if (sim.ok()) {
    Check(sched->queues.size() == sim->queues.size(), "the two readers disagree on the queues",
          text);
  }
  return 0;
}
