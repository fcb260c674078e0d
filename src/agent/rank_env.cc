#include "agent/rank_env.h"

#include <algorithm>

#include "common/json_util.h"

namespace bulwark {
namespace {

// Assigns a typed field or returns the annotated error.
#define BW_FIELD(dst, expr)           \
  do {                                \
    auto _r = (expr);                 \
    if (!_r.ok()) return _r.status(); \
    dst = std::move(_r).value();      \
  } while (0)

Status CheckPositive(const char* field, double v) {
  if (v > 0) return Status::Ok();
  return InvalidArgument("message 'start': field '" + std::string(field) + "' must be > 0 (got " +
                         std::to_string(v) + ")");
}

}  // namespace

Result<StartSpec> ParseStartMessage(const Json& m, const std::string& default_log_dir) {
  StartSpec s;
  BW_FIELD(s.attempt, JInt(m, "attempt"));
  BW_FIELD(s.run_id, JStrOr(m, "run_id", ""));
  BW_FIELD(s.job, JStr(m, "job"));
  BW_FIELD(s.command, JStrList(m, "command"));
  BW_FIELD(s.env, JStrMap(m, "env"));
  BW_FIELD(s.workdir, JStrOr(m, "workdir", ""));
  BW_FIELD(s.log_dir, JStrOr(m, "log_dir", ""));
  if (s.log_dir.empty()) s.log_dir = default_log_dir;
  BW_FIELD(s.master_addr, JStr(m, "master_addr"));
  BW_FIELD(s.master_port, JInt(m, "master_port"));
  BW_FIELD(s.nnodes, JInt(m, "nnodes"));
  BW_FIELD(s.group_rank, JInt(m, "group_rank"));
  BW_FIELD(s.nproc_per_node, JInt(m, "nproc_per_node"));
  BW_FIELD(s.world_size, JInt(m, "world_size"));
  BW_FIELD(s.restart_count, JIntOr(m, "restart_count", 0));
  BW_FIELD(s.max_restarts, JIntOr(m, "max_restarts", 0));
  BW_FIELD(s.resume_step, JIntOr(m, "resume_step", -1));
  BW_FIELD(s.ckpt_dir, JStrOr(m, "ckpt_dir", ""));
  BW_FIELD(s.ckpt_interval_steps, JIntOr(m, "ckpt_interval_steps", 0));
  BW_FIELD(s.cadence_steps, JIntOr(m, "cadence_steps", 0));
  BW_FIELD(s.cadence_from_step, JIntOr(m, "cadence_from_step", 0));
  s.persist_by_agent = m.contains("persist_by_agent") && m["persist_by_agent"].is_boolean() &&
                       m["persist_by_agent"].get<bool>();
  BW_FIELD(s.memory_slots, JIntOr(m, "memory_slots", 0));
  BW_FIELD(s.shared_dir, JStrOr(m, "shared_dir", ""));
  BW_FIELD(s.object_store, JStrOr(m, "object_store", ""));
  BW_FIELD(s.object_interval_steps, JIntOr(m, "object_interval_steps", 0));
  BW_FIELD(s.peer_host, JStrOr(m, "peer_host", ""));
  BW_FIELD(s.peer_port, JIntOr(m, "peer_port", 0));
  BW_FIELD(s.peer_push_share, JNumOr(m, "peer_push_share", 1));
  if (m.contains("fetch")) {
    if (!m["fetch"].is_array()) {
      return InvalidArgument(
          "message 'start': field 'fetch' must be a list of {rank, step, host, "
          "port}");
    }
    for (size_t i = 0; i < m["fetch"].size(); ++i) {
      const Json& f = m["fetch"][i];
      const std::string where = "message 'start': fetch[" + std::to_string(i) + "]";
      if (!f.is_object()) return InvalidArgument(where + " must be an object");
      StartSpec::Fetch x;
      BW_FIELD(x.rank, JInt(f, "rank"));
      BW_FIELD(x.step, JInt(f, "step"));
      BW_FIELD(x.host, JStr(f, "host"));
      BW_FIELD(x.port, JInt(f, "port"));
      BW_FIELD(x.from, JStrOr(f, "from", ""));
      BW_FIELD(x.from_rank, JIntOr(f, "from_rank", -1));
      if (x.port <= 0 || x.port > 65535 || x.step < 0) {
        return InvalidArgument(where + ": port must be in [1, 65535] and step >= 0");
      }
      if (x.from_rank < -1) return InvalidArgument(where + ": from_rank must be >= 0");
      s.fetch.push_back(x);
    }
  }
  if (s.peer_port < 0 || s.peer_port > 65535) {
    return InvalidArgument("message 'start': field 'peer_port' must be in [0, 65535]");
  }
  if (!(s.peer_push_share > 0 && s.peer_push_share <= 1)) {
    return InvalidArgument("message 'start': field 'peer_push_share' must be in (0, 1]");
  }
  BW_FIELD(s.skip_from, JIntOr(m, "skip_from", -1));
  BW_FIELD(s.skip_to, JIntOr(m, "skip_to", -1));
  BW_FIELD(s.hang_floor_s, JNumOr(m, "hang_floor_s", 30));
  BW_FIELD(s.hang_multiplier, JNumOr(m, "hang_multiplier", 10));
  BW_FIELD(s.startup_timeout_s, JNumOr(m, "startup_timeout_s", 300));
  BW_FIELD(s.stop_grace_s, JNumOr(m, "stop_grace_s", 5));
  BW_FIELD(s.store_host, JStrOr(m, "store_host", ""));
  BW_FIELD(s.store_port, JIntOr(m, "store_port", 0));
  BW_FIELD(s.warm_ranks, JIntOr(m, "warm_ranks", 0));
  BW_FIELD(s.version, JStrOr(m, "version", ""));
  BW_FIELD(s.max_world_size, JIntOr(m, "max_world_size", 0));
  if (s.store_port < 0 || s.store_port > 65535 || (s.store_port > 0 && s.store_host.empty())) {
    return InvalidArgument(
        "message 'start': field 'store_port' must be in [0, 65535], with 'store_host' set");
  }
  if (s.max_world_size != 0 && s.max_world_size < s.world_size) {
    return InvalidArgument("message 'start': field 'max_world_size' (" +
                           std::to_string(s.max_world_size) + ") must be 0 or >= world_size (" +
                           std::to_string(s.world_size) + ")");
  }
  if (s.warm_ranks < 0 || s.warm_ranks > 64) {
    return InvalidArgument("message 'start': field 'warm_ranks' must be in [0, 64]");
  }
  if (s.command.empty()) {
    return InvalidArgument("message 'start': field 'command' is empty; give the rank's argv");
  }
  if (s.log_dir.empty()) {
    return InvalidArgument(
        "message 'start': field 'log_dir' is empty and the agent has no default");
  }
  BW_RETURN_IF_ERROR(CheckPositive("nproc_per_node", s.nproc_per_node));
  BW_RETURN_IF_ERROR(CheckPositive("nnodes", s.nnodes));
  BW_RETURN_IF_ERROR(CheckPositive("hang_floor_s", s.hang_floor_s));
  BW_RETURN_IF_ERROR(CheckPositive("startup_timeout_s", s.startup_timeout_s));
  if (s.memory_slots != 0 && (s.memory_slots < 2 || s.memory_slots > 62)) {
    return InvalidArgument("message 'start': field 'memory_slots' must be 0 or in [2, 62]");
  }
  if (s.hang_multiplier < 0) {
    return InvalidArgument("message 'start': field 'hang_multiplier' must be >= 0");
  }
  if (s.stop_grace_s < 0)
    return InvalidArgument("message 'start': field 'stop_grace_s' must be >= 0");
  if (s.group_rank < 0 || s.group_rank >= s.nnodes) {
    return InvalidArgument("message 'start': field 'group_rank' must be in [0, nnodes) (got " +
                           std::to_string(s.group_rank) + ", nnodes " + std::to_string(s.nnodes) +
                           ")");
  }
  if (s.world_size < s.GlobalRank(s.nproc_per_node - 1) + 1) {
    return InvalidArgument("message 'start': field 'world_size' (" + std::to_string(s.world_size) +
                           ") is smaller than group_rank * nproc_per_node + nproc_per_node");
  }
  return s;
}

std::string RankSockPath(const AgentPaths& paths, int global_rank) {
  return (paths.sock_dir.empty() ? paths.node_dir : paths.sock_dir) + "/rank-" +
         std::to_string(global_rank) + ".sock";
}

std::string StackFilePath(const StartSpec& spec, int global_rank) {
  return spec.log_dir + "/stacks/attempt-" + std::to_string(spec.attempt) + "-rank-" +
         std::to_string(global_rank) + ".txt";
}

std::string RankLogPath(const StartSpec& spec, int global_rank) {
  return spec.log_dir + "/rank-" + std::to_string(global_rank) + ".log";
}

std::map<std::string, std::string> BuildRankEnv(const StartSpec& spec, int local_rank,
                                                const AgentPaths& paths,
                                                std::map<std::string, std::string> env) {
  for (const auto& [k, v] : spec.env) env[k] = v;
  // torchrun's rule: several ranks on a node get one OpenMP thread each (OpenBLAS reads
  // it too) unless the job or the agent's environment sets OMP_NUM_THREADS; else every
  // rank's BLAS threads contend for the same cores. In the zygote's environment too: it
  // loads BLAS (imports torch) before the script runs, so a script's own setting of it
  // comes too late for a warm rank.
  if (spec.nproc_per_node > 1 && env.find("OMP_NUM_THREADS") == env.end()) {
    env["OMP_NUM_THREADS"] = "1";
  }
  const int rank = spec.GlobalRank(local_rank);
  auto i = [](long v) { return std::to_string(v); };
  env["MASTER_ADDR"] = spec.master_addr;
  env["MASTER_PORT"] = i(spec.master_port);
  env["RANK"] = i(rank);
  env["LOCAL_RANK"] = i(local_rank);
  env["WORLD_SIZE"] = i(spec.world_size);
  env["BULWARK_MAX_WORLD_SIZE"] = i(std::max(spec.max_world_size, spec.world_size));
  env["LOCAL_WORLD_SIZE"] = i(spec.nproc_per_node);
  env["GROUP_RANK"] = i(spec.group_rank);
  env["GROUP_WORLD_SIZE"] = i(spec.nnodes);
  env["ROLE_RANK"] = i(rank);
  env["ROLE_WORLD_SIZE"] = i(spec.world_size);
  env["ROLE_NAME"] = "default";
  env["TORCHELASTIC_RESTART_COUNT"] = i(spec.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = i(spec.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = spec.run_id;
  env["BULWARK_JOB"] = spec.job;
  env["BULWARK_ATTEMPT"] = i(spec.attempt);
  env["BULWARK_AGENT_SOCK"] = paths.agent_sock;
  env["BULWARK_RANK_SOCK"] = RankSockPath(paths, rank);
  env["BULWARK_RESUME_STEP"] = i(spec.resume_step);
  env["BULWARK_CKPT_DIR"] = spec.ckpt_dir;
  env["BULWARK_CKPT_INTERVAL_STEPS"] = i(spec.ckpt_interval_steps);
  if (spec.persist_by_agent) env["BULWARK_CKPT_PERSIST"] = "agent";
  if (spec.memory_slots > 0 && !paths.staging_dir.empty()) {
    env["BULWARK_STAGING_DIR"] = paths.staging_dir;
    env["BULWARK_MEMORY_SLOTS"] = i(spec.memory_slots);
  }
  if (!spec.shared_dir.empty()) env["BULWARK_CKPT_SHARED_DIR"] = spec.shared_dir;
  env["BULWARK_SKIP_FROM"] = i(spec.skip_from);
  env["BULWARK_SKIP_TO"] = i(spec.skip_to);
  env["BULWARK_STACK_FILE"] = StackFilePath(spec, rank);
  if (spec.store_port > 0) {
    env["BULWARK_STORE_ADDR"] = spec.store_host;
    env["BULWARK_STORE_PORT"] = i(spec.store_port);
  } else {
    env["BULWARK_STORE_ADDR"] = "";
    env["BULWARK_STORE_PORT"] = "0";
  }
  env["PYTHONUNBUFFERED"] = "1";
  if (!paths.lib_path.empty()) env["BULWARK_LIB"] = paths.lib_path;
  if (!paths.python_dir.empty()) {
    std::string pp = paths.python_dir + ":" + paths.python_dir + "/bulwark/sitecustomize_dir";
    auto it = env.find("PYTHONPATH");
    if (it != env.end() && !it->second.empty()) pp += ":" + it->second;
    env["PYTHONPATH"] = pp;
  }
  return env;
}

}  // namespace bulwark
