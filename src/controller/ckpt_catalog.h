// CheckpointCatalog: the controller's one seam to the checkpoint file tiers.
//
// The controller decides when a step is committed (every rank's shard reported
// durable), which steps exist for a resume, and when the object tier is restored into
// the disk tier; the catalog carries those orders out and reports back. Two
// implementations:
//  * LocalCatalog (NewLocalCatalog): the controller shares the agents' file system
//    (local backend). Every operation runs at once, in the calling thread, through an
//    injected ckpt::Env; its result is queued for the next Poll().
//  * RemoteCatalog: the controller cannot see `checkpoint.dir` or `sharedDir`
//    (Kubernetes: they exist only inside the agents' pods). Operations become
//    requests over the agent connections (docs/protocol.md "Checkpoint catalog") to a
//    designated agent — the one serving slot 0, else the lowest connected slot. Each
//    carries an id and a deadline; an unanswered request is re-sent to the next
//    designated agent when its agent is lost, and fails with DEADLINE_EXCEEDED when
//    the deadline passes. The loop never blocks on them.
// Both run the same ckpt/tier_ops.h code, so commit and retention decisions match.
//
// Threading: owned and called by the controller's thread only. Not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "ckpt/object_tier.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace bulwark {

enum class CatalogOp { kList, kCommit, kDownload };
const char* CatalogOpName(CatalogOp op);  // "list", "commit", "download"

// A completed catalog operation.
struct CatalogEvent {
  CatalogOp op = CatalogOp::kList;
  std::string tier;  // commit: "disk", "shared" or "object"; download: "object"; list: ""
  long step = -1;
  Status status;              // the operation itself
  Status retain;              // commit: the retention that followed (OK: clean or not run)
  std::vector<long> removed;  // commit: steps retention deleted
  // File tier ("disk", "shared") -> its committed steps after the operation; only the
  // tiers the operation listed (a failed commit lists none).
  std::map<std::string, std::vector<long>> committed;
  std::string node;    // agent that ran it; "" = the controller itself
  double seconds = 0;  // from the order to the result (NowMono)
};

struct CatalogConfig {
  std::string disk_dir;    // checkpoint.dir
  std::string shared_dir;  // checkpoint.sharedDir; "" = no shared tier
  int world = 1;           // ranks per step
  ckpt::RetainOptions retain;
  std::string object_store;  // checkpoint.objectStore URL; "" = no object tier
};

class CheckpointCatalog {
 public:
  virtual ~CheckpointCatalog() = default;
  // Prepares the file tiers and starts learning their committed steps. Local: creates
  // the disk directory and lists it (an error is the job's setup error). Remote: no
  // I/O; the first Poll sends the listing request once an agent is connected.
  virtual Status Open() = 0;
  // True when the committed lists are known, no commit or download is in flight and
  // every result has been taken by Poll(), so a resume step chosen now (or a success
  // declared now) reflects every commit the controller has ordered.
  virtual bool Settled() const = 0;
  // True once the committed lists are known (local: after Open). Until then only the
  // listing can keep the catalog unsettled indefinitely (it is asked again after each
  // failure); commits and downloads end by their deadlines.
  virtual bool Listed() const = 0;
  // What Settled() still waits for, for messages; "" when settled.
  virtual std::string Waiting() const = 0;
  // Orders the commit of `step` on `tier` ("disk", "shared" or "object"; the object
  // tier commits from the disk tier) followed by that tier's retention.
  virtual void Commit(const std::string& tier, long step) = 0;
  // Orders the download of committed `step` (and its dependencies) from the object
  // tier into the disk tier.
  virtual void Download(long step) = 0;
  // Newest step <= max_step (-1: any) committed on file tier `tier` ("disk" or
  // "shared"); -1 if none. Local: a fresh scan of the directory. Remote: from the
  // latest lists (the listing reply, then every commit and download reply).
  virtual Result<long> NewestCommitted(const std::string& tier, long max_step) = 0;
  // Operations completed since the last call, in completion order. Remote: also
  // sends pending requests, re-sends those of lost agents and applies deadlines.
  virtual std::vector<CatalogEvent> Poll() = 0;
  // The job resized: steps from now on are committed with `world` ranks' shards.
  virtual void SetWorld(int world) = 0;
  // The committed steps every later retention keeps (replay bundles need them).
  virtual void SetPinned(std::vector<long> steps) = 0;
};

// `env` (not owned; nullptr = ckpt::Env::Default()) serves every file access;
// `object` (not owned, may be null) is the controller's object tier; `clock` times
// the operations. All must outlive the catalog.
std::unique_ptr<CheckpointCatalog> NewLocalCatalog(CatalogConfig cfg, ckpt::Env* env,
                                                   ckpt::ObjectTier* object, const Clock* clock);

// How RemoteCatalog reaches agents; both are called from Poll() only.
struct CatalogTransport {
  // The node to send requests to now: the agent serving slot 0, else the lowest
  // connected slot; "" when none is connected.
  std::function<std::string()> designated;
  // Queues `msg` on `node`'s connection; an error means it was not sent.
  std::function<Status(const std::string& node, const Json& msg)> send;
};

struct RemoteCatalogTimeouts {
  double list_s = 30;        // ckpt_list: reads COMMIT/MANIFEST of every step
  double commit_s = 120;     // ckpt_commit: verifies every shard's structure
  double download_s = 1800;  // ckpt_download: a whole checkpoint from S3
};

class RemoteCatalog : public CheckpointCatalog {
 public:
  RemoteCatalog(CatalogConfig cfg, CatalogTransport transport, const Clock* clock,
                RemoteCatalogTimeouts timeouts = {});
  ~RemoteCatalog() override;

  Status Open() override;
  void SetWorld(int world) override { cfg_.world = world; }
  void SetPinned(std::vector<long> steps) override { cfg_.retain.pinned = std::move(steps); }
  bool Settled() const override;
  bool Listed() const override { return listed_; }
  std::string Waiting() const override;
  void Commit(const std::string& tier, long step) override;
  void Download(long step) override;
  Result<long> NewestCommitted(const std::string& tier, long max_step) override;
  std::vector<CatalogEvent> Poll() override;

  // A message from agent `node`: returns true if it was a `ckpt_result` (consumed,
  // whether it matched a request or was stale); false for any other type. A reply
  // from another node than the one the request was last sent to is stale.
  bool OnMessage(const std::string& node, const Json& msg);
  // `node`'s connection is gone: its unanswered requests go to the next designated
  // agent on the next Poll().
  void OnAgentLost(const std::string& node);

 private:
  struct Request;
  void Add(CatalogOp op, const std::string& tier, long step);
  double Timeout(CatalogOp op) const;
  Json RequestMessage(const Request& r) const;
  void Complete(long id, CatalogEvent ev);

  CatalogConfig cfg_;
  CatalogTransport transport_;
  const Clock* clock_;
  RemoteCatalogTimeouts timeouts_;
  long next_id_ = 1;
  std::map<long, std::unique_ptr<Request>> pending_;
  std::vector<CatalogEvent> done_;
  bool listed_ = false;
  std::map<std::string, std::vector<long>> lists_;
};

}  // namespace bulwark
