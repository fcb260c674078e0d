// Background persister: the node agent's half of the checkpoint engine.
//
// The trainer stages a snapshot into its rank's ring (staging.h) and tells the
// agent (`staged` datagram); the agent hands it to OnStaged. A single background
// thread, at idle CPU and I/O priority so training keeps the cores (raised to normal
// priority while it is behind: see PersistConfig::low_priority), then
//   1. seals the slot (per-chunk xxh3) so the memory tier can restore it, unless the
//      trainer's Stager sealed it as it copied (the usual case), and
//   2. if the step is due for disk, writes this rank's shard from the pinned slot
//      to the disk tier (hashing each chunk as it writes it, which also seals the
//      slot), uploads it to the object tier when due, writes the shared tier if
//      configured, with replicated tensors deduplicated across ranks and unchanged
//      chunks referencing the newest committed step, and reports each durable
//      shard through `on_event`;
//   3. pushes the sealed snapshot to the peer agent's memory, if configured, in
//      rounds that take at most PersistConfig::peer_push_share of the time.
// Commit (MANIFEST + COMMIT) is the controller's: it alone knows when every rank
// of a step is durable on a tier.
// Pending work coalesces per rank: a newer staged step replaces an older one not
// yet started, so a slow disk never queues unbounded work (skipped persists are
// reported with a non-OK status).
//
// Thread-safety: OnStaged, Inventory and the destructor may be called from any
// thread; `on_event` runs on the persister thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "common/clock.h"
#include "common/status.h"

namespace bulwark::ckpt {

class Snapshot;  // staging.h

struct PersistConfig {
  std::string staging_dir;
  std::string disk_dir;    // required for persisting
  std::string shared_dir;  // optional second file tier
  int world = 1;
  bool dedup_replicated = true;
  bool incremental = true;
  // The persister thread runs at SCHED_IDLE with the idle I/O class, so it takes only
  // cores the trainers leave free. On a node whose trainers keep every core busy such a
  // thread may not run at all, so durability is bounded instead: once it is behind (a
  // queued request is about to be replaced or dropped, or one has waited
  // escalate_after_s) OnStaged raises it to SCHED_OTHER until its queues are empty.
  // Where the process may not raise a thread out of SCHED_IDLE (no CAP_SYS_NICE, an
  // RLIMIT_NICE below 20), the thread runs at nice 10 instead, never raised.
  bool low_priority = true;
  double escalate_after_s = 2.0;
  // Peer replication (peer.h): every sealed snapshot is pushed to this PeerServer
  // (newest wins when pushes fall behind). peer_port 0 = off.
  std::string peer_host = "127.0.0.1";
  int peer_port = 0;
  double peer_timeout_s = 10;  // per wait for progress (peer.h)
  double peer_backoff_s = 10;  // pushes pause this long after a failed one
  // Pushes go in rounds, one step each: the first sealed snapshot of a step pushed
  // opens a round, and that step's snapshots of the node's other ranks join it, so
  // the peer holds a step every rank of the node shares. A round that took t seconds
  // (wall, first push's start to last push's end) delays the next by t / share, so
  // pushing takes at most `share` of the time whatever the snapshot size and cadence;
  // the snapshots sealed meanwhile stay in memory only. 1 = every sealed snapshot.
  double peer_push_share = 1;
  const Clock* clock = nullptr;  // for the pause and rounds; null = SystemClock. Not owned.
  // Object tier: once a shard is durable on disk_dir, `object_upload(disk_dir, step,
  // rank, world)` uploads it, for steps divisible by object_interval (0 = every
  // persisted step). Such a step is written incrementally only against a base that
  // `object_newest(step - 1)` (newest step committed on the object tier, -1 none)
  // confirms is committed there too, so the object tier never lacks a dependency.
  // Both run on the persister thread. Unset = no object tier.
  std::function<Status(const std::string& root, long step, int rank, int world)> object_upload;
  std::function<Result<long>(long max_step)> object_newest;
  long object_interval = 0;
};

struct PersistEvent {
  int rank = 0;
  long step = 0;
  std::string tier;  // "disk", "shared", "object" or "peer" (a push to the peer)
  Status status;
  // Not a failure: the step of the rank that replaced this queued persist before its
  // write began (the disk is slower than the cadence); -1 otherwise. `status` says so.
  long superseded_by = -1;
  uint64_t bytes = 0;  // bytes written to the tier
  double seconds = 0;  // write + fsync wall time
  double hash_s = 0;   // sealing time (chunk checksums)
};

// Whether `snap` is a state every rank of its job holds alike, so that another rank may
// restore from it (a replacement rank, when its own copy is older): every tensor but the
// objects blob (kObjectsBlobName) replicated, at least one such tensor (the trainer
// declared the state data-parallel), and the slot sealed. Its digest, the XXH3 of
// the blob's chunk hashes, says whether two ranks' non-tensor state is the same; nullopt
// when the snapshot is not portable (or has no blob: not bulwark.checkpoint's).
std::optional<uint64_t> PortableDigest(const Snapshot& snap);

class Persister {
 public:
  Persister(PersistConfig cfg, Env* env, std::function<void(const PersistEvent&)> on_event);
  ~Persister();  // finishes the write in progress, drops the rest, joins
  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  // Non-blocking (a persist request pins the slot right away, a CAS). `persist`:
  // the step is due for the disk tier. `generation`: the ring's, from the report.
  void OnStaged(int rank, int slot, uint64_t seq, uint64_t generation, long step, bool persist);
  // Blocks until every queued request is done (tests, shutdown), at most timeout_s.
  bool Drain(double timeout_s);
  // While paused, sealed snapshots are not pushed to the peer (seals and persists go
  // on). The agent pauses between an attempt's stop and the next launch: the replicas
  // the peer reported then are what the next attempt may fetch, and a push of the old
  // attempt's newer steps would evict them (its ranks may have run ahead of the step
  // every rank shares). A push in flight finishes. Any thread.
  void PausePushes(bool paused);
  // Steps restorable from memory per rank (seals staged slots first).
  std::map<int, std::vector<long>> Inventory(const std::vector<int>& ranks);
  // Of those, the steps any rank may restore (PortableDigest), with their digests:
  // rank -> step -> digest.
  std::map<int, std::map<long, uint64_t>> Portable(const std::vector<int>& ranks);

  // The persister thread's priority (PersistConfig::low_priority), for tests and logs.
  struct Priority {
    int thread_id = 0;    // its kernel tid; 0 until it started and set its priority
    bool idle = false;    // lowered to SCHED_IDLE (and may be raised)
    bool raised = false;  // raised to SCHED_OTHER now, being behind
    int raises = 0;       // times it was raised
  };
  Priority CurrentPriority();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::ckpt
