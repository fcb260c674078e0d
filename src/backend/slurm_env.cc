// ExpandHostlist, AllocationFromEnv (slurm_env.h).
#include "backend/slurm_env.h"

#include <cctype>
#include <cstdint>

namespace bulwark::slurm {
namespace {

constexpr size_t kMaxNames = 65536;

Status Bad(const std::string& expr, size_t at, const std::string& problem) {
  return InvalidArgument("hostlist \"" + expr + "\": " + problem + " at character " +
                         std::to_string(at + 1) +
                         "; a hostlist is names and bracketed ranges, e.g. gpu[01-04,07],login1");
}

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The names one bracket group "[...]" stands for ("01-03,07" -> 01 02 03 07).
Status ExpandGroup(const std::string& expr, size_t at, const std::string& body,
                   std::vector<std::string>* out) {
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string part = body.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi)) {
      return Bad(expr, at + start,
                 "\"" + part + "\" is not a number or a range of numbers such as 01-04");
    }
    const uint64_t a = std::stoull(lo), b = std::stoull(hi);
    if (a > b) return Bad(expr, at + start, "range \"" + part + "\" goes down");
    if (b - a >= kMaxNames || out->size() + (b - a + 1) > kMaxNames) {
      return Bad(expr, at + start, "more than 65536 names");
    }
    for (uint64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out->push_back(s);
    }
    start = comma + 1;
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(const std::string& expr) {
  std::vector<std::string> names;
  size_t i = 0;
  while (i < expr.size()) {
    // One name: literal text and bracket groups up to a top-level comma.
    std::vector<std::string> partial = {""};
    const size_t begin = i;
    while (i < expr.size() && expr[i] != ',') {
      const char c = expr[i];
      if (c == ']') return Bad(expr, i, "']' without '['");
      if (c == '[') {
        const size_t close = expr.find(']', i);
        if (close == std::string::npos) return Bad(expr, i, "'[' is never closed");
        const std::string body = expr.substr(i + 1, close - i - 1);
        if (body.find('[') != std::string::npos) return Bad(expr, i, "brackets nest");
        std::vector<std::string> group;
        BW_RETURN_IF_ERROR(ExpandGroup(expr, i + 1, body, &group));
        if (partial.size() * group.size() + names.size() > kMaxNames) {
          return Bad(expr, i, "more than 65536 names");
        }
        std::vector<std::string> next;
        for (const std::string& p : partial) {
          for (const std::string& g : group) next.push_back(p + g);
        }
        partial = std::move(next);
        i = close + 1;
        continue;
      }
      if (std::isspace(static_cast<unsigned char>(c)) ||
          std::iscntrl(static_cast<unsigned char>(c))) {
        return Bad(expr, i, "a space or control character");
      }
      for (std::string& p : partial) p += c;
      ++i;
    }
    if (i == begin) return Bad(expr, i, "an empty name");
    names.insert(names.end(), partial.begin(), partial.end());
    if (i < expr.size()) {  // the comma
      ++i;
      if (i == expr.size()) return Bad(expr, i - 1, "a trailing ','");
    }
  }
  if (names.empty()) return InvalidArgument("hostlist is empty; give at least one node name");
  return names;
}

Result<Allocation> AllocationFromEnv(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> std::string {
    auto it = env.find(k);
    return it == env.end() ? "" : it->second;
  };
  auto number = [&](const char* k, int* out) -> Status {
    const std::string v = get(k);
    if (v.empty()) return Status::Ok();
    if (!AllDigits(v) || v.size() > 9) {
      return InvalidArgument(std::string(k) + "=\"" + v +
                             "\" is not a non-negative integer; it comes from Slurm: run "
                             "inside sbatch, salloc or srun, and do not set it yourself");
    }
    *out = std::stoi(v);
    return Status::Ok();
  };
  Allocation a;
  a.job_id = get("SLURM_JOB_ID");
  if (a.job_id.empty()) a.job_id = get("SLURM_JOBID");
  if (a.job_id.empty()) {
    return NotFound(
        "not inside a Slurm allocation (SLURM_JOB_ID is not set); run under "
        "sbatch or salloc, or let Bulwark request the allocation");
  }
  if (!AllDigits(a.job_id) && a.job_id.find('_') == std::string::npos) {
    return InvalidArgument("SLURM_JOB_ID=\"" + a.job_id + "\" is not a Slurm job id");
  }
  std::string list = get("SLURM_JOB_NODELIST");
  if (list.empty()) list = get("SLURM_NODELIST");
  if (list.empty()) {
    return InvalidArgument("SLURM_JOB_NODELIST is not set although SLURM_JOB_ID is (" + a.job_id +
                           "); run inside the allocation's batch script or an srun step");
  }
  auto nodes = ExpandHostlist(list);
  if (!nodes.ok()) return nodes.status().Annotate("SLURM_JOB_NODELIST");
  a.nodes = std::move(*nodes);
  a.partition = get("SLURM_JOB_PARTITION");
  int num_nodes = -1;
  BW_RETURN_IF_ERROR(number("SLURM_JOB_NUM_NODES", &num_nodes));
  if (num_nodes >= 0 && static_cast<size_t>(num_nodes) != a.nodes.size()) {
    return InvalidArgument("SLURM_JOB_NUM_NODES=" + std::to_string(num_nodes) + " but " +
                           "SLURM_JOB_NODELIST names " + std::to_string(a.nodes.size()) +
                           " nodes (" + list + ")");
  }
  BW_RETURN_IF_ERROR(number("SLURM_CPUS_ON_NODE", &a.cpus_on_node));
  BW_RETURN_IF_ERROR(number("SLURM_NODEID", &a.node_id));
  BW_RETURN_IF_ERROR(number("SLURM_PROCID", &a.proc_id));
  BW_RETURN_IF_ERROR(number("SLURM_NTASKS", &a.ntasks));
  if (a.ntasks == 0) BW_RETURN_IF_ERROR(number("SLURM_NPROCS", &a.ntasks));
  if (a.node_id >= 0 && static_cast<size_t>(a.node_id) >= a.nodes.size()) {
    return InvalidArgument("SLURM_NODEID=" + std::to_string(a.node_id) + " is outside the " +
                           std::to_string(a.nodes.size()) + " nodes of SLURM_JOB_NODELIST");
  }
  return a;
}

}  // namespace bulwark::slurm
