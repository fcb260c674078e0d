#include "ckpt/persister.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "ckpt/format.h"
#include "ckpt/peer.h"
#include "ckpt/staging.h"
#include "common/clock.h"

namespace bulwark::ckpt {
namespace {

struct Request {
  int rank = 0;
  int slot = 0;
  uint64_t seq = 0;
  long step = 0;
  bool persist = false;
  double queued_at = 0;            // Clock::NowMono when OnStaged took it
  std::shared_ptr<Snapshot> snap;  // persist: pinned when the trainer reported it
};

// Seal requests kept per rank while the persister is behind.
constexpr int kMaxQueuedSeals = 4;

// I/O priorities: ioprio_set(IOPRIO_WHO_PROCESS, tid, class << 13 | level); a tid names
// one thread (Linux).
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioIdle = 3 << 13;
constexpr int kIoprioBestEffortDefault = (2 << 13) | 4;
constexpr int kIoprioBestEffortLowest = (2 << 13) | 7;
// The nice value of a persister that could not be raised again once idle.
constexpr int kFallbackNice = 10;

// Sets thread `tid` (0 = the caller) to SCHED_IDLE or back to SCHED_OTHER, with the
// matching I/O class. True if the CPU policy was set.
bool SetIdle(pid_t tid, bool idle) {
  sched_param p{};
  const bool ok = ::sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &p) == 0;
  (void)::syscall(SYS_ioprio_set, kIoprioWhoProcess, tid,
                  idle ? kIoprioIdle : kIoprioBestEffortDefault);  // best effort: CFQ/BFQ only
  return ok;
}

// Whether this process may move a thread from SCHED_IDLE back to SCHED_OTHER
// (CAP_SYS_NICE, or an RLIMIT_NICE that allows nice 0): tried on a throwaway thread.
bool CanLeaveIdle() {
  bool ok = false;
  std::thread([&ok] {
    sched_param p{};
    ok = ::sched_setscheduler(0, SCHED_IDLE, &p) == 0 &&
         ::sched_setscheduler(0, SCHED_OTHER, &p) == 0;
  }).join();
  return ok;
}

}  // namespace

struct Persister::Impl {
  PersistConfig cfg;
  Env* env;
  std::function<void(const PersistEvent&)> on_event;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Request> seal_q;        // seal-only requests, in order
  std::map<int, Request> persist_q;  // newest persist request per rank
  bool busy = false;
  bool stop = false;
  double busy_queued_at = 0;  // the request in progress's queued_at
  // Priority (see PersistConfig::low_priority): `idle` while the thread runs at
  // SCHED_IDLE and may be raised; `raised` while OnStaged has raised it because it
  // fell behind, until its queues are empty again.
  pid_t tid = 0;
  bool idle = false;
  bool raised = false;
  int raises = 0;
  std::map<int, std::shared_ptr<RingReader>> rings;  // guarded by mu
  double peer_paused_until = 0;                      // persister thread only
  // The current round of pushes (PersistConfig::peer_push_share); persister thread only.
  long round_step = -1;
  double round_start = 0;                  // Clock::NowMono at its first push
  double round_push_s = 0;                 // its pushes' wall seconds so far
  double next_round_at = 0;                // no new round before this
  std::atomic<bool> pushes_paused{false};  // PausePushes
  std::thread thread;

  // Requires mu. Reopens when the trainer regrew the ring (new generation).
  std::shared_ptr<RingReader> Ring(int rank, uint64_t generation) {
    auto& slot = rings[rank];
    if (slot && (generation == 0 || slot->generation() == generation)) return slot;
    Result<std::unique_ptr<RingReader>> r = RingReader::Open(RingPath(cfg.staging_dir, rank));
    if (!r.ok()) return nullptr;
    slot = std::move(*r);
    return slot;
  }

  void Emit(const PersistEvent& e) {
    if (on_event) on_event(e);
  }

  // Writes snap's shard to `root`. An unsealed snapshot is hashed while it is
  // written and then sealed with those hashes (one pass over the bytes).
  void WriteTier(const std::string& tier, const std::string& root, Snapshot& snap, double hash_s) {
    PersistEvent e;
    e.rank = snap.rank();
    e.step = snap.step();
    e.tier = tier;
    e.hash_s = hash_s;
    WriteOptions o;
    o.chunk_size = snap.chunk_size();
    o.dedup_replicated = cfg.dedup_replicated;
    Result<ShardIndex> prev = Status(Code::kNotFound, "");
    if (cfg.incremental) {
      Result<long> base = NewestCommitted(env, root, snap.step() - 1);
      if (base.ok() && *base >= 0 && tier == "disk" && ObjectDue(snap.step())) {
        // The object tier needs every step this one references committed there.
        Result<long> on_object = cfg.object_newest(snap.step() - 1);
        if (!on_object.ok() || *on_object != *base) base = -1;
      }
      if (base.ok() && *base >= 0) {
        Result<Manifest> m = ReadCommitted(env, root, *base);
        if (m.ok() && m->world == snap.world()) {
          prev = ReadShardIndex(env, root, *base, snap.rank(), snap.world());
        }
      }
      if (prev.ok()) o.previous = &*prev;
    }
    ShardStats st;
    if (snap.sealed()) {
      e.status =
          WriteShard(env, root, snap.step(), snap.rank(), snap.world(), snap.tensors(), o, &st);
    } else {
      std::vector<TensorView> views = snap.tensors();
      for (TensorView& v : views) v.chunk_hashes = nullptr;
      e.status = WriteShard(env, root, snap.step(), snap.rank(), snap.world(), views, o, &st);
      if (e.status.ok()) e.status = snap.AdoptHashes(st.chunk_hashes);
      e.hash_s += st.hash_s;
    }
    if (!snap.sealed() && e.status.ok()) e.status = snap.EnsureSealed(&e.hash_s);
    e.bytes = st.written_bytes;
    e.seconds = st.write_s;
    Emit(e);
    if (e.status.ok() && tier == "disk" && ObjectDue(snap.step())) {
      PersistEvent u;
      u.rank = snap.rank();
      u.step = snap.step();
      u.tier = "object";
      const double t0 = SystemClock::Get()->NowMono();
      u.status = cfg.object_upload(root, snap.step(), snap.rank(), snap.world());
      u.seconds = SystemClock::Get()->NowMono() - t0;
      u.bytes = st.file_bytes;
      Emit(u);
    }
  }

  bool ObjectDue(long step) const {
    return cfg.object_upload && cfg.object_newest &&
           (cfg.object_interval <= 0 || step % cfg.object_interval == 0);
  }

  // Pushes a sealed snapshot to the peer and reports the outcome. After a failure
  // pushes pause for peer_backoff_s, so a dead or hung peer costs this thread (and
  // the seals and persists queued behind it) at most one timeout per pause.
  // Rounds: see PersistConfig::peer_push_share.
  void PushToPeer(const Snapshot& snap) {
    if (cfg.peer_port <= 0 || pushes_paused.load()) return;
    const Clock* clk = cfg.clock ? cfg.clock : SystemClock::Get();
    const double now = clk->NowMono();
    if (now < peer_paused_until) return;
    if (snap.step() != round_step) {
      if (now < next_round_at) return;  // the budget's gap: this step stays on the node
      round_step = snap.step();
      round_start = now;
      round_push_s = 0;
    }
    PersistEvent e;
    e.rank = snap.rank();
    e.step = snap.step();
    e.tier = "peer";
    e.status = PushSnapshot(cfg.peer_host, cfg.peer_port, snap, cfg.peer_timeout_s);
    const double end = clk->NowMono();
    e.seconds = end - now;
    round_push_s += e.seconds;
    if (cfg.peer_push_share > 0 && cfg.peer_push_share < 1) {
      next_round_at = round_start + round_push_s / cfg.peer_push_share;
    }
    if (!e.status.ok()) peer_paused_until = end + cfg.peer_backoff_s;
    e.bytes = snap.bytes();
    Emit(e);
  }

  void Handle(const Request& r) {
    double hash_s = 0;
    if (!r.persist) {
      std::shared_ptr<RingReader> ring;
      {
        std::lock_guard<std::mutex> l(mu);
        ring = Ring(r.rank, 0);
      }
      if (!ring) return;
      Result<std::unique_ptr<Snapshot>> snap = ring->Pin(r.slot, r.seq, &hash_s, /*seal=*/true);
      // The trainer needs a free slot besides its newest snapshot, so the agent may
      // pin at most slots - 2 at once. With 3 slots and a persist queued (its slot
      // is pinned already) a push would pin a second one: skip it; the persist
      // pushes its snapshot when written. 4 slots (the default) allow both.
      bool persist_queued = false;
      {
        std::lock_guard<std::mutex> l(mu);
        persist_queued = persist_q.count(r.rank) > 0;
      }
      if (snap.ok() && (!persist_queued || ring->slots() >= 4)) PushToPeer(**snap);
      return;  // unpins
    }
    if (cfg.disk_dir.empty() && cfg.shared_dir.empty()) {
      Status st = r.snap->EnsureSealed(&hash_s);
      if (!st.ok()) {
        PersistEvent e;
        e.rank = r.rank;
        e.step = r.step;
        e.tier = "disk";
        e.status = st;
        Emit(e);
        return;
      }
      PushToPeer(*r.snap);
      return;
    }
    if (!cfg.disk_dir.empty()) WriteTier("disk", cfg.disk_dir, *r.snap, hash_s);
    if (!cfg.shared_dir.empty()) WriteTier("shared", cfg.shared_dir, *r.snap, 0);
    if (r.snap->sealed()) PushToPeer(*r.snap);
  }

  // Requires mu and a non-empty seal_q. Seals step by step across ranks: the newest
  // step S that every rank with a queued seal has staged, one rank at a time, and
  // drops older requests. When the thread falls behind, whole steps are skipped for
  // all of this node's ranks alike, so the snapshots pushed to the peer line up and
  // the ranks share a restorable step (coalescing per rank would not).
  Request TakeSeal() {
    std::map<int, long> newest;
    for (const Request& q : seal_q) newest[q.rank] = std::max(newest[q.rank], q.step);
    long common = LONG_MAX;
    for (const auto& [rank, step] : newest) common = std::min(common, step);
    for (auto it = seal_q.begin(); it != seal_q.end();) {
      it = it->step < common ? seal_q.erase(it) : it + 1;
    }
    for (auto it = seal_q.begin(); it != seal_q.end(); ++it) {
      if (it->step == common) {
        Request r = *it;
        seal_q.erase(it);
        return r;
      }
    }
    Request r = seal_q.front();  // unreachable: some rank's newest is `common`
    seal_q.pop_front();
    return r;
  }

  double Now() const { return (cfg.clock ? cfg.clock : SystemClock::Get())->NowMono(); }

  // Sets this thread's priority before its first request: SCHED_IDLE where it can be
  // raised again, else nice 10 and the lowest best-effort I/O level, which cannot be
  // starved (an idle thread that could not be raised might never persist on a node
  // whose cores the trainers keep busy).
  // `self`: this thread's tid, which Loop publishes only after this returns
  // (CurrentPriority's contract; RaiseIfBehind waits for it).
  void LowerSelf(pid_t self) {
    const bool can_raise = CanLeaveIdle();
    std::lock_guard<std::mutex> l(mu);
    if (can_raise && SetIdle(0, true)) {
      idle = true;
      return;
    }
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(self), kFallbackNice);
    (void)::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, kIoprioBestEffortLowest);
  }

  // Requires mu. Raises the idle thread to SCHED_OTHER when it has fallen behind:
  // `skipped` (OnStaged is about to drop or replace a queued request), or a request
  // has waited escalate_after_s. Called on the caller's thread, since a starved thread
  // cannot raise itself.
  void RaiseIfBehind(bool skipped) {
    if (!idle || raised || tid == 0) return;
    double oldest = busy ? busy_queued_at : Now();
    for (const Request& q : seal_q) oldest = std::min(oldest, q.queued_at);
    for (const auto& [rank, q] : persist_q) oldest = std::min(oldest, q.queued_at);
    if (!skipped && Now() - oldest < cfg.escalate_after_s) return;
    if (SetIdle(tid, false)) {
      raised = true;
      ++raises;
    }
  }

  void Loop() {
    const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
    if (cfg.low_priority) LowerSelf(self);
    std::unique_lock<std::mutex> l(mu);
    tid = self;
    while (true) {
      cv.wait(l, [&] { return stop || !seal_q.empty() || !persist_q.empty(); });
      if (stop) break;
      Request r;
      if (!persist_q.empty()) {
        r = persist_q.begin()->second;
        persist_q.erase(persist_q.begin());
      } else {
        r = TakeSeal();
      }
      busy = true;
      busy_queued_at = r.queued_at;
      l.unlock();
      Handle(r);
      l.lock();
      busy = false;
      if (raised && seal_q.empty() && persist_q.empty() && SetIdle(0, true)) raised = false;
      cv.notify_all();
    }
  }
};

Persister::Persister(PersistConfig cfg, Env* env, std::function<void(const PersistEvent&)> on_event)
    : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->env = env;
  impl_->on_event = std::move(on_event);
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

Persister::~Persister() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

void Persister::OnStaged(int rank, int slot, uint64_t seq, uint64_t generation, long step,
                         bool persist) {
  Request r;
  r.rank = rank;
  r.slot = slot;
  r.seq = seq;
  r.step = step;
  r.persist = persist;
  r.queued_at = impl_->Now();
  std::lock_guard<std::mutex> l(impl_->mu);
  if (persist) {
    // Pin now, before the trainer's next saves can reuse the slot.
    std::shared_ptr<RingReader> ring = impl_->Ring(rank, generation);
    Result<std::unique_ptr<Snapshot>> snap =
        ring ? ring->Pin(slot, seq, nullptr, /*seal=*/false)
             : Result<std::unique_ptr<Snapshot>>(
                   NotFound("staging ring of rank " + std::to_string(rank) + " is missing"));
    if (!snap.ok()) {
      PersistEvent e;
      e.rank = rank;
      e.step = step;
      e.tier = "disk";
      e.status = snap.status().Annotate("staged snapshot of rank " + std::to_string(rank) +
                                        " step " + std::to_string(step) + " was not persisted");
      if (impl_->on_event) impl_->on_event(e);
      return;
    }
    r.snap = std::move(*snap);
    auto it = impl_->persist_q.find(rank);
    if (it != impl_->persist_q.end() && impl_->on_event) {
      PersistEvent e;
      e.rank = rank;
      e.step = it->second.step;
      e.tier = "disk";
      e.status = Unavailable("persist of step " + std::to_string(it->second.step) +
                             " skipped: step " + std::to_string(step) +
                             " was staged before it started (disk slower than the cadence)");
      e.superseded_by = step;
      impl_->on_event(e);
    }
    impl_->RaiseIfBehind(/*skipped=*/it != impl_->persist_q.end());
    impl_->persist_q[rank] = r;
  } else {
    // Keep a rank's newest few seals (TakeSeal picks the step all ranks share);
    // older ones are dropped, their slots likely reused by the trainer already.
    int mine = 0;
    for (auto it = impl_->seal_q.rbegin(); it != impl_->seal_q.rend(); ++it) {
      mine += it->rank == rank ? 1 : 0;
    }
    impl_->RaiseIfBehind(/*skipped=*/mine >= kMaxQueuedSeals);
    if (mine >= kMaxQueuedSeals) {
      for (auto it = impl_->seal_q.begin(); it != impl_->seal_q.end(); ++it) {
        if (it->rank == rank) {
          impl_->seal_q.erase(it);
          break;
        }
      }
    }
    impl_->seal_q.push_back(r);
  }
  impl_->cv.notify_all();
}

bool Persister::Drain(double timeout_s) {
  std::unique_lock<std::mutex> l(impl_->mu);
  return impl_->cv.wait_for(l, std::chrono::duration<double>(timeout_s), [&] {
    return impl_->seal_q.empty() && impl_->persist_q.empty() && !impl_->busy;
  });
}

void Persister::PausePushes(bool paused) { impl_->pushes_paused.store(paused); }

Persister::Priority Persister::CurrentPriority() {
  std::lock_guard<std::mutex> l(impl_->mu);
  return {impl_->tid, impl_->idle, impl_->raised, impl_->raises};
}

std::map<int, std::vector<long>> Persister::Inventory(const std::vector<int>& ranks) {
  std::map<int, std::vector<long>> out;
  for (int r : ranks) {
    Result<std::unique_ptr<RingReader>> ring =
        RingReader::Open(RingPath(impl_->cfg.staging_dir, r));
    out[r] = ring.ok() ? (*ring)->Steps() : std::vector<long>{};
  }
  return out;
}

std::map<int, std::map<long, uint64_t>> Persister::Portable(const std::vector<int>& ranks) {
  std::map<int, std::map<long, uint64_t>> out;
  for (int r : ranks) {
    Result<std::unique_ptr<RingReader>> ring =
        RingReader::Open(RingPath(impl_->cfg.staging_dir, r));
    if (!ring.ok()) continue;
    for (long step : (*ring)->Steps()) {
      Result<std::unique_ptr<Snapshot>> snap = (*ring)->PinStep(step);
      if (!snap.ok()) continue;  // taken by the trainer meanwhile
      if (auto d = PortableDigest(**snap)) out[r][step] = *d;
    }
  }
  return out;
}

std::optional<uint64_t> PortableDigest(const Snapshot& snap) {
  if (!snap.sealed()) return std::nullopt;
  std::vector<uint64_t> blob_hashes;
  bool has_blob = false, has_replicated = false;
  for (const TensorView& v : snap.tensors()) {
    if (v.meta.name == kObjectsBlobName) {
      has_blob = true;
      const uint64_t n = internal::ChunkCount(v.meta.nbytes(), snap.chunk_size());
      blob_hashes.assign(v.chunk_hashes, v.chunk_hashes + n);
    } else if (!v.meta.replicated) {
      return std::nullopt;
    } else {
      has_replicated = true;
    }
  }
  // Without a tensor declared replicated the trainer never said the state is the same
  // on every rank (a state of Python values alone may be equal by coincidence).
  if (!has_blob || !has_replicated) return std::nullopt;
  return internal::Hash(blob_hashes.data(), blob_hashes.size() * sizeof(uint64_t));
}

}  // namespace bulwark::ckpt
