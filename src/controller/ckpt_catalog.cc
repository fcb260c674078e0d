// CatalogOpName and the local catalog: every operation runs at once in the
// controller's thread, on the file system the controller shares with its agents.
#include "controller/ckpt_catalog.h"

#include "ckpt/tier_ops.h"

namespace bulwark {

const char* CatalogOpName(CatalogOp op) {
  switch (op) {
    case CatalogOp::kList:
      return "list";
    case CatalogOp::kCommit:
      return "commit";
    case CatalogOp::kDownload:
      return "download";
  }
  return "?";
}

namespace {

class LocalCatalog : public CheckpointCatalog {
 public:
  LocalCatalog(CatalogConfig cfg, ckpt::Env* env, ckpt::ObjectTier* object, const Clock* clock)
      : cfg_(std::move(cfg)),
        env_(env ? env : ckpt::Env::Default()),
        object_(object),
        clock_(clock) {}

  void SetWorld(int world) override { cfg_.world = world; }
  void SetPinned(std::vector<long> steps) override { cfg_.retain.pinned = std::move(steps); }
  Status Open() override {
    Status mk = env_->MkdirAll(cfg_.disk_dir);
    if (!mk.ok()) return Internal("create checkpoint dir " + cfg_.disk_dir + ": " + mk.message());
    const double t0 = clock_->NowMono();
    ckpt::TierOpResult r = ckpt::ListFileTier(env_, cfg_.disk_dir);
    BW_RETURN_IF_ERROR(r.status);
    Queue(CatalogOp::kList, "", -1, std::move(r), "disk", t0);
    return Status::Ok();
  }

  bool Settled() const override { return done_.empty(); }
  bool Listed() const override { return true; }
  std::string Waiting() const override { return ""; }

  void Commit(const std::string& tier, long step) override {
    const double t0 = clock_->NowMono();
    if (tier == "object") {
      if (!object_) return;
      Queue(CatalogOp::kCommit, tier, step,
            ckpt::CommitObjectTier(object_, cfg_.disk_dir, step, cfg_.retain), "", t0);
      return;
    }
    const std::string& root = tier == "shared" ? cfg_.shared_dir : cfg_.disk_dir;
    Queue(CatalogOp::kCommit, tier, step,
          ckpt::CommitFileTier(env_, root, step, cfg_.world, cfg_.retain), tier, t0);
  }

  void Download(long step) override {
    const double t0 = clock_->NowMono();
    ckpt::TierOpResult r;
    if (object_) {
      r = ckpt::DownloadToFileTier(object_, step, env_, cfg_.disk_dir);
    } else {
      r.status = FailedPrecondition("no object tier (checkpoint.objectStore is not set)");
    }
    Queue(CatalogOp::kDownload, "object", step, std::move(r), "disk", t0);
  }

  Result<long> NewestCommitted(const std::string& tier, long max_step) override {
    const std::string& root = tier == "shared" ? cfg_.shared_dir : cfg_.disk_dir;
    if (root.empty()) return -1L;
    return ckpt::NewestCommitted(env_, root, max_step);
  }

  std::vector<CatalogEvent> Poll() override {
    std::vector<CatalogEvent> out;
    out.swap(done_);
    return out;
  }

 private:
  // Queues the result of an operation; `listed_tier` names the tier r.committed lists.
  void Queue(CatalogOp op, const std::string& tier, long step, ckpt::TierOpResult r,
             const std::string& listed_tier, double t0) {
    CatalogEvent ev;
    ev.op = op;
    ev.tier = tier;
    ev.step = step;
    ev.status = std::move(r.status);
    ev.retain = std::move(r.retain);
    ev.removed = std::move(r.removed);
    if (r.listed && !listed_tier.empty()) ev.committed[listed_tier] = std::move(r.committed);
    ev.seconds = clock_->NowMono() - t0;
    done_.push_back(std::move(ev));
  }

  CatalogConfig cfg_;
  ckpt::Env* env_;
  ckpt::ObjectTier* object_;
  const Clock* clock_;
  std::vector<CatalogEvent> done_;
};

}  // namespace

std::unique_ptr<CheckpointCatalog> NewLocalCatalog(CatalogConfig cfg, ckpt::Env* env,
                                                   ckpt::ObjectTier* object, const Clock* clock) {
  return std::make_unique<LocalCatalog>(std::move(cfg), env, object, clock);
}

}  // namespace bulwark
