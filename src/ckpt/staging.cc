// Shared-memory staging ring; the protocol is described in staging.h.
#include "ckpt/staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/format.h"
#include "common/clock.h"

namespace bulwark::ckpt {
namespace {

using Json = nlohmann::json;

constexpr char kRingMagic[8] = {'B', 'W', 'R', 'I', 'N', 'G', '0', '2'};
constexpr uint64_t kRingHeader = 4096;
constexpr uint64_t kSlotHeaderBase = 128;
constexpr int kMaxSlots = static_cast<int>((kRingHeader - kSlotHeaderBase) / 64);
constexpr uint64_t kAlign = 64;

enum : uint64_t { kEmpty = 0, kWriting = 1, kStaged = 2, kSealed = 3 };

uint64_t Word(uint64_t state, uint64_t readers, uint64_t seq) {
  return (state << 56) | (readers << 48) | (seq & ((1ull << 48) - 1));
}
uint64_t StateOf(uint64_t w) { return w >> 56; }
uint64_t ReadersOf(uint64_t w) { return (w >> 48) & 0xff; }
uint64_t SeqOf(uint64_t w) { return w & ((1ull << 48) - 1); }

struct SlotHeader {
  std::atomic<uint64_t> word;
  int64_t step;
  uint64_t data_len;
  uint64_t index_len;
  uint64_t hash_n;
  double time;
  uint64_t pad[2];
};
static_assert(sizeof(SlotHeader) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct RingHeader {
  char magic[8];
  uint32_t version;
  uint32_t slots;
  uint64_t slot_stride;
  uint64_t index_cap;
  uint64_t hash_cap;  // entries
  uint64_t data_cap;
  uint64_t chunk_size;
  int32_t rank;
  int32_t world;
  uint64_t generation;
};

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A mapped ring file. Shared by a reader and the snapshots it hands out.
struct Mapping {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (base != nullptr) ::munmap(base, size);
  }
  RingHeader* hdr() const { return reinterpret_cast<RingHeader*>(base); }
  SlotHeader* slot(int i) const {
    return reinterpret_cast<SlotHeader*>(base + kSlotHeaderBase + 64 * static_cast<uint64_t>(i));
  }
  uint8_t* index_area(int i) const {
    return base + kRingHeader + hdr()->slot_stride * static_cast<uint64_t>(i);
  }
  uint64_t* hash_area(int i) const {
    return reinterpret_cast<uint64_t*>(index_area(i) + hdr()->index_cap);
  }
  uint8_t* data_area(int i) const { return index_area(i) + hdr()->index_cap + hdr()->hash_cap * 8; }
};

Result<std::shared_ptr<Mapping>> MapFile(const std::string& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + " does not exist");
    return ErrnoStatus("open " + path, errno);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("stat " + path, err);
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<uint64_t>(st.st_size);
  if (m->size < kRingHeader) {
    ::close(fd);
    return DataLoss(path + ": too small for a staging ring");
  }
  void* p = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return ErrnoStatus("mmap " + path, err);
  m->base = static_cast<uint8_t*>(p);
  RingHeader* h = m->hdr();
  if (std::memcmp(h->magic, kRingMagic, 8) != 0 || h->version != 1 || h->slots < 1 ||
      h->slots > static_cast<uint32_t>(kMaxSlots) ||
      kRingHeader + h->slot_stride * h->slots > m->size ||
      h->index_cap + h->hash_cap * 8 + h->data_cap > h->slot_stride || h->chunk_size == 0) {
    return DataLoss(path + ": not a valid staging ring (bad header)");
  }
  return m;
}

// Slot index: the tensor metas plus each tensor's offset in the data area.
struct SlotTensor {
  TensorMeta meta;
  uint64_t off = 0;
  uint64_t hash_base = 0;  // first entry in the hash area
};

Status ParseSlotIndex(const Mapping& m, int slot, std::vector<SlotTensor>* out) {
  const SlotHeader* sh = m.slot(slot);
  const RingHeader* h = m.hdr();
  if (sh->index_len > h->index_cap || sh->data_len > h->data_cap) {
    return DataLoss("staging slot " + std::to_string(slot) + ": header out of range");
  }
  out->clear();
  try {
    Json j =
        Json::parse(std::string(reinterpret_cast<const char*>(m.index_area(slot)), sh->index_len));
    uint64_t hb = 0;
    for (const Json& t : j) {
      SlotTensor st;
      BW_RETURN_IF_ERROR(internal::MetaFromJson(&t, "staging slot", &st.meta));
      st.off = t.at("off").get<uint64_t>();
      st.hash_base = hb;
      hb += internal::ChunkCount(st.meta.nbytes(), h->chunk_size);
      if (st.off > sh->data_len || st.meta.nbytes() > sh->data_len - st.off || hb > h->hash_cap) {
        return DataLoss("staging slot " + std::to_string(slot) + ": tensor '" + st.meta.name +
                        "' lies outside the slot");
      }
      out->push_back(std::move(st));
    }
  } catch (const std::exception& e) {
    return DataLoss("staging slot " + std::to_string(slot) + ": malformed index: " + e.what());
  }
  return Status::Ok();
}

bool TryPin(SlotHeader* sh, uint64_t seq_or_any, bool any_seq) {
  uint64_t w = sh->word.load(std::memory_order_acquire);
  while (true) {
    uint64_t s = StateOf(w);
    if ((s != kStaged && s != kSealed) || (!any_seq && SeqOf(w) != seq_or_any) ||
        ReadersOf(w) == 255) {
      return false;
    }
    if (sh->word.compare_exchange_weak(w, Word(s, ReadersOf(w) + 1, SeqOf(w)),
                                       std::memory_order_acq_rel)) {
      return true;
    }
  }
}

void Unpin(SlotHeader* sh) {
  uint64_t w = sh->word.load(std::memory_order_acquire);
  while (!sh->word.compare_exchange_weak(w, Word(StateOf(w), ReadersOf(w) - 1, SeqOf(w)),
                                         std::memory_order_acq_rel)) {
  }
}

// Seals a pinned slot: hashes every chunk, then STAGED -> SEALED.
Status Seal(Mapping& m, int slot, const std::vector<SlotTensor>& ts, double* hash_s) {
  SlotHeader* sh = m.slot(slot);
  if (StateOf(sh->word.load(std::memory_order_acquire)) == kSealed) return Status::Ok();
  const double t0 = SystemClock::Get()->NowMono();
  const uint64_t cs = m.hdr()->chunk_size;
  uint64_t* hashes = m.hash_area(slot);
  for (const SlotTensor& t : ts) {
    const uint64_t nb = t.meta.nbytes();
    const uint8_t* p = m.data_area(slot) + t.off;
    for (uint64_t i = 0; i * cs < nb; ++i) {
      hashes[t.hash_base + i] = internal::Hash(p + i * cs, std::min(cs, nb - i * cs));
    }
  }
  uint64_t w = sh->word.load(std::memory_order_acquire);
  while (StateOf(w) == kStaged &&
         !sh->word.compare_exchange_weak(w, Word(kSealed, ReadersOf(w), SeqOf(w)),
                                         std::memory_order_acq_rel)) {
  }
  if (hash_s != nullptr) *hash_s += SystemClock::Get()->NowMono() - t0;
  return Status::Ok();
}

class SnapshotImpl : public Snapshot {
 public:
  SnapshotImpl(std::shared_ptr<Mapping> m, int slot, std::vector<SlotTensor> ts)
      : m_(std::move(m)), slot_(slot) {
    for (const SlotTensor& t : ts) {
      TensorView v;
      v.meta = t.meta;
      v.data = m_->data_area(slot_) + t.off;
      v.chunk_hashes = m_->hash_area(slot_) + t.hash_base;
      bytes_ += t.meta.nbytes();
      views_.push_back(std::move(v));
    }
  }
  ~SnapshotImpl() override { Unpin(m_->slot(slot_)); }
  Status EnsureSealed(double* hash_s) override {
    std::vector<SlotTensor> ts;
    BW_RETURN_IF_ERROR(ParseSlotIndex(*m_, slot_, &ts));
    return Seal(*m_, slot_, ts, hash_s);
  }
  bool sealed() const override {
    return StateOf(m_->slot(slot_)->word.load(std::memory_order_acquire)) == kSealed;
  }
  Status AdoptHashes(const std::vector<std::vector<uint64_t>>& hashes) override {
    if (sealed()) return Status::Ok();
    const uint64_t cs = m_->hdr()->chunk_size;
    if (hashes.size() != views_.size()) return InvalidArgument("AdoptHashes: tensor count differs");
    for (size_t i = 0; i < views_.size(); ++i) {
      if (hashes[i].size() != internal::ChunkCount(views_[i].meta.nbytes(), cs)) {
        return InvalidArgument("AdoptHashes: chunk count of '" + views_[i].meta.name + "' differs");
      }
    }
    for (size_t i = 0; i < views_.size(); ++i) {
      std::copy(hashes[i].begin(), hashes[i].end(), const_cast<uint64_t*>(views_[i].chunk_hashes));
    }
    SlotHeader* sh = m_->slot(slot_);
    uint64_t w = sh->word.load(std::memory_order_acquire);
    while (StateOf(w) == kStaged &&
           !sh->word.compare_exchange_weak(w, Word(kSealed, ReadersOf(w), SeqOf(w)),
                                           std::memory_order_acq_rel)) {
    }
    return Status::Ok();
  }
  long step() const override { return m_->slot(slot_)->step; }
  int rank() const override { return m_->hdr()->rank; }
  int world() const override { return m_->hdr()->world; }
  uint64_t chunk_size() const override { return m_->hdr()->chunk_size; }
  const std::vector<TensorView>& tensors() const override { return views_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<Mapping> m_;
  int slot_;
  std::vector<TensorView> views_;
  uint64_t bytes_ = 0;
};

// Pins, parses and seals `slot`; the caller checked it is a candidate.
Result<std::unique_ptr<Snapshot>> PinAndSeal(const std::shared_ptr<Mapping>& m, int slot,
                                             uint64_t seq, bool any_seq, double* hash_s,
                                             bool seal = true) {
  SlotHeader* sh = m->slot(slot);
  if (!TryPin(sh, seq, any_seq)) {
    return NotFound("staging slot " + std::to_string(slot) + " no longer holds that snapshot");
  }
  std::vector<SlotTensor> ts;
  Status st = ParseSlotIndex(*m, slot, &ts);
  if (st.ok() && seal) st = Seal(*m, slot, ts, hash_s);
  if (!st.ok()) {
    Unpin(sh);
    return st;
  }
  return std::unique_ptr<Snapshot>(new SnapshotImpl(m, slot, std::move(ts)));
}

}  // namespace

std::string RingPath(const std::string& staging_dir, int rank) {
  return staging_dir + "/rank-" + std::to_string(rank) + ".ring";
}

// ---------------------------------------------------------------------------
// Stager

namespace {

// Saves of at least this many bytes are copied by kCopyThreads threads: one thread
// does not reach the memory bandwidth, and the trainer is blocked meanwhile anyway.
constexpr uint64_t kParallelCopyMin = 32ull << 20;
constexpr int kCopyThreads = 2;

// One chunk of a tensor: copied to dst and hashed into *hash.
struct CopyPiece {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t n;
  uint64_t* hash;
};

// Copies and hashes every piece (CopyAndHash), the pieces split into `threads` runs of
// about equal bytes (the calling thread takes the first). Returns when all are done.
void ParallelCopyAndHash(const std::vector<CopyPiece>& pieces, int threads) {
  uint64_t total = 0;
  for (const CopyPiece& p : pieces) total += p.n;
  auto run = [&pieces](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      *pieces[i].hash = internal::CopyAndHash(pieces[i].dst, pieces[i].src, pieces[i].n);
    }
  };
  if (threads <= 1 || pieces.size() < 2) {
    run(0, pieces.size());
    return;
  }
  // Cut points: piece indices where the running byte count passes k * total / threads.
  std::vector<size_t> cuts = {0};
  uint64_t pos = 0;
  for (size_t i = 0; i < pieces.size() && static_cast<int>(cuts.size()) < threads; ++i) {
    pos += pieces[i].n;
    if (pos * threads >= total * cuts.size()) cuts.push_back(i + 1);
  }
  cuts.push_back(pieces.size());
  std::vector<std::thread> workers;
  for (size_t t = 1; t + 1 < cuts.size(); ++t) workers.emplace_back(run, cuts[t], cuts[t + 1]);
  run(cuts[0], cuts[1]);
  for (std::thread& w : workers) w.join();
}

}  // namespace

struct Stager::Impl {
  std::string dir, path;
  int rank = 0, world = 1, slots = 2;
  uint64_t chunk_size = kDefaultChunkSize;
  std::shared_ptr<Mapping> m;
  // Cached layout of the last save (reused while the tensor metas are unchanged).
  std::vector<TensorMeta> metas;
  std::vector<uint64_t> offs;
  std::string index_json;
  uint64_t total = 0, hash_n = 0;

  Status Create(uint64_t data_cap, uint64_t index_cap, uint64_t hash_cap) {
    const uint64_t gen = m ? m->hdr()->generation + 1 : 1;
    const uint64_t stride = RoundUp(index_cap + hash_cap * 8 + data_cap, 4096);
    const uint64_t size = kRingHeader + stride * static_cast<uint64_t>(slots);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoStatus("create staging ring " + tmp, errno);
    int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (rc != 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("allocate " + std::to_string(size) + " bytes of staging memory at " + tmp +
                             " (is /dev/shm large enough? lower checkpoint.memory.slots)",
                         rc);
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      ::unlink(tmp.c_str());
      return ErrnoStatus("mmap staging ring " + tmp, err);
    }
    auto nm = std::make_shared<Mapping>();
    nm->base = static_cast<uint8_t*>(p);
    nm->size = size;
    RingHeader* h = nm->hdr();
    std::memcpy(h->magic, kRingMagic, 8);
    h->version = 1;
    h->slots = static_cast<uint32_t>(slots);
    h->slot_stride = stride;
    h->index_cap = index_cap;
    h->hash_cap = hash_cap;
    h->data_cap = data_cap;
    h->chunk_size = chunk_size;
    h->rank = rank;
    h->world = world;
    h->generation = gen;
    for (int i = 0; i < slots; ++i) nm->slot(i)->word.store(Word(kEmpty, 0, 0));
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return ErrnoStatus("rename " + tmp + " -> " + path, errno);
    }
    m = std::move(nm);
    return Status::Ok();
  }

  // The slot to overwrite: not WRITING, not pinned, not the newest complete one;
  // EMPTY first, else the oldest. *next_seq: the seq for the new snapshot, above
  // every slot's, so seqs order snapshots across slots (the newest complete one
  // is the STAGED/SEALED slot with the highest seq however unevenly pins made
  // the writer use the slots).
  int PickSlot(uint64_t* word, uint64_t* next_seq) {
    const int n = static_cast<int>(m->hdr()->slots);
    int newest = -1;
    uint64_t newest_seq = 0, max_seq = 0;
    for (int i = 0; i < n; ++i) {
      uint64_t w = m->slot(i)->word.load(std::memory_order_acquire);
      max_seq = std::max(max_seq, SeqOf(w));
      if ((StateOf(w) == kStaged || StateOf(w) == kSealed) && SeqOf(w) >= newest_seq) {
        newest = i;
        newest_seq = SeqOf(w);
      }
    }
    int best = -1;
    uint64_t best_key = ~0ull;
    for (int i = 0; i < n; ++i) {
      if (i == newest) continue;
      uint64_t w = m->slot(i)->word.load(std::memory_order_acquire);
      if (StateOf(w) == kWriting || ReadersOf(w) != 0) continue;
      uint64_t key = StateOf(w) == kEmpty ? 0 : SeqOf(w) + 1;
      if (key < best_key) {
        best = i;
        best_key = key;
        *word = w;
      }
    }
    *next_seq = max_seq + 1;
    return best;
  }
};

Stager::Stager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Stager::~Stager() = default;

Result<std::unique_ptr<Stager>> Stager::Open(const std::string& staging_dir, int rank, int world,
                                             int slots, uint64_t chunk_size) {
  if (slots < 2 || slots > kMaxSlots) {
    return InvalidArgument("staging ring slots must be in [2, " + std::to_string(kMaxSlots) +
                           "], got " + std::to_string(slots));
  }
  if (chunk_size == 0) return InvalidArgument("chunk_size must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->dir = staging_dir;
  impl->path = RingPath(staging_dir, rank);
  impl->rank = rank;
  impl->world = world;
  impl->slots = slots;
  impl->chunk_size = chunk_size;
  Result<std::shared_ptr<Mapping>> m = MapFile(impl->path, /*populate=*/true);
  if (m.ok() && (*m)->hdr()->rank == rank && (*m)->hdr()->world == world &&
      static_cast<int>((*m)->hdr()->slots) == slots && (*m)->hdr()->chunk_size == chunk_size) {
    impl->m = *m;
    // A previous trainer of this rank may have died mid-copy.
    for (int i = 0; i < slots; ++i) {
      uint64_t w = impl->m->slot(i)->word.load();
      if (StateOf(w) == kWriting) impl->m->slot(i)->word.store(Word(kEmpty, 0, SeqOf(w)));
    }
  }
  return std::unique_ptr<Stager>(new Stager(std::move(impl)));
}

Result<StageResult> Stager::Stage(long step, const std::vector<TensorView>& tensors) {
  std::vector<TensorMeta> metas;
  metas.reserve(tensors.size());
  for (const TensorView& t : tensors) {
    if (t.meta.nbytes() > 0 && t.data == nullptr) {
      return InvalidArgument("tensor '" + t.meta.name + "' has bytes but null data");
    }
    metas.push_back(t.meta);
  }
  // The slot is sealed as it is written: each chunk is hashed right after its copy,
  // while it is in the cache, so the snapshot is restorable the moment it is staged
  // and the agent never reads it back to seal it.
  const uint64_t chunk = impl_->chunk_size;
  std::vector<std::vector<uint64_t>> hashes(tensors.size());
  return StageFilled(
      step, metas,
      [&](const std::vector<uint8_t*>& dsts) {
        std::vector<CopyPiece> pieces;
        uint64_t total = 0;
        for (size_t i = 0; i < tensors.size(); ++i) {
          const uint64_t n = tensors[i].meta.nbytes();
          hashes[i].resize(internal::ChunkCount(n, chunk));
          const auto* src = static_cast<const uint8_t*>(tensors[i].data);
          for (uint64_t c = 0; c < hashes[i].size(); ++c) {
            pieces.push_back({dsts[i] + c * chunk, src + c * chunk, std::min(chunk, n - c * chunk),
                              &hashes[i][c]});
          }
          total += n;
        }
        ParallelCopyAndHash(pieces, total >= kParallelCopyMin ? kCopyThreads : 1);
        return Status::Ok();
      },
      &hashes);
}

Result<StageResult> Stager::StageFilled(long step, const std::vector<TensorMeta>& metas,
                                        const Filler& fill,
                                        const std::vector<std::vector<uint64_t>>* sealed_hashes) {
  Impl& s = *impl_;
  // Layout, cached while the metas are unchanged.
  bool same = metas.size() == s.metas.size();
  for (size_t i = 0; same && i < metas.size(); ++i) {
    const TensorMeta& a = metas[i];
    const TensorMeta& b = s.metas[i];
    same = a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
           a.global_shape == b.global_shape && a.offsets == b.offsets &&
           a.replicated == b.replicated;
  }
  if (!same) {
    s.metas.clear();
    s.offs.clear();
    s.total = 0;
    s.hash_n = 0;
    Json j = Json::array();
    for (const TensorMeta& t : metas) {
      BW_RETURN_IF_ERROR(t.Validate());
      Json e;
      internal::MetaToJson(t, &e);
      e["off"] = s.total;
      j.push_back(std::move(e));
      s.metas.push_back(t);
      s.offs.push_back(s.total);
      s.total = RoundUp(s.total + t.nbytes(), kAlign);
      s.hash_n += internal::ChunkCount(t.nbytes(), s.chunk_size);
    }
    s.index_json = j.dump();
  }
  if (!s.m || s.total > s.m->hdr()->data_cap || s.index_json.size() > s.m->hdr()->index_cap ||
      s.hash_n > s.m->hdr()->hash_cap) {
    // First save, or the state grew: (re)allocate with 1/16 headroom.
    BW_RETURN_IF_ERROR(s.Create(RoundUp(s.total + s.total / 16 + kAlign, 4096),
                                RoundUp(std::max<uint64_t>(65536, s.index_json.size() * 2), 4096),
                                s.hash_n * 2 + 64));
  }
  uint64_t w = 0, seq = 0;
  int slot = -1;
  SlotHeader* sh = nullptr;
  for (int attempt = 0; attempt < 8 && slot < 0; ++attempt) {
    slot = s.PickSlot(&w, &seq);
    if (slot < 0) break;
    sh = s.m->slot(slot);
    if (!sh->word.compare_exchange_strong(w, Word(kWriting, 0, seq), std::memory_order_acq_rel)) {
      slot = -1;  // an agent pinned it meanwhile
    }
  }
  if (slot < 0) {
    return Unavailable(
        "staging ring full: every other slot is being persisted; the background "
        "persist is slower than the save cadence (raise checkpoint.memory.slots)");
  }
  std::memcpy(s.m->index_area(slot), s.index_json.data(), s.index_json.size());
  uint8_t* data = s.m->data_area(slot);
  std::vector<uint8_t*> dsts;
  dsts.reserve(metas.size());
  for (size_t i = 0; i < metas.size(); ++i) dsts.push_back(data + s.offs[i]);
  Status filled = fill(dsts);
  if (filled.ok() && sealed_hashes != nullptr) {
    uint64_t* hashes = s.m->hash_area(slot);
    uint64_t base = 0;
    for (size_t i = 0; i < metas.size() && filled.ok(); ++i) {
      const uint64_t n = internal::ChunkCount(metas[i].nbytes(), s.chunk_size);
      if (i >= sealed_hashes->size() || (*sealed_hashes)[i].size() < n) {
        filled = InvalidArgument("tensor '" + metas[i].name + "' has fewer chunk hashes than its " +
                                 std::to_string(n) + " chunks");
      } else if (n > 0) {
        std::memcpy(hashes + base, (*sealed_hashes)[i].data(), n * sizeof(uint64_t));
      }
      base += n;
    }
  }
  if (!filled.ok()) {
    // Nothing staged: the slot's old snapshot is partly overwritten, so it is EMPTY.
    sh->word.store(Word(kEmpty, 0, seq), std::memory_order_release);
    return filled;
  }
  sh->step = step;
  sh->data_len = s.total;
  sh->index_len = s.index_json.size();
  sh->hash_n = s.hash_n;
  sh->time = SystemClock::Get()->NowWall();
  sh->word.store(Word(sealed_hashes != nullptr ? kSealed : kStaged, 0, seq),
                 std::memory_order_release);
  StageResult r;
  r.slot = slot;
  r.seq = seq;
  r.generation = s.m->hdr()->generation;
  r.bytes = s.total;
  return r;
}

namespace {

// Index of the newest SEALED (or, with allow_staged, STAGED) slot holding step.
int FindStep(const Mapping& m, long step, bool allow_staged) {
  int best = -1;
  uint64_t best_seq = 0;
  for (int i = 0; i < static_cast<int>(m.hdr()->slots); ++i) {
    uint64_t w = m.slot(i)->word.load(std::memory_order_acquire);
    bool ok = StateOf(w) == kSealed || (allow_staged && StateOf(w) == kStaged);
    if (ok && m.slot(i)->step == step && SeqOf(w) >= best_seq) {
      best = i;
      best_seq = SeqOf(w);
    }
  }
  return best;
}

}  // namespace

Status CopyVerified(const TensorView& src, uint64_t chunk_size, void* dst) {
  const uint64_t nb = src.meta.nbytes();
  const uint8_t* from = static_cast<const uint8_t*>(src.data);
  uint8_t* to = static_cast<uint8_t*>(dst);
  for (uint64_t i = 0; i * chunk_size < nb; ++i) {
    const uint64_t len = std::min(chunk_size, nb - i * chunk_size);
    std::memcpy(to + i * chunk_size, from + i * chunk_size, len);
    if (src.chunk_hashes == nullptr ||
        internal::Hash(to + i * chunk_size, len) != src.chunk_hashes[i]) {
      return DataLoss("memory tier: tensor '" + src.meta.name + "' chunk " + std::to_string(i) +
                      " checksum mismatch");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<Snapshot>> Stager::PinSealed(long step) {
  Impl& s = *impl_;
  if (!s.m) {
    BW_ASSIGN_OR_RETURN(s.m, MapFile(s.path, false));
  }
  int slot = FindStep(*s.m, step, false);
  if (slot < 0) return NotFound("step " + std::to_string(step) + " is not in the memory tier");
  BW_ASSIGN_OR_RETURN(auto snap, PinAndSeal(s.m, slot, 0, true, nullptr));
  if (snap->step() != step) return NotFound("memory tier slot was overwritten");
  return snap;
}

Status Stager::Restore(long step, const std::vector<std::pair<TensorMeta, void*>>& dsts) {
  BW_ASSIGN_OR_RETURN(auto snap, PinSealed(step));
  for (const auto& [want, dst] : dsts) {
    const auto& ts = snap->tensors();
    auto it = std::find_if(ts.begin(), ts.end(),
                           [&](const TensorView& t) { return t.meta.name == want.name; });
    if (it == ts.end()) return NotFound("tensor '" + want.name + "' is not in the memory tier");
    if (it->meta.dtype != want.dtype || it->meta.shape != want.shape) {
      return InvalidArgument("tensor '" + want.name +
                             "' in the memory tier has another dtype/shape");
    }
    BW_RETURN_IF_ERROR(CopyVerified(*it, snap->chunk_size(), dst));
  }
  return Status::Ok();
}

Result<std::vector<OwnedBlob>> Stager::RestoreAll(long step) {
  BW_ASSIGN_OR_RETURN(auto snap, PinSealed(step));
  std::vector<OwnedBlob> out;
  for (const TensorView& t : snap->tensors()) {
    OwnedBlob b;
    b.name = t.meta.name;
    b.data.resize(t.meta.nbytes());
    BW_RETURN_IF_ERROR(CopyVerified(t, snap->chunk_size(), b.data.data()));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<long> Stager::SealedSteps() {
  std::vector<long> out;
  if (!impl_->m) return out;
  for (int i = 0; i < static_cast<int>(impl_->m->hdr()->slots); ++i) {
    if (StateOf(impl_->m->slot(i)->word.load()) == kSealed) out.push_back(impl_->m->slot(i)->step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t Stager::mapped_bytes() const { return impl_->m ? impl_->m->size : 0; }

// ---------------------------------------------------------------------------
// RingReader

struct RingReader::Impl {
  std::shared_ptr<Mapping> m;
};

RingReader::RingReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RingReader::~RingReader() = default;

Result<std::unique_ptr<RingReader>> RingReader::Open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  BW_ASSIGN_OR_RETURN(impl->m, MapFile(path, false));
  return std::unique_ptr<RingReader>(new RingReader(std::move(impl)));
}

Result<std::unique_ptr<Snapshot>> RingReader::Pin(int slot, uint64_t seq, double* hash_s,
                                                  bool seal) {
  if (slot < 0 || slot >= static_cast<int>(impl_->m->hdr()->slots)) {
    return InvalidArgument("staging slot " + std::to_string(slot) + " out of range");
  }
  return PinAndSeal(impl_->m, slot, seq, false, hash_s, seal);
}

Result<std::unique_ptr<Snapshot>> RingReader::PinStep(long step) {
  int slot = FindStep(*impl_->m, step, true);
  if (slot < 0) return NotFound("step " + std::to_string(step) + " is not in the memory tier");
  BW_ASSIGN_OR_RETURN(auto snap, PinAndSeal(impl_->m, slot, 0, true, nullptr));
  if (snap->step() != step) return NotFound("memory tier slot was overwritten");
  return snap;
}

std::vector<long> RingReader::Steps() {
  std::vector<long> out;
  const Mapping& m = *impl_->m;
  for (int i = 0; i < static_cast<int>(m.hdr()->slots); ++i) {
    uint64_t w = m.slot(i)->word.load(std::memory_order_acquire);
    if (StateOf(w) != kStaged && StateOf(w) != kSealed) continue;
    auto snap = PinAndSeal(impl_->m, i, SeqOf(w), false, nullptr);
    if (snap.ok()) out.push_back((*snap)->step());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

uint64_t RingReader::generation() const { return impl_->m->hdr()->generation; }

int RingReader::slots() const { return static_cast<int>(impl_->m->hdr()->slots); }

Status StageCopy(const std::string& staging_dir, int slots, const Snapshot& snap) {
  BW_ASSIGN_OR_RETURN(
      auto st, Stager::Open(staging_dir, snap.rank(), snap.world(), slots, snap.chunk_size()));
  BW_ASSIGN_OR_RETURN(StageResult r, st->Stage(snap.step(), snap.tensors()));
  BW_ASSIGN_OR_RETURN(auto reader, RingReader::Open(RingPath(staging_dir, snap.rank())));
  BW_ASSIGN_OR_RETURN(auto pinned, reader->Pin(r.slot, r.seq));
  // Sealing recomputed the hashes; they must equal the source's.
  const auto& a = snap.tensors();
  const auto& b = pinned->tensors();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const uint64_t n = internal::ChunkCount(a[i].meta.nbytes(), snap.chunk_size());
    if (n > 0 && std::memcmp(a[i].chunk_hashes, b[i].chunk_hashes, n * 8) != 0) {
      return DataLoss("staged copy of tensor '" + a[i].meta.name + "' does not match its source");
    }
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
