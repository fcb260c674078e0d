#include "agent/ckpt_ops.h"

#include "ckpt/tier_ops.h"
#include "common/json_util.h"

namespace bulwark {
namespace {

// The reply's result fields from a tier operation; `tier` names r.committed's tier.
void PutResult(const ckpt::TierOpResult& r, const std::string& tier, Json* out) {
  (*out)["ok"] = r.status.ok();
  if (!r.status.ok()) {
    (*out)["code"] = CodeName(r.status.code());
    (*out)["error"] = r.status.message();
  }
  if (!r.retain.ok()) {
    (*out)["retain_code"] = CodeName(r.retain.code());
    (*out)["retain_error"] = r.retain.message();
  }
  (*out)["removed"] = r.removed;
  if (r.listed) (*out)["committed"] = Json{{tier, r.committed}};
}

// A reply reporting `st` (bad input or an unusable object tier).
Json Failed(Json out, const Status& st) {
  out["ok"] = false;
  out["code"] = CodeName(st.code());
  out["error"] = st.message();
  return out;
}

}  // namespace

bool IsCatalogRequest(const std::string& type) {
  return type == "ckpt_list" || type == "ckpt_commit" || type == "ckpt_download";
}

Result<Json> RunCatalogRequest(const Json& req, ckpt::Env* env, const ObjectTierOpener& objects) {
  const std::string type =
      req.contains("type") && req["type"].is_string() ? req["type"].get<std::string>() : "";
  const std::string what = "message '" + type + "'";
  auto id = JInt(req, "id");
  if (!id.ok()) {
    return InvalidArgument(what + ": " + id.status().message() +
                           "; every catalog request needs an integer id for its reply");
  }
  Json out = {{"type", "ckpt_result"}, {"id", *id}, {"op", type.substr(type.find('_') + 1)}};
  if (type == "ckpt_list") {
    if (!req.contains("dirs") || !req["dirs"].is_object()) {
      return Failed(out, InvalidArgument(what + ": field 'dirs' must be an object "
                                                "{\"disk\": DIR, \"shared\": DIR}"));
    }
    Json committed = Json::object();
    for (const auto& [tier, dir] : req["dirs"].items()) {
      if ((tier != "disk" && tier != "shared") || !dir.is_string() ||
          dir.get<std::string>().empty()) {
        return Failed(out, InvalidArgument(what + ": field 'dirs." + tier +
                                           "' must be a non-empty path and the tier disk or "
                                           "shared"));
      }
      ckpt::TierOpResult r = ckpt::ListFileTier(env, dir.get<std::string>());
      if (!r.status.ok()) {
        return Failed(out,
                      r.status.Annotate("listing the " + tier + " tier " + dir.get<std::string>()));
      }
      committed[tier] = r.committed;
    }
    out["ok"] = true;
    out["committed"] = committed;
    return out;
  }
  if (type != "ckpt_commit" && type != "ckpt_download") {
    return Failed(out, InvalidArgument("unknown catalog request type '" + type +
                                       "'; use ckpt_list, ckpt_commit or ckpt_download"));
  }
  auto step = JInt(req, "step");
  auto dir = JStr(req, "dir");
  Status bad = !step.ok() ? step.status() : dir.status();
  if (bad.ok() && *step < 0) bad = InvalidArgument("field 'step' must be >= 0");
  if (bad.ok() && dir->empty()) bad = InvalidArgument("field 'dir' must be a directory path");
  if (!bad.ok()) return Failed(out, bad.Annotate(what));
  out["step"] = *step;
  if (type == "ckpt_download") {
    auto url = JStr(req, "object_store");
    if (!url.ok()) return Failed(out, url.status().Annotate(what));
    Result<ckpt::ObjectTier*> ot = objects(*url);
    if (!ot.ok()) return Failed(out, ot.status().Annotate("object tier " + *url));
    out["tier"] = "object";
    PutResult(ckpt::DownloadToFileTier(*ot, *step, env, *dir), "disk", &out);
    return out;
  }
  auto tier = JStr(req, "tier");
  auto world = JInt(req, "world");
  auto keep = JIntOr(req, "keep", 3);
  auto golden = JIntOr(req, "golden_every", 0);
  bad = !tier.ok()    ? tier.status()
        : !world.ok() ? world.status()
        : !keep.ok()  ? keep.status()
                      : golden.status();
  if (bad.ok() && *tier != "disk" && *tier != "shared" && *tier != "object") {
    bad = InvalidArgument("field 'tier' must be disk, shared or object (got '" + *tier + "')");
  }
  if (bad.ok() && (*world < 1 || *keep < 1 || *golden < 0)) {
    bad = InvalidArgument("fields 'world' and 'keep' must be >= 1 and 'golden_every' >= 0");
  }
  if (!bad.ok()) return Failed(out, bad.Annotate(what));
  out["tier"] = *tier;
  ckpt::RetainOptions retain{static_cast<int>(*keep), *golden, {}};
  if (req.contains("pinned")) {
    if (!req["pinned"].is_array()) {
      return Failed(out, InvalidArgument("field 'pinned' must be a list of steps").Annotate(what));
    }
    for (const Json& s : req["pinned"]) {
      if (!s.is_number_integer()) {
        return Failed(out,
                      InvalidArgument("field 'pinned' must list integer steps, got " + s.dump())
                          .Annotate(what));
      }
      retain.pinned.push_back(s.get<long>());
    }
  }
  if (*tier == "object") {
    auto url = JStr(req, "object_store");
    if (!url.ok()) return Failed(out, url.status().Annotate(what));
    Result<ckpt::ObjectTier*> ot = objects(*url);
    if (!ot.ok()) return Failed(out, ot.status().Annotate("object tier " + *url));
    PutResult(ckpt::CommitObjectTier(*ot, *dir, *step, retain), *tier, &out);
    return out;
  }
  PutResult(ckpt::CommitFileTier(env, *dir, *step, static_cast<int>(*world), retain), *tier, &out);
  return out;
}

CatalogWorker::CatalogWorker(std::function<void(Json)> reply, ckpt::Env* env)
    : reply_(std::move(reply)), env_(env ? env : ckpt::Env::Default()) {
  thread_ = std::thread([this] { Loop(); });
}

CatalogWorker::~CatalogWorker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

Status CatalogWorker::Submit(Json req) {
  auto id = JInt(req, "id");
  if (!id.ok()) {
    return InvalidArgument("catalog request without a usable id: " + id.status().message());
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(req));
  }
  cv_.notify_one();
  return Status::Ok();
}

Result<ckpt::ObjectTier*> CatalogWorker::OpenObjectTier(const std::string& url) {
  auto it = objects_.find(url);
  if (it != objects_.end()) return it->second.get();
  BW_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::ObjectTier> ot, ckpt::ObjectTier::OpenUrl(url, env_));
  ckpt::ObjectTier* raw = ot.get();
  objects_[url] = std::move(ot);
  return raw;
}

void CatalogWorker::Loop() {
  const ObjectTierOpener open = [this](const std::string& url) { return OpenObjectTier(url); };
  while (true) {
    Json req;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      req = std::move(queue_.front());
      queue_.pop_front();
    }
    Result<Json> reply = RunCatalogRequest(req, env_, open);
    if (reply.ok()) reply_(std::move(reply).value());
  }
}

}  // namespace bulwark
