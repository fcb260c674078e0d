// Shared-memory staging ring: the memory tier of the checkpoint engine.
//
// One ring file per rank, "<staging_dir>/rank-<r>.ring" on tmpfs (/dev/shm),
// inside a directory the node agent owns: the agent creates the directory,
// persists snapshots from it and deletes it when the job ends, so a staged
// snapshot outlives a crashed trainer. The trainer (Stager) maps the ring and
// copies tensors into a slot, hashing each chunk (xxh3) right after its copy, and
// publishes it sealed; the agent (RingReader) maps the same file, persists slots to
// disk in the background and seals any slot a writer published unsealed.
//
// RING PROTOCOL (lock-free, one writer process, any number of readers)
//   Each slot has a 64-bit state word: [state:8][readers:8][seq:48].
//   Writer claims a slot whose readers == 0 and state != WRITING by CAS to
//   (WRITING, 0, s) where s = 1 + the highest seq of any slot (a ring-wide order),
//   copies index + data, then stores (STAGED, 0, s)
//   with release order. It never claims the slot holding its newest complete
//   snapshot, so a crash mid-copy always leaves that snapshot intact.
//   Readers pin with CAS readers+1 on a STAGED/SEALED slot (same seq), read,
//   and unpin with CAS readers-1. A pinned slot is never claimed by the writer.
//   Sealing: a reader holding a pin computes the chunk hashes into the slot's
//   hash area and CASes STAGED -> SEALED. Only SEALED slots are restorable.
//   A writer that dies mid-copy leaves WRITING; the next Stager::Open (a new
//   trainer process for the same rank) resets WRITING slots to EMPTY.
//   A writer whose fill fails (StageFilled: a peer's replica received straight into
//   the slot, whose transfer broke or failed its checksums) stores (EMPTY, 0, s):
//   the slot's old snapshot is partly overwritten, the newest complete one is intact.
//   A writer that hashed or verified every chunk as it wrote it (Stage, and
//   StageFilled with sealed_hashes) writes the hashes into the slot's hash area and
//   stores (SEALED, 0, s) directly: no reader can have pinned a WRITING slot.
// Memory: the file is K slots of fixed capacity plus a 4 KiB header, allocated
// (posix_fallocate) once at the first save and reused; a save that no longer
// fits regrows the ring into a new file that atomically replaces the old one.
//
// Thread-safety: a Stager is used by one thread (the SDK serialises calls); a
// RingReader likewise. Different processes coordinate only via the state words.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "common/status.h"

namespace bulwark::ckpt {

class Snapshot;

// Path of rank's ring file in `staging_dir`.
std::string RingPath(const std::string& staging_dir, int rank);

struct StageResult {
  int slot = -1;
  uint64_t seq = 0;
  uint64_t generation = 0;  // changes when the ring was regrown (new file)
  uint64_t bytes = 0;
};

// Trainer side.
class Stager {
 public:
  // Opens (or creates on first Stage) rank's ring. `slots` >= 2.
  static Result<std::unique_ptr<Stager>> Open(const std::string& staging_dir, int rank, int world,
                                              int slots, uint64_t chunk_size = kDefaultChunkSize);
  ~Stager();

  // Copies `tensors` into a free slot as `step`, hashing every chunk as it is copied,
  // and publishes the slot SEALED: restorable once this returns, with no pass of the
  // agent's over the bytes. Saves of 32 MiB or more are copied by two threads (the
  // caller's and one more).
  // UNAVAILABLE if every other slot is pinned by the agent (the persister is
  // behind): the caller may retry or skip this snapshot.
  Result<StageResult> Stage(long step, const std::vector<TensorView>& tensors);
  // Stages `step` of tensors `metas` whose bytes `fill` writes: dsts[i] is where
  // tensor i's metas[i].nbytes() bytes go (in the claimed slot). A fill error is
  // returned and leaves nothing staged (the claimed slot is EMPTY). Stage is this with
  // a copy; the agent receives a peer's replica straight into its ring with it.
  // With `sealed_hashes` (tensor i's chunk hashes, which `fill` checked against the
  // bytes it wrote: a verified transfer), the slot is published SEALED with them, not
  // STAGED, and needs no sealing pass; fewer hashes than chunks is INVALID_ARGUMENT.
  using Filler = std::function<Status(const std::vector<uint8_t*>& dsts)>;
  Result<StageResult> StageFilled(
      long step, const std::vector<TensorMeta>& metas, const Filler& fill,
      const std::vector<std::vector<uint64_t>>* sealed_hashes = nullptr);

  // Restores from the newest SEALED slot holding `step` into `dsts` (matched by
  // name; dtype and shape must equal), verifying every chunk. NOT_FOUND if no
  // sealed slot holds `step`.
  Status Restore(long step, const std::vector<std::pair<TensorMeta, void*>>& dsts);
  // Every tensor of sealed `step`, as raw bytes.
  Result<std::vector<OwnedBlob>> RestoreAll(long step);
  // Steps of SEALED slots, ascending.
  std::vector<long> SealedSteps();
  uint64_t mapped_bytes() const;

  struct Impl;

 private:
  // Pins the newest SEALED slot holding `step`; NOT_FOUND if none.
  Result<std::unique_ptr<Snapshot>> PinSealed(long step);
  explicit Stager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A pinned, readable snapshot. Unpins on destruction.
class Snapshot {
 public:
  virtual ~Snapshot() = default;
  virtual long step() const = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual uint64_t chunk_size() const = 0;
  // Views into the shared mapping; chunk_hashes are valid once sealed.
  virtual const std::vector<TensorView>& tensors() const = 0;
  // Computes the chunk hashes if the slot is not sealed yet (adds to *hash_s).
  virtual Status EnsureSealed(double* hash_s) = 0;
  // Whether the chunk hashes are valid (the slot is SEALED).
  virtual bool sealed() const { return true; }
  // Seals with hashes computed elsewhere from these same bytes (the shard writer
  // hashes while persisting): `hashes[i]` are tensor i's chunk hashes.
  // INVALID_ARGUMENT if the counts do not match; OK if already sealed.
  virtual Status AdoptHashes(const std::vector<std::vector<uint64_t>>& hashes) {
    (void)hashes;
    return sealed() ? Status::Ok() : FailedPrecondition("snapshot cannot adopt hashes");
  }
  virtual uint64_t bytes() const = 0;
};

// Agent side: seals and reads rank rings. Not thread-safe.
class RingReader {
 public:
  static Result<std::unique_ptr<RingReader>> Open(const std::string& path);
  ~RingReader();
  // Pins `slot` if it still holds `seq` (STAGED or SEALED), with `seal` also seals
  // it (hash_s receives the hashing time) and returns the pinned snapshot.
  // NOT_FOUND if the slot was overwritten since. Pinning is a CAS: cheap enough
  // to do on the notification path so the trainer cannot overwrite the slot.
  Result<std::unique_ptr<Snapshot>> Pin(int slot, uint64_t seq, double* hash_s = nullptr,
                                        bool seal = true);
  // Pins the newest SEALED slot holding `step` (sealing STAGED ones on the way).
  Result<std::unique_ptr<Snapshot>> PinStep(long step);
  // Steps of STAGED or SEALED slots (seals STAGED ones first), ascending.
  std::vector<long> Steps();
  uint64_t generation() const;
  int slots() const;

  struct Impl;

 private:
  explicit RingReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Copies a sealed snapshot tensor into dst chunk by chunk, checking each chunk's
// xxh3; DATA_LOSS names the tensor and chunk.
Status CopyVerified(const TensorView& src, uint64_t chunk_size, void* dst);

// Writes a snapshot's tensors into `staging_dir`'s ring for its rank as a sealed
// slot (peer replication / prefetch into a replacement node's memory tier).
Status StageCopy(const std::string& staging_dir, int slots, const Snapshot& snap);

}  // namespace bulwark::ckpt
