// The `scheduler:` and `queues:` sections of a YAML config, one implementation for
// both documents that hold them: the operator's queue configuration
// (ParseSchedulingConfig, sched/config.h) and the simulator's config (src/sim/config.cc
// calls these inside its own document). Internal to src/sched and src/sim; the user
// reference is docs/simulator.md (keep in sync).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sched/scheduler.h"
#include "spec/field_reader.h"
#include "spec/spec_reader.h"

namespace bulwark::sched::internal {

// The two top-level keys, for the key table of the document that holds them.
inline constexpr spec_internal::FieldDef kSchedulerSection = {
    "scheduler",
    "set scheduler to a mapping with any of: preemption, productionPools, researchPools, "
    "requeueBackoffBaseSeconds, requeueBackoffCapSeconds, restockStandby"};
inline constexpr spec_internal::FieldDef kQueuesSection = {
    "queues", "set queues to a list of {name, cohort, nominalGpus, ...}"};

inline constexpr spec_internal::FieldDef kSchedulerFields[] = {
    {"preemption", "set preemption to true or false"},
    {"productionPools", "set productionPools to a list of on-demand, spot, reserved"},
    {"researchPools", "set researchPools to a list of on-demand, spot, reserved"},
    {"requeueBackoffBaseSeconds", "set requeueBackoffBaseSeconds to a number >= 0"},
    {"requeueBackoffCapSeconds", "set requeueBackoffCapSeconds to a number >= 0"},
    {"restockStandby", "set restockStandby to true or false"},
};

inline constexpr spec_internal::FieldDef kQueueFields[] = {
    {"name", "set name to a unique queue name"},
    {"cohort", "set cohort to a cohort name (queues in one cohort lend to each other)"},
    {"nominalGpus", "set nominalGpus to a mapping gpuType: GPUs, e.g. {h100: 8000}"},
    {"borrowingLimitGpus", "set borrowingLimitGpus to a mapping gpuType: GPUs"},
    {"lendingLimitGpus", "set lendingLimitGpus to a mapping gpuType: GPUs"},
    {"weight", "set weight to a fair-share weight > 0"},
};

// The `scheduler` mapping `e` into *out; absent fields keep their value. Problems are
// reported into `r`.
void ParseSchedulerSection(spec_internal::FieldReader& r, const spec_internal::Entry& e,
                           SchedulerConfig* out);

// The `queues` list `e`: appends every valid queue to *out and records its line in
// *lines by name (a name already in *lines is reported as a duplicate; the simulator
// resolves its jobs' queues with it). Problems are reported into `r`.
void ParseQueuesSection(spec_internal::FieldReader& r, const spec_internal::Entry& e,
                        std::vector<QueueSpec>* out, std::map<std::string, int>* lines);

}  // namespace bulwark::sched::internal
