// Peer replication of staged snapshots over TCP: the memory tier's off-node copy.
//
// Each node agent runs a PeerServer and pushes its ranks' sealed snapshots to a
// peer agent's server (PushSnapshot), which verifies every chunk and keeps them
// as sealed slots of its own shared-memory rings, RingPath(replica_dir, rank),
// the newest `slots` steps per rank. A replacement agent fetches (rank, step)
// from a peer (FetchSnapshot) into its local staging dir before starting its
// ranks, whose SDK then restores from the memory tier as usual.
//
// Integrity: the sender ships the per-chunk xxh3 of the sealed slot; the receiver
// (server on PUSH, client on FETCH) checks every chunk BEFORE staging anything;
// a mismatch is DATA_LOSS naming the tensor and chunk and nothing is staged.
// The wire protocol is described at the top of peer.cc.
//
// Timeouts: `timeout_s` / `io_timeout_s` bound connecting and every wait for
// progress: the frame header, the JSON header, and each piece of at most 4 MiB
// of tensor data must arrive (or be accepted by the kernel) within it, so a
// stalled peer fails with DEADLINE_EXCEEDED while a large transfer that keeps
// moving is not cut off. Errors: UNAVAILABLE (cannot connect, peer closed the
// connection, server busy), DEADLINE_EXCEEDED (peer stalled), INVALID_ARGUMENT
// (malformed or oversized message, or a timeout <= 0), DATA_LOSS (checksum
// mismatch), NOT_FOUND (FETCH of a step the peer does not hold),
// FAILED_PRECONDITION (pushing an unsealed snapshot), ABORTED (server stopped
// mid-transfer). A status the server returns keeps its code; messages name the
// operation and peer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/staging.h"
#include "common/status.h"

namespace bulwark::ckpt {

// Largest JSON header accepted on the wire.
inline constexpr uint64_t kPeerMaxHeaderBytes = 64ull << 20;
// Default bound on a snapshot's tensor bytes.
inline constexpr uint64_t kPeerDefaultMaxSnapshotBytes = 64ull << 30;

struct PeerServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = ephemeral; see PeerServer::port()
  // Staging dir (tmpfs) holding received replicas, one ring per rank. Created if
  // missing. A replica ring is recreated (older replicas dropped) when a push
  // brings another world size or chunk size for that rank.
  std::string replica_dir;
  // Optional: this node's own staging dir; FETCH falls back to it when
  // replica_dir does not hold the step.
  std::string staging_dir;
  int slots = 2;  // ring slots per replicated rank (>= 2): keeps the newest `slots` steps
  uint64_t max_snapshot_bytes = kPeerDefaultMaxSnapshotBytes;  // per PUSH, tensor bytes
  double io_timeout_s = 60;                                    // per wait for progress, see above
  // Connections served concurrently (one thread each); further connections get
  // an UNAVAILABLE reply and are closed.
  int max_connections = 4;
  // Receives one line per rejected or failed request, from server threads
  // (concurrently); must not call Stop(). Null: stderr.
  std::function<void(const std::string&)> log;
};

// Serves PUSH and FETCH requests (one request per connection) on a background
// acceptor thread plus one thread per connection (a PUSH's at nice 10: replication
// yields to the node's trainers but always progresses, since it holds the rank's lock
// that ReplicaSteps takes; a FETCH, which a recovery waits for, at the process's
// priority): at most max_connections
// requests in flight, and at most 2 * max_connections threads (a thread that has
// sent its final reply may linger up to 1 s draining the client's input).
// Thread-safety: port(), ReplicaSteps() and Stop() may be called from any
// thread. Pushes of the same rank are serialised; a FETCH pins its slot while
// sending, so a concurrent PUSH of that rank may find the ring full (UNAVAILABLE).
class PeerServer {
 public:
  // Creates replica_dir, binds, and starts serving. INVALID_ARGUMENT for bad
  // options; the bind error otherwise.
  static Result<std::unique_ptr<PeerServer>> Start(PeerServerOptions opts);
  // Stop().
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  // The bound port.
  int port() const;
  // rank -> sealed steps held as replicas in replica_dir, ascending.
  std::map<int, std::vector<long>> ReplicaSteps();
  // Closes the listener, aborts in-flight transfers (nothing partial is staged)
  // and joins every thread. Bounded: no wait exceeds the abort of a poll plus
  // publishing a slot whose data has all arrived. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit PeerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sends `snap` to the peer at host:port. `snap` must be sealed (its chunk_hashes
// valid: from RingReader::Pin with seal, PinStep, or after EnsureSealed);
// FAILED_PRECONDITION if a non-empty tensor has no hashes. OK once the peer has
// verified every chunk and staged the snapshot as a sealed slot; the wait for
// that final reply is timeout_s plus 1 s per 256 MiB pushed. Thread-safe.
Status PushSnapshot(const std::string& host, int port, const Snapshot& snap, double timeout_s);

// Fetches (rank, step) from the peer's replicas (or its own staging dir),
// verifies every chunk, and stages it sealed into RingPath(staging_dir, as_rank)
// (as_rank < 0: `rank`) with `slots` slots. NOT_FOUND if the peer holds no such
// step; DATA_LOSS (and nothing staged) if a chunk does not match its hash;
// INVALID_ARGUMENT if the snapshot exceeds max_snapshot_bytes. Staging a donor's
// snapshot as another rank's needs every tensor but the objects blob replicated
// (FAILED_PRECONDITION otherwise, nothing staged). Thread-safe (distinct rings).
Status FetchSnapshot(const std::string& host, int port, int rank, long step,
                     const std::string& staging_dir, int slots, double timeout_s,
                     uint64_t max_snapshot_bytes = kPeerDefaultMaxSnapshotBytes, int as_rank = -1);

}  // namespace bulwark::ckpt
