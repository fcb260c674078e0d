// The scheduler's YAML configuration: the `scheduler:` and `queues:` sections of a
// `bulwark sim` config (docs/simulator.md), on their own -- the operator's queue
// configuration (`bulwark operator --queues FILE`). The simulator parses the same
// sections inside its config with the same code (src/sched/config_sections.h).
//
// Library bw_sched_config, apart from bw_sched so that the scheduler stays free of
// YAML. Thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"

namespace bulwark::sched {

struct SchedulingConfig {
  SchedulerConfig scheduler;  // defaults where the section or a field is absent
  std::vector<QueueSpec> queues;
};

// Parses and validates the YAML text: a mapping with `scheduler` and `queues`, both
// optional (other keys are errors). Errors: InvalidArgument with one line per problem,
// "<source>:<line>: <field.path>: <problem> (got <value>); <fix>". Never throws.
Result<SchedulingConfig> ParseSchedulingConfig(const std::string& text,
                                               const std::string& source_name);
// Reads the file then ParseSchedulingConfig; NotFound when it does not exist.
Result<SchedulingConfig> LoadSchedulingConfig(const std::string& path);

}  // namespace bulwark::sched
