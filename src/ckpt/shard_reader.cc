// Shard reader, step reader (with resharding) and verifier. Every check
// failure is a DATA_LOSS Status naming the file and what did not match; a missing
// file is NOT_FOUND. Chunk bytes are checked against their xxh3 before the caller
// sees them, so garbage is never returned.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"

namespace bulwark::ckpt {

using internal::kFooterSize;
using internal::kHeaderSize;

namespace internal {

Status CheckShardFile(Env* env, const std::string& path, long step, int rank, int world,
                      Header* h_out, ShardIndex* idx_out) {
  BW_ASSIGN_OR_RETURN(auto f, env->OpenReadable(path));
  const uint64_t size = f->Size();
  if (size < kHeaderSize + kFooterSize) {
    return DataLoss(path + ": file has " + std::to_string(size) +
                    " bytes, smaller than header + footer (truncated)");
  }
  Header h;
  uint8_t hb[kHeaderSize];
  BW_RETURN_IF_ERROR(f->ReadAt(0, hb, kHeaderSize));
  BW_RETURN_IF_ERROR(DecodeHeader(hb, path, &h));
  if (h.file_size != size) {
    return DataLoss(path + ": header records " + std::to_string(h.file_size) +
                    " bytes but the file has " + std::to_string(size) + " (truncated or extended)");
  }
  if ((step >= 0 && h.step != step) || (rank >= 0 && h.rank != rank) ||
      (world >= 0 && h.world != world)) {
    return DataLoss(path + ": header says step " + std::to_string(h.step) + " rank " +
                    std::to_string(h.rank) + " of " + std::to_string(h.world) + ", expected step " +
                    std::to_string(step) + " rank " + std::to_string(rank) + " of " +
                    std::to_string(world));
  }
  if (h.index_len > size - kHeaderSize - kFooterSize) {
    return DataLoss(path + ": index length exceeds the file");
  }
  uint8_t fb[kFooterSize];
  BW_RETURN_IF_ERROR(f->ReadAt(size - kFooterSize, fb, kFooterSize));
  Footer ft;
  BW_RETURN_IF_ERROR(DecodeFooter(fb, path, &ft));
  if (ft.file_size != size || ft.index_xxh3 != h.index_xxh3) {
    return DataLoss(path + ": footer does not match header");
  }
  std::string index_json(h.index_len, '\0');
  BW_RETURN_IF_ERROR(f->ReadAt(kHeaderSize, index_json.data(), h.index_len));
  if (Hash(index_json.data(), index_json.size()) != h.index_xxh3) {
    return DataLoss(path + ": index checksum mismatch");
  }
  ShardIndex idx;
  const uint64_t data_len = size - kHeaderSize - h.index_len - kFooterSize;
  BW_RETURN_IF_ERROR(DecodeIndex(index_json, data_len, path, &idx));
  if (idx.step != h.step || idx.rank != h.rank || idx.world != h.world) {
    return DataLoss(path + ": index and header disagree on step/rank/world");
  }
  if (h_out != nullptr) *h_out = h;
  if (idx_out != nullptr) *idx_out = std::move(idx);
  return Status::Ok();
}

Status VerifyLocalChunks(Env* env, const std::string& path, const ShardIndex& idx,
                         const Header& h) {
  BW_ASSIGN_OR_RETURN(auto f, env->OpenReadable(path));
  std::vector<uint8_t> buf;
  const uint64_t data_start = kHeaderSize + h.index_len;
  for (const TensorEntry& e : idx.tensors) {
    const uint64_t nb = e.meta.nbytes();
    for (size_t i = 0; i < e.chunks.size(); ++i) {
      if (!e.chunks[i].local()) continue;
      const uint64_t len = std::min(idx.chunk_size, nb - i * idx.chunk_size);
      buf.resize(len);
      BW_RETURN_IF_ERROR(f->ReadAt(data_start + e.chunks[i].offset, buf.data(), len));
      if (Hash(buf.data(), len) != e.chunks[i].hash) {
        return DataLoss(path + ": tensor '" + e.meta.name + "' chunk " + std::to_string(i) +
                        " checksum mismatch");
      }
    }
  }
  return Status::Ok();
}

}  // namespace internal

Result<ShardIndex> ReadShardIndex(Env* env, const std::string& root, long step, int rank,
                                  int world) {
  ShardIndex idx;
  BW_RETURN_IF_ERROR(
      internal::CheckShardFile(env, StepDir(root, step) + "/" + ShardFileName(rank, world), step,
                               rank, world, nullptr, &idx));
  return idx;
}

namespace {

// An opened, structure-checked shard.
struct Shard {
  std::string path;
  ShardIndex index;
  uint64_t data_start = 0;
  std::unique_ptr<ReadableFile> file;
};

// The part of a saved piece inside the wanted region, in global coordinates.
struct Box {
  Shard* shard;
  const TensorEntry* entry;
  std::vector<int64_t> lo, hi;
};

bool Overlap(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.lo.size(); ++d) {
    if (std::max(a.lo[d], b.lo[d]) >= std::min(a.hi[d], b.hi[d])) return false;
  }
  return true;
}

uint64_t Volume(const std::vector<int64_t>& lo, const std::vector<int64_t>& hi) {
  uint64_t v = 1;
  for (size_t d = 0; d < lo.size(); ++d) v *= static_cast<uint64_t>(hi[d] - lo[d]);
  return v;
}

// Row-major byte strides of `shape`.
std::vector<uint64_t> Strides(const std::vector<int64_t>& shape, uint64_t elem) {
  std::vector<uint64_t> s(shape.size());
  uint64_t at = elem;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = at;
    at *= static_cast<uint64_t>(shape[d]);
  }
  return s;
}

// Largest slab of a piece's dim-0 slices read at once when a box is scattered.
constexpr uint64_t kSlabBytes = 64ull << 20;

}  // namespace

struct StepReader::Impl {
  Env* env;
  std::string root;
  Manifest manifest;
  std::map<std::pair<long, int>, std::unique_ptr<Shard>> shards;  // (step, rank)
  uint64_t bytes_read = 0;
  std::vector<uint8_t> bounce;
  std::vector<uint8_t> slab;  // CopyBox: kSlabBytes, or one row of a piece if larger

  // Opens (step, rank) of this world, checking structure (and, for the step being
  // read, the index checksum the MANIFEST pinned).
  Result<Shard*> Get(long step, int rank, uint64_t want_index_xxh3) {
    auto key = std::make_pair(step, rank);
    auto it = shards.find(key);
    if (it != shards.end()) return it->second.get();
    auto s = std::make_unique<Shard>();
    s->path = StepDir(root, step) + "/" + ShardFileName(rank, manifest.world);
    internal::Header h;
    BW_RETURN_IF_ERROR(
        internal::CheckShardFile(env, s->path, step, rank, manifest.world, &h, &s->index));
    if (want_index_xxh3 != 0 && h.index_xxh3 != want_index_xxh3) {
      return DataLoss(s->path +
                      ": index checksum differs from the one MANIFEST recorded "
                      "(the shard was replaced after commit)");
    }
    s->data_start = kHeaderSize + h.index_len;
    BW_ASSIGN_OR_RETURN(s->file, env->OpenReadable(s->path));
    Shard* raw = s.get();
    shards.emplace(key, std::move(s));
    return raw;
  }

  // Reads chunk `i` of tensor `name` as stored by `shard` into dst (len bytes),
  // following references, and checks it against `hash`.
  Status ReadChunk(Shard* shard, const std::string& name, uint64_t i, uint64_t hash, uint8_t* dst,
                   uint64_t len) {
    for (int hop = 0; hop < 16; ++hop) {
      const TensorEntry* e = shard->index.Find(name);
      if (e == nullptr || i >= e->chunks.size()) {
        return DataLoss(shard->path + ": referenced tensor '" + name + "' chunk " +
                        std::to_string(i) + " is missing");
      }
      const ChunkLoc& loc = e->chunks[i];
      if (loc.hash != hash) {
        return DataLoss(shard->path + ": tensor '" + name + "' chunk " + std::to_string(i) +
                        " checksum disagrees with the referencing shard");
      }
      if (loc.local()) {
        BW_RETURN_IF_ERROR(shard->file->ReadAt(shard->data_start + loc.offset, dst, len));
        bytes_read += len;
        if (internal::Hash(dst, len) != hash) {
          return DataLoss(shard->path + ": tensor '" + name + "' chunk " + std::to_string(i) +
                          " checksum mismatch (bytes " +
                          std::to_string(shard->data_start + loc.offset) + ".." +
                          std::to_string(shard->data_start + loc.offset + len) + ")");
        }
        return Status::Ok();
      }
      BW_ASSIGN_OR_RETURN(shard, Get(loc.ref_step, loc.ref_rank, 0));
    }
    return DataLoss("tensor '" + name + "' chunk " + std::to_string(i) +
                    ": reference chain longer than 16");
  }

  // Reads bytes [off, off+len) of a tensor piece into dst, chunk by chunk.
  Status ReadRange(Shard* shard, const TensorEntry& e, uint64_t off, uint64_t len, uint8_t* dst) {
    const uint64_t cs = shard->index.chunk_size;
    const uint64_t nb = e.meta.nbytes();
    while (len > 0) {
      const uint64_t i = off / cs;
      const uint64_t c0 = i * cs;
      const uint64_t clen = std::min(cs, nb - c0);
      const uint64_t within = off - c0;
      const uint64_t take = std::min(len, clen - within);
      if (within == 0 && take == clen) {
        BW_RETURN_IF_ERROR(ReadChunk(shard, e.meta.name, i, e.chunks[i].hash, dst, clen));
      } else {
        bounce.resize(clen);
        BW_RETURN_IF_ERROR(ReadChunk(shard, e.meta.name, i, e.chunks[i].hash, bounce.data(), clen));
        std::memcpy(dst, bounce.data() + within, take);
      }
      dst += take;
      off += take;
      len -= take;
    }
    return Status::Ok();
  }

  // Copies the part [lo, hi) (global coordinates) of a saved piece into dst, the
  // region of `want` at offsets `o`, row-major.
  Status CopyBox(const Box& b, const TensorMeta& want, const std::vector<int64_t>& o, uint8_t* dst);
};

StepReader::StepReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StepReader::~StepReader() = default;

Result<std::unique_ptr<StepReader>> StepReader::Open(Env* env, const std::string& root, long step) {
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->root = root;
  BW_ASSIGN_OR_RETURN(impl->manifest, ReadCommitted(env, root, step));
  for (const ManifestShard& s : impl->manifest.shards) {
    BW_RETURN_IF_ERROR(impl->Get(step, s.rank, s.index_xxh3).status());
  }
  return std::unique_ptr<StepReader>(new StepReader(std::move(impl)));
}

const Manifest& StepReader::manifest() const { return impl_->manifest; }

const ShardIndex& StepReader::index(int rank) const {
  return impl_->shards.at({impl_->manifest.step, rank})->index;
}

uint64_t StepReader::bytes_read() const { return impl_->bytes_read; }

Status StepReader::Impl::CopyBox(const Box& b, const TensorMeta& want,
                                 const std::vector<int64_t>& o, uint8_t* dst) {
  const TensorMeta& pm = b.entry->meta;
  const std::vector<int64_t> po = pm.Offsets();
  const size_t n = po.size();
  const uint64_t elem = DTypeSize(want.dtype);
  const std::vector<uint64_t> ps = Strides(pm.shape, elem), ws = Strides(want.shape, elem);
  // Trailing dims the box spans whole in both the piece and the target are one
  // contiguous run with the dim before them; k is the first dim of that run.
  size_t k = n - 1;
  auto whole = [&](size_t d) {
    return b.lo[d] == po[d] && b.hi[d] == po[d] + pm.shape[d] && b.lo[d] == o[d] &&
           b.hi[d] == o[d] + want.shape[d];
  };
  while (k > 0 && whole(k)) --k;
  const uint64_t run = static_cast<uint64_t>(b.hi[k] - b.lo[k]) * ps[k];
  if (k == 0) {  // whole dim-0 slices: contiguous in both, read straight into dst
    return ReadRange(b.shard, *b.entry, static_cast<uint64_t>(b.lo[0] - po[0]) * ps[0], run,
                     dst + static_cast<uint64_t>(b.lo[0] - o[0]) * ws[0]);
  }
  // Otherwise slabs of the piece's dim-0 slices are read and scattered run by run.
  const int64_t slab_rows = static_cast<int64_t>(std::max<uint64_t>(1, kSlabBytes / ps[0]));
  for (int64_t r0 = b.lo[0]; r0 < b.hi[0]; r0 += slab_rows) {
    const int64_t r1 = std::min(b.hi[0], r0 + slab_rows);
    slab.resize(static_cast<uint64_t>(r1 - r0) * ps[0]);
    BW_RETURN_IF_ERROR(ReadRange(b.shard, *b.entry, static_cast<uint64_t>(r0 - po[0]) * ps[0],
                                 slab.size(), slab.data()));
    std::vector<int64_t> idx(b.lo.begin(), b.lo.begin() + k);  // odometer over dims [0, k)
    idx[0] = r0;
    while (true) {
      uint64_t from = static_cast<uint64_t>(idx[0] - r0) * ps[0];
      uint64_t to = static_cast<uint64_t>(idx[0] - o[0]) * ws[0];
      for (size_t d = 1; d < k; ++d) {
        from += static_cast<uint64_t>(idx[d] - po[d]) * ps[d];
        to += static_cast<uint64_t>(idx[d] - o[d]) * ws[d];
      }
      from += static_cast<uint64_t>(b.lo[k] - po[k]) * ps[k];
      to += static_cast<uint64_t>(b.lo[k] - o[k]) * ws[k];
      std::memcpy(dst + to, slab.data() + from, run);
      size_t d = k;
      while (d-- > 0) {
        if (++idx[d] < (d == 0 ? r1 : b.hi[d])) break;
        idx[d] = d == 0 ? r0 : b.lo[d];
      }
      if (d == static_cast<size_t>(-1)) break;
    }
  }
  return Status::Ok();
}

Status StepReader::Load(const TensorMeta& want, void* dst_void, int prefer_rank) {
  BW_RETURN_IF_ERROR(want.Validate());
  uint8_t* dst = static_cast<uint8_t*>(dst_void);
  const long step = impl_->manifest.step;
  std::vector<std::pair<Shard*, const TensorEntry*>> pieces;
  for (const ManifestShard& ms : impl_->manifest.shards) {
    Shard* s = impl_->shards.at({step, ms.rank}).get();
    if (const TensorEntry* e = s->index.Find(want.name)) pieces.emplace_back(s, e);
  }
  if (pieces.empty()) {
    return NotFound("tensor '" + want.name + "' is not in step " + std::to_string(step));
  }
  const std::vector<int64_t> g = want.GlobalShape(), o = want.Offsets();
  for (const auto& [s, e] : pieces) {
    if (e->meta.dtype != want.dtype) {
      return InvalidArgument("tensor '" + want.name + "' was saved as " + DTypeName(e->meta.dtype) +
                             ", asked for " + DTypeName(want.dtype));
    }
    if (e->meta.GlobalShape() != g) {
      return InvalidArgument("tensor '" + want.name + "' was saved with global shape " +
                             internal::Dims(e->meta.GlobalShape()) + ", asked for " +
                             internal::Dims(g));
    }
  }
  // Exact piece: read straight into dst, preferring the asked-for rank's copy.
  std::stable_sort(pieces.begin(), pieces.end(), [&](const auto& a, const auto& b) {
    return (a.first->index.rank == prefer_rank) > (b.first->index.rank == prefer_rank);
  });
  for (const auto& [s, e] : pieces) {
    if (e->meta.shape == want.shape && e->meta.Offsets() == o) {
      return impl_->ReadRange(s, *e, 0, want.nbytes(), dst);
    }
  }
  const uint64_t want_volume = want.nbytes() / DTypeSize(want.dtype);
  if (want_volume == 0) return Status::Ok();
  if (want.shape.empty()) return NotFound("scalar tensor '" + want.name + "' has no exact piece");
  // Stitching: the region is assembled from every saved piece overlapping it, one
  // copy per distinct piece (replicas are read once).
  const size_t n = g.size();
  std::vector<int64_t> want_hi(n);
  for (size_t d = 0; d < n; ++d) want_hi[d] = o[d] + want.shape[d];
  std::vector<Box> boxes;
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;  // (offsets, shape)
  for (const auto& [s, e] : pieces) {
    const std::vector<int64_t> po = e->meta.Offsets();
    Box b{s, e, std::vector<int64_t>(n), std::vector<int64_t>(n)};
    bool empty = false;
    for (size_t d = 0; d < n; ++d) {
      b.lo[d] = std::max(o[d], po[d]);
      b.hi[d] = std::min(want_hi[d], po[d] + e->meta.shape[d]);
      empty = empty || b.lo[d] >= b.hi[d];
    }
    if (empty || !seen.insert({po, e->meta.shape}).second) continue;
    boxes.push_back(std::move(b));
  }
  // Distinct pieces of one save never overlap; a step whose pieces do is refused
  // rather than stitched from whichever copy comes last. Sweep along dim 0.
  std::sort(boxes.begin(), boxes.end(),
            [](const Box& a, const Box& b) { return a.lo[0] < b.lo[0]; });
  std::vector<const Box*> active;
  uint64_t covered = 0;
  for (const Box& b : boxes) {
    std::erase_if(active, [&](const Box* a) { return a->hi[0] <= b.lo[0]; });
    for (const Box* a : active) {
      if (!Overlap(*a, b)) continue;
      return DataLoss(
          "tensor '" + want.name + "' of step " + std::to_string(step) +
          ": the pieces saved by rank " + std::to_string(a->shard->index.rank) + " (" +
          internal::Dims(a->entry->meta.shape) + " at " + internal::Dims(a->entry->meta.Offsets()) +
          ") and rank " + std::to_string(b.shard->index.rank) + " (" +
          internal::Dims(b.entry->meta.shape) + " at " + internal::Dims(b.entry->meta.Offsets()) +
          ") overlap; the step's sharding is inconsistent");
    }
    active.push_back(&b);
    covered += Volume(b.lo, b.hi);
  }
  if (covered < want_volume) {
    // Pieces that span every dimension but 0 leave whole rows out: name the first.
    int64_t at = o[0];
    bool rows = true;
    for (const Box& b : boxes) {
      for (size_t d = 1; d < n; ++d) rows = rows && b.lo[d] == o[d] && b.hi[d] == want_hi[d];
      if (rows && b.lo[0] <= at) at = std::max(at, b.hi[0]);
    }
    if (rows) {
      int64_t next = want_hi[0];
      for (const Box& b : boxes) {
        if (b.lo[0] > at) next = std::min(next, b.lo[0]);
      }
      return NotFound("tensor '" + want.name + "': rows " + std::to_string(at) + ".." +
                      std::to_string(next) + " of dim 0 were not saved by any rank of step " +
                      std::to_string(step));
    }
    return NotFound("tensor '" + want.name + "': the pieces saved in step " + std::to_string(step) +
                    " cover " + std::to_string(covered) + " of the " + std::to_string(want_volume) +
                    " elements of the wanted piece " + internal::Dims(want.shape) + " at " +
                    internal::Dims(o) + " (global " + internal::Dims(g) +
                    "); the rest was not saved by any rank");
  }
  for (const Box& b : boxes) BW_RETURN_IF_ERROR(impl_->CopyBox(b, want, o, dst));
  return Status::Ok();
}

Result<std::vector<OwnedBlob>> ReadRankTensors(Env* env, const std::string& root, long step,
                                               int rank) {
  BW_ASSIGN_OR_RETURN(auto reader, StepReader::Open(env, root, step));
  if (rank < 0 || rank >= reader->manifest().world) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not in step " +
                           std::to_string(step) + " (world " +
                           std::to_string(reader->manifest().world) + ")");
  }
  std::vector<OwnedBlob> out;
  for (const TensorEntry& e : reader->index(rank).tensors) {
    OwnedBlob b;
    b.name = e.meta.name;
    b.data.resize(e.meta.nbytes());
    BW_RETURN_IF_ERROR(reader->Load(e.meta, b.data.data(), rank));
    out.push_back(std::move(b));
  }
  return out;
}

Status VerifyStep(Env* env, const std::string& root, long step, bool full, VerifyReport* report) {
  VerifyReport local;
  VerifyReport* r = report != nullptr ? report : &local;
  BW_ASSIGN_OR_RETURN(auto reader, StepReader::Open(env, root, step));
  if (!full) return Status::Ok();
  std::vector<uint8_t> buf;
  // A bad chunk read through several tensors or ranks (references) is one problem,
  // naming who read it.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> readers;
  for (const ManifestShard& ms : reader->manifest().shards) {
    for (const TensorEntry& e : reader->index(ms.rank).tensors) {
      buf.resize(e.meta.nbytes());
      Status st = reader->Load(e.meta, buf.data(), ms.rank);
      if (!st.ok()) {
        auto [it, fresh] = readers.try_emplace(st.message());
        if (fresh) order.push_back(st.message());
        it->second.push_back("rank " + std::to_string(ms.rank) + " tensor '" + e.meta.name + "'");
        continue;
      }
      r->chunks += e.chunks.size();
      r->bytes += e.meta.nbytes();
    }
  }
  for (const std::string& m : order) {
    const std::vector<std::string>& who = readers[m];
    std::string p = m + " (read by " + who.front();
    if (who.size() > 1) {
      p += " and " + std::to_string(who.size() - 1) + " more: ";
      for (size_t i = 1; i < who.size() && i <= 4; ++i) p += (i > 1 ? ", " : "") + who[i];
      if (who.size() > 5) p += ", ...";
    }
    r->problems.push_back(p + ")");
  }
  if (!r->problems.empty()) {
    return DataLoss("step " + std::to_string(step) + ": " + r->problems.front() +
                    (r->problems.size() > 1
                         ? " (and " + std::to_string(r->problems.size() - 1) + " more)"
                         : ""));
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
