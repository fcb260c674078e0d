// RemoteCatalog: checkpoint catalog operations as requests to a designated agent
// (docs/protocol.md "Checkpoint catalog").
#include <algorithm>

#include "common/json_util.h"
#include "controller/ckpt_catalog.h"

namespace bulwark {
namespace {

// The Code whose CodeName is `name`; INTERNAL for an unknown name.
Code CodeFromName(const std::string& name) {
  for (int c = 0; c < kNumCodes; ++c) {
    if (name == CodeName(static_cast<Code>(c))) return static_cast<Code>(c);
  }
  return Code::kInternal;
}

// The status a reply reports under `<prefix>code` / `<prefix>error`; OK when there is
// no error field.
Status ReplyStatus(const Json& m, const std::string& prefix) {
  const std::string ekey = prefix + "error";
  if (!m.contains(ekey)) return Status::Ok();
  const std::string err = m[ekey].is_string() ? m[ekey].get<std::string>() : m[ekey].dump();
  const std::string ckey = prefix + "code";
  const Code c = m.contains(ckey) && m[ckey].is_string() ? CodeFromName(m[ckey].get<std::string>())
                                                         : Code::kInternal;
  return Status(c == Code::kOk ? Code::kInternal : c, err);
}

std::vector<long> LongList(const Json& j) {
  std::vector<long> out;
  if (!j.is_array()) return out;
  for (const auto& x : j) {
    if (x.is_number_integer()) out.push_back(x.get<long>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

struct RemoteCatalog::Request {
  long id = 0;
  CatalogOp op = CatalogOp::kList;
  std::string tier;
  long step = -1;
  std::string node;  // where it was last sent; "" = not sent (or its agent was lost)
  double created = 0;
  double deadline = 0;  // NowMono; restarted at every send
  int sends = 0;
  std::string send_error;  // why the last send failed
  std::string What() const {
    std::string w = std::string("ckpt_") + CatalogOpName(op);
    if (op != CatalogOp::kList) w += " (" + tier + " step " + std::to_string(step) + ")";
    return w;
  }
};

RemoteCatalog::RemoteCatalog(CatalogConfig cfg, CatalogTransport transport, const Clock* clock,
                             RemoteCatalogTimeouts timeouts)
    : cfg_(std::move(cfg)), transport_(std::move(transport)), clock_(clock), timeouts_(timeouts) {}

RemoteCatalog::~RemoteCatalog() = default;

Status RemoteCatalog::Open() {
  if (!listed_ && pending_.empty()) Add(CatalogOp::kList, "", -1);  // first in line
  return Status::Ok();
}

bool RemoteCatalog::Settled() const {
  if (!listed_ || !done_.empty()) return false;
  for (const auto& [id, r] : pending_) {
    if (r->op != CatalogOp::kList) return false;
  }
  return true;
}

std::string RemoteCatalog::Waiting() const {
  std::string out;
  if (!listed_ && pending_.empty()) out = "the committed steps of each tier (not yet requested)";
  for (const auto& [id, r] : pending_) {
    out += (out.empty() ? "" : "; ") + r->What() +
           (r->node.empty() ? " waiting for a connected agent" +
                                  (r->send_error.empty() ? "" : " (" + r->send_error + ")")
                            : " sent to " + r->node);
  }
  return out;
}

double RemoteCatalog::Timeout(CatalogOp op) const {
  return op == CatalogOp::kList     ? timeouts_.list_s
         : op == CatalogOp::kCommit ? timeouts_.commit_s
                                    : timeouts_.download_s;
}

void RemoteCatalog::Add(CatalogOp op, const std::string& tier, long step) {
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->op = op;
  r->tier = tier;
  r->step = step;
  r->created = clock_->NowMono();
  r->deadline = r->created + Timeout(op);
  pending_[r->id] = std::move(r);
}

void RemoteCatalog::Commit(const std::string& tier, long step) {
  if (tier == "object" && cfg_.object_store.empty()) return;
  if (tier == "shared" && cfg_.shared_dir.empty()) return;
  Add(CatalogOp::kCommit, tier, step);
}

void RemoteCatalog::Download(long step) {
  if (cfg_.object_store.empty()) {
    CatalogEvent ev;
    ev.op = CatalogOp::kDownload;
    ev.tier = "object";
    ev.step = step;
    ev.status = FailedPrecondition("no object tier (checkpoint.objectStore is not set)");
    done_.push_back(std::move(ev));
    return;
  }
  Add(CatalogOp::kDownload, "object", step);
}

Result<long> RemoteCatalog::NewestCommitted(const std::string& tier, long max_step) {
  if (!listed_) {
    return FailedPrecondition("the committed steps of the " + tier +
                              " tier are not known yet: " + Waiting());
  }
  auto it = lists_.find(tier);
  if (it == lists_.end()) return -1L;
  for (auto s = it->second.rbegin(); s != it->second.rend(); ++s) {
    if (max_step < 0 || *s <= max_step) return *s;
  }
  return -1L;
}

Json RemoteCatalog::RequestMessage(const Request& r) const {
  Json m = {{"type", std::string("ckpt_") + CatalogOpName(r.op)}, {"id", r.id}};
  switch (r.op) {
    case CatalogOp::kList:
      m["dirs"] = Json::object();
      m["dirs"]["disk"] = cfg_.disk_dir;
      if (!cfg_.shared_dir.empty()) m["dirs"]["shared"] = cfg_.shared_dir;
      break;
    case CatalogOp::kCommit:
      m["tier"] = r.tier;
      m["step"] = r.step;
      m["world"] = cfg_.world;
      m["dir"] = r.tier == "shared" ? cfg_.shared_dir : cfg_.disk_dir;
      m["keep"] = cfg_.retain.keep;
      m["golden_every"] = cfg_.retain.golden_every;
      if (!cfg_.retain.pinned.empty()) m["pinned"] = cfg_.retain.pinned;
      if (r.tier == "object") m["object_store"] = cfg_.object_store;
      break;
    case CatalogOp::kDownload:
      m["step"] = r.step;
      m["dir"] = cfg_.disk_dir;
      m["object_store"] = cfg_.object_store;
      break;
  }
  return m;
}

void RemoteCatalog::Complete(long id, CatalogEvent ev) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  ev.op = it->second->op;
  ev.tier = it->second->tier;
  ev.step = it->second->step;
  ev.seconds = clock_->NowMono() - it->second->created;
  for (const auto& [tier, steps] : ev.committed) lists_[tier] = steps;
  if (ev.op == CatalogOp::kList && ev.status.ok()) listed_ = true;
  pending_.erase(it);
  done_.push_back(std::move(ev));
}

std::vector<CatalogEvent> RemoteCatalog::Poll() {
  const double now = clock_->NowMono();
  bool listing = false;
  for (const auto& [id, r] : pending_) listing = listing || r->op == CatalogOp::kList;
  if (!listed_ && !listing) Add(CatalogOp::kList, "", -1);
  const std::string target = transport_.designated ? transport_.designated() : "";
  std::vector<long> ids;
  for (const auto& [id, r] : pending_) ids.push_back(id);
  for (long id : ids) {
    Request& r = *pending_.at(id);
    if (now > r.deadline) {
      CatalogEvent ev;
      ev.node = r.node;
      ev.status = DeadlineExceeded(
          r.node.empty() ? "no agent connected to run " + r.What() + " within " +
                               std::to_string(static_cast<int>(now - r.created)) + " s" +
                               (r.send_error.empty() ? "" : " (last send: " + r.send_error + ")")
                         : "no reply from " + r.node + " to " + r.What() + " within " +
                               std::to_string(static_cast<int>(Timeout(r.op))) + " s");
      Complete(id, std::move(ev));
      continue;
    }
    if (!r.node.empty() || target.empty()) continue;
    Status st = transport_.send(target, RequestMessage(r));
    if (!st.ok()) {
      r.send_error = target + ": " + st.ToString();
      continue;
    }
    r.node = target;
    r.sends++;
    r.deadline = now + Timeout(r.op);
  }
  std::vector<CatalogEvent> out;
  out.swap(done_);
  return out;
}

bool RemoteCatalog::OnMessage(const std::string& node, const Json& msg) {
  if (!msg.is_object() || !msg.contains("type") || msg["type"] != "ckpt_result") return false;
  auto id = JInt(msg, "id");
  if (!id.ok()) return true;
  auto it = pending_.find(*id);
  if (it == pending_.end() || it->second->node != node) return true;  // stale
  CatalogEvent ev;
  ev.node = node;
  const bool ok = msg.contains("ok") && msg["ok"].is_boolean() && msg["ok"].get<bool>();
  ev.status = ReplyStatus(msg, "");
  if (!ok && ev.status.ok()) ev.status = Internal(node + " reported a failure without an error");
  if (ok) ev.status = Status::Ok();
  ev.retain = ReplyStatus(msg, "retain_");
  if (msg.contains("removed")) ev.removed = LongList(msg["removed"]);
  if (msg.contains("committed") && msg["committed"].is_object()) {
    for (const auto& [tier, steps] : msg["committed"].items()) {
      if ((tier == "disk" || tier == "shared") && steps.is_array()) {
        ev.committed[tier] = LongList(steps);
      }
    }
  }
  Complete(*id, std::move(ev));
  return true;
}

void RemoteCatalog::OnAgentLost(const std::string& node) {
  for (auto& [id, r] : pending_) {
    if (r->node == node) r->node.clear();
  }
}

}  // namespace bulwark
