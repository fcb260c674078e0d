// The simulator config schema: known fields of every YAML mapping with their fix
// hints. Internal to src/sim; the user reference is docs/simulator.md (keep in sync).
// The `scheduler` and `queues` sections are the scheduler's (sched/config_sections.h).
#pragma once

#include "sched/config_sections.h"
#include "spec/spec_reader.h"

namespace bulwark::sim {

using spec_internal::FieldDef;

inline constexpr FieldDef kTopFields[] = {
    {"sim", "set sim to a mapping with any of: days, seed, sampleMinutes"},
    {"cluster", "set cluster to a mapping with either shape: {...} or nodes: [...]"},
    sched::internal::kSchedulerSection,
    sched::internal::kQueuesSection,
    {"strategies", "set strategies to a mapping of name: {restartSeconds, ...}"},
    {"workload", "set workload to a mapping with any of: defaults, jobs, generator"},
    {"failures",
     "set failures to a mapping with any of: preset, scale, ratesPer1000NodeDays, "
     "distribution, weibullShape, repairHours, spotReturnHours"},
    {"faults", "set faults to a list of {atSeconds, node, type}"},
};

inline constexpr FieldDef kSimFields[] = {
    {"days", "set sim.days to the simulated duration in days, a number > 0 and <= 3650"},
    {"seed", "set sim.seed to an integer >= 0"},
    {"sampleMinutes", "set sim.sampleMinutes to the time-series interval in minutes (0 = off)"},
};

inline constexpr FieldDef kClusterFields[] = {
    {"shape", "set cluster.shape to {zones, blocksPerZone, racksPerBlock, nodesPerRack, ...}"},
    {"nodes", "set cluster.nodes to a list of {name, zone, block, rack, gpuType, gpus, pool}"},
};

inline constexpr FieldDef kShapeFields[] = {
    {"zones", "set zones to an integer >= 1"},
    {"blocksPerZone", "set blocksPerZone to an integer >= 1"},
    {"racksPerBlock", "set racksPerBlock to an integer >= 1"},
    {"nodesPerRack", "set nodesPerRack to an integer >= 1"},
    {"gpuType", "set gpuType to a GPU type name, e.g. h100"},
    {"gpusPerNode", "set gpusPerNode to an integer 1..64"},
    {"pools", "set pools to fractions {onDemand: 0.6, spot: 0.2, reserved: 0.2} summing to 1"},
    {"pricePerGpuHour", "set pricePerGpuHour to {onDemand: 4.0, spot: 1.5, reserved: 2.5}"},
};

inline constexpr FieldDef kPoolFields[] = {
    {"onDemand", "a number >= 0"},
    {"spot", "a number >= 0"},
    {"reserved", "a number >= 0"},
};

inline constexpr FieldDef kNodeFields[] = {
    {"name", "set name to a unique node name"},
    {"zone", "set zone to a label"},
    {"block", "set block to a label"},
    {"rack", "set rack to a label"},
    {"gpuType", "set gpuType to a GPU type name, e.g. h100"},
    {"gpus", "set gpus to an integer 1..64"},
    {"pool", "set pool to on-demand, spot or reserved"},
    {"pricePerGpuHour", "set pricePerGpuHour to a number >= 0"},
};

inline constexpr FieldDef kStrategyFields[] = {
    {"detectionSeconds",
     "set detectionSeconds to {crash, hang, nan, hardware, spotReclaim} in seconds (hang may "
     "be auto)"},
    {"restartSeconds", "set restartSeconds to the relaunch + re-init time, a number >= 0"},
    {"checkpointLoadSeconds", "set checkpointLoadSeconds to a number >= 0"},
    {"checkpointWriteSeconds", "set checkpointWriteSeconds (w, blocking) to a number >= 0"},
    {"persistSeconds", "set persistSeconds (background persist) to a number >= 0"},
    {"checkpointIntervalSeconds",
     "set checkpointIntervalSeconds to compute seconds between checkpoints (> 0) or auto"},
    {"priorNodeDays", "set priorNodeDays to the weight of the model rate, a number >= 0"},
    {"standby", "set standby to a number of warm standby nodes >= 0, or auto"},
    {"standbyQuantile", "set standbyQuantile to a probability in (0, 1)"},
    {"inMemoryCheckpoints", "set inMemoryCheckpoints to true or false"},
    {"snapshotStallSeconds", "set snapshotStallSeconds (per step) to a number >= 0"},
    {"peerReplication", "set peerReplication to true or false"},
    {"replacementLeadSeconds", "set replacementLeadSeconds to a number >= 0"},
    {"faultPolicy",
     "set faultPolicy to any of: restartBudget, backoffBaseSeconds, backoffCapSeconds, "
     "hangTimeoutFloorSeconds, hangTimeoutMultiplier, maxSameFaultWithoutProgress"},
};

inline constexpr FieldDef kDetectionFields[] = {
    {"crash", "seconds >= 0"},    {"hang", "seconds >= 0 or auto"}, {"nan", "seconds >= 0"},
    {"hardware", "seconds >= 0"}, {"spotReclaim", "seconds >= 0"},
};

inline constexpr FieldDef kPolicyFields[] = {
    {"restartBudget", "set restartBudget to an integer >= 0"},
    {"backoffBaseSeconds", "set backoffBaseSeconds to a number >= 0 (0 = no backoff)"},
    {"backoffCapSeconds", "set backoffCapSeconds to a number >= 0"},
    {"hangTimeoutFloorSeconds", "set hangTimeoutFloorSeconds to a number >= 0"},
    {"hangTimeoutMultiplier", "set hangTimeoutMultiplier to a number >= 0"},
    {"maxSameFaultWithoutProgress", "set maxSameFaultWithoutProgress to an integer >= 0"},
};

inline constexpr FieldDef kWorkloadFields[] = {
    {"defaults", "set defaults to any of: queue, strategy, priority, tier, gpuType, stepSeconds"},
    {"jobs", "set jobs to a list of {id, queue, submitHours, nodes, workHours, ...}"},
    {"generator", "set generator to {count, arrivalsPerHour, sizes, workHours, ...}"},
};

inline constexpr FieldDef kJobFields[] = {
    {"id", "set id to a unique job name"},
    {"queue", "set queue to the name of a queue in queues"},
    {"submitHours", "set submitHours to a number of hours >= 0"},
    {"nodes", "set nodes to the gang size, an integer >= 1"},
    {"gpuType", "set gpuType to a GPU type the cluster has"},
    {"priority", "set priority to an integer"},
    {"tier", "set tier to production or research"},
    {"topology", "set topology to rack, block, zone or any"},
    {"workHours", "set workHours to compute hours at full speed, a number > 0"},
    {"stepSeconds", "set stepSeconds to a number > 0"},
    {"strategy", "set strategy to the name of a strategy in strategies"},
};

inline constexpr FieldDef kGeneratorFields[] = {
    {"count", "set count to the number of jobs to draw, an integer >= 0"},
    {"arrivalsPerHour", "set arrivalsPerHour to a Poisson arrival rate > 0"},
    {"startHours", "set startHours to the first arrival time window start, hours >= 0"},
    {"sizes", "set sizes to a list of {nodes, weight}"},
    {"workHours", "set workHours to {median, sigma, max} (lognormal, truncated at max)"},
    {"queues", "set queues to a list of {name, weight}"},
    {"productionShare", "set productionShare to the production-tier fraction in [0, 1]"},
    {"priorities", "set priorities to a list of {priority, weight}"},
    {"gpuType", "set gpuType to a GPU type the cluster has"},
    {"stepSeconds", "set stepSeconds to a number > 0"},
    {"strategy", "set strategy to the name of a strategy in strategies"},
};

inline constexpr FieldDef kWeightedFields[] = {
    {"nodes", "an integer >= 1"},
    {"name", "a queue name"},
    {"priority", "an integer"},
    {"weight", "a number > 0"},
};

inline constexpr FieldDef kWorkHoursFields[] = {
    {"median", "hours > 0"},
    {"sigma", "lognormal sigma >= 0"},
    {"max", "hours > 0"},
};

inline constexpr FieldDef kFailureFields[] = {
    {"preset", "set preset to one of: none, meta-rsc1, meta-rsc2, llama3"},
    {"scale", "set scale to a factor >= 0 applied to every rate"},
    {"ratesPer1000NodeDays",
     "set ratesPer1000NodeDays to {crash, hang, nan, hardware, spotReclaim} (each >= 0)"},
    {"distribution", "set distribution to exponential or weibull"},
    {"weibullShape", "set weibullShape to k > 0 (k < 1: infant mortality)"},
    {"repairHours", "set repairHours to hours >= 0 until a failed node returns"},
    {"spotReturnHours", "set spotReturnHours to hours >= 0 until a reclaimed node returns"},
};

inline constexpr FieldDef kRateFields[] = {
    {"crash", "a rate >= 0"},    {"hang", "a rate >= 0"},        {"nan", "a rate >= 0"},
    {"hardware", "a rate >= 0"}, {"spotReclaim", "a rate >= 0"},
};

inline constexpr FieldDef kFaultFields[] = {
    {"atSeconds", "set atSeconds to the fault time in seconds >= 0"},
    {"atHours", "set atHours to the fault time in hours >= 0"},
    {"node", "set node to a node index (0-based) or a node name"},
    {"type", "set type to crash, hang, nan, hardware or spot_reclaim"},
};

}  // namespace bulwark::sim
