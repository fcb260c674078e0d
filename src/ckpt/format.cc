#include "ckpt/format.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

namespace bulwark::ckpt::internal {
namespace {

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Hash(const void* data, size_t n) { return XXH3_64bits(data, n); }

uint64_t CopyAndHash(void* dst, const void* src, size_t n) {
  constexpr size_t kBlock = 64 << 10;  // well inside L2
  if (n <= kBlock) {
    std::memcpy(dst, src, n);
    return XXH3_64bits(dst, n);
  }
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) {  // out of memory for 576 bytes: two passes still give the same hash
    std::memcpy(dst, src, n);
    return XXH3_64bits(dst, n);
  }
  XXH3_64bits_reset(st);
  auto* to = static_cast<uint8_t*>(dst);
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    std::memcpy(to + off, from + off, len);
    XXH3_64bits_update(st, to + off, len);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string Dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';  // not `(i ? "," : "") + ...`: GCC 12 -Wrestrict false positive
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ParseHex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

void EncodeHeader(const Header& h, uint8_t out[kHeaderSize]) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out, kHeaderMagic, 8);
  Put32(out + 8, h.version);
  Put32(out + 12, static_cast<uint32_t>(kHeaderSize));
  Put64(out + 16, static_cast<uint64_t>(h.step));
  Put32(out + 24, static_cast<uint32_t>(h.rank));
  Put32(out + 28, static_cast<uint32_t>(h.world));
  Put64(out + 32, h.index_len);
  Put64(out + 40, h.index_xxh3);
  Put64(out + 48, h.file_size);
  Put64(out + 56, Hash(out, 56));
}

Status DecodeHeader(const uint8_t in[kHeaderSize], const std::string& what, Header* h) {
  if (std::memcmp(in, kHeaderMagic, 8) != 0) {
    return DataLoss(what + ": bad header magic (not a Bulwark shard, or corrupted)");
  }
  if (Get64(in + 56) != Hash(in, 56)) return DataLoss(what + ": header checksum mismatch");
  h->version = Get32(in + 8);
  if (h->version != kFormatVersion) {
    return DataLoss(what + ": unsupported shard format version " + std::to_string(h->version) +
                    " (this build reads version " + std::to_string(kFormatVersion) + ")");
  }
  if (Get32(in + 12) != kHeaderSize) return DataLoss(what + ": bad header size field");
  h->step = static_cast<long>(Get64(in + 16));
  h->rank = static_cast<int>(Get32(in + 24));
  h->world = static_cast<int>(Get32(in + 28));
  h->index_len = Get64(in + 32);
  h->index_xxh3 = Get64(in + 40);
  h->file_size = Get64(in + 48);
  return Status::Ok();
}

void EncodeFooter(const Footer& f, uint8_t out[kFooterSize]) {
  std::memcpy(out, kFooterMagic, 8);
  Put64(out + 8, f.file_size);
  Put64(out + 16, f.index_xxh3);
  Put64(out + 24, Hash(out, 24));
}

Status DecodeFooter(const uint8_t in[kFooterSize], const std::string& what, Footer* f) {
  if (std::memcmp(in, kFooterMagic, 8) != 0) {
    return DataLoss(what + ": bad footer magic (file truncated or corrupted)");
  }
  if (Get64(in + 24) != Hash(in, 24)) return DataLoss(what + ": footer checksum mismatch");
  f->file_size = Get64(in + 8);
  f->index_xxh3 = Get64(in + 16);
  return Status::Ok();
}

namespace {

using Json = nlohmann::json;

}  // namespace

void MetaToJson(const TensorMeta& m, void* out) {
  Json& j = *static_cast<Json*>(out);
  j["name"] = m.name;
  j["dtype"] = DTypeName(m.dtype);
  j["shape"] = m.shape;
  if (!m.global_shape.empty()) j["global_shape"] = m.global_shape;
  if (!m.offsets.empty()) j["offsets"] = m.offsets;
  if (m.replicated) j["replicated"] = true;
  j["nbytes"] = m.nbytes();
}

Status MetaFromJson(const void* in, const std::string& what, TensorMeta* m) {
  const Json& j = *static_cast<const Json*>(in);
  try {
    m->name = j.at("name").get<std::string>();
    Result<DType> d = ParseDType(j.at("dtype").get<std::string>());
    if (!d.ok()) return DataLoss(what + ": tensor '" + m->name + "': " + d.status().message());
    m->dtype = *d;
    m->shape = j.at("shape").get<std::vector<int64_t>>();
    m->global_shape = j.value("global_shape", std::vector<int64_t>{});
    m->offsets = j.value("offsets", std::vector<int64_t>{});
    m->replicated = j.value("replicated", false);
    Status v = m->Validate();
    if (!v.ok()) return DataLoss(what + ": " + v.message());
    if (j.at("nbytes").get<uint64_t>() != m->nbytes()) {
      return DataLoss(what + ": tensor '" + m->name + "' nbytes disagrees with its shape");
    }
  } catch (const std::exception& e) {
    return DataLoss(what + ": malformed tensor entry: " + e.what());
  }
  return Status::Ok();
}

std::string EncodeIndex(const ShardIndex& index) {
  Json j;
  j["format"] = kFormatVersion;
  j["step"] = index.step;
  j["rank"] = index.rank;
  j["world"] = index.world;
  j["chunk_size"] = index.chunk_size;
  Json tensors = Json::array();
  for (const TensorEntry& t : index.tensors) {
    Json e;
    MetaToJson(t.meta, &e);
    Json chunks = Json::array();
    for (const ChunkLoc& c : t.chunks) {
      if (c.local()) {
        chunks.push_back(Json::array({Hex64(c.hash), c.offset}));
      } else {
        chunks.push_back(Json::array({Hex64(c.hash), c.ref_step, c.ref_rank}));
      }
    }
    e["chunks"] = std::move(chunks);
    tensors.push_back(std::move(e));
  }
  j["tensors"] = std::move(tensors);
  return j.dump();
}

Status DecodeIndex(const std::string& json, uint64_t data_len, const std::string& what,
                   ShardIndex* index) {
  *index = ShardIndex();
  try {
    Json j = Json::parse(json);
    if (j.at("format").get<uint32_t>() != kFormatVersion) {
      return DataLoss(what + ": index format " + j.at("format").dump() + " is not " +
                      std::to_string(kFormatVersion));
    }
    index->step = j.at("step").get<long>();
    index->rank = j.at("rank").get<int>();
    index->world = j.at("world").get<int>();
    index->chunk_size = j.at("chunk_size").get<uint64_t>();
    if (index->chunk_size == 0) return DataLoss(what + ": chunk_size is 0");
    // Local chunk extents, to check they tile the data region exactly.
    std::vector<std::pair<uint64_t, uint64_t>> extents;
    std::map<std::string, int> seen;
    for (const Json& t : j.at("tensors")) {
      TensorEntry e;
      BW_RETURN_IF_ERROR(MetaFromJson(&t, what, &e.meta));
      if (!seen.emplace(e.meta.name, 1).second) {
        return DataLoss(what + ": tensor '" + e.meta.name + "' appears twice");
      }
      const uint64_t nb = e.meta.nbytes();
      const uint64_t n_chunks = ChunkCount(nb, index->chunk_size);
      const Json& chunks = t.at("chunks");
      if (chunks.size() != n_chunks) {
        return DataLoss(what + ": tensor '" + e.meta.name + "' lists " +
                        std::to_string(chunks.size()) + " chunks, expected " +
                        std::to_string(n_chunks));
      }
      for (uint64_t i = 0; i < n_chunks; ++i) {
        const Json& c = chunks[i];
        ChunkLoc loc;
        if (!c.is_array() || (c.size() != 2 && c.size() != 3) ||
            !ParseHex64(c[0].get<std::string>(), &loc.hash)) {
          return DataLoss(what + ": tensor '" + e.meta.name + "' chunk " + std::to_string(i) +
                          " is malformed");
        }
        const uint64_t len = std::min(index->chunk_size, nb - i * index->chunk_size);
        if (c.size() == 2) {
          loc.offset = c[1].get<uint64_t>();
          if (loc.offset > data_len || len > data_len - loc.offset) {
            return DataLoss(what + ": tensor '" + e.meta.name + "' chunk " + std::to_string(i) +
                            " lies outside the data region");
          }
          extents.emplace_back(loc.offset, len);
        } else {
          loc.ref_step = c[1].get<long>();
          loc.ref_rank = c[2].get<int>();
          if (loc.ref_step < 0 || loc.ref_step > index->step || loc.ref_rank < 0 ||
              loc.ref_rank >= index->world ||
              (loc.ref_step == index->step && loc.ref_rank == index->rank)) {
            return DataLoss(what + ": tensor '" + e.meta.name + "' chunk " + std::to_string(i) +
                            " has an invalid reference");
          }
        }
        e.chunks.push_back(loc);
      }
      index->tensors.push_back(std::move(e));
    }
    std::sort(extents.begin(), extents.end());
    uint64_t expect = 0;
    for (const auto& [off, len] : extents) {
      if (off != expect) return DataLoss(what + ": local chunks do not tile the data region");
      expect += len;
    }
    if (expect != data_len) {
      return DataLoss(what + ": index covers " + std::to_string(expect) +
                      " data bytes but the data region has " + std::to_string(data_len));
    }
  } catch (const std::exception& e) {
    return DataLoss(what + ": malformed index JSON: " + e.what());
  }
  return Status::Ok();
}

int ReplicaOwner(const std::string& name, uint64_t chunk, int world) {
  if (world <= 1) return 0;
  uint64_t h = XXH3_64bits(name.data(), name.size());
  return static_cast<int>((h + chunk) % static_cast<uint64_t>(world));
}

}  // namespace bulwark::ckpt::internal

namespace bulwark::ckpt {
namespace {

struct DTypeInfo {
  DType d;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kU8, "uint8", 1},      {DType::kI8, "int8", 1},     {DType::kI16, "int16", 2},
    {DType::kI32, "int32", 4},     {DType::kI64, "int64", 8},   {DType::kF16, "float16", 2},
    {DType::kBF16, "bfloat16", 2}, {DType::kF32, "float32", 4}, {DType::kF64, "float64", 8},
    {DType::kBool, "bool", 1},
};

}  // namespace

uint64_t ChunkHash(const void* data, size_t n) { return XXH3_64bits(data, n); }

const char* DTypeName(DType d) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.d == d) return i.name;
  }
  return "unknown";
}

size_t DTypeSize(DType d) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.d == d) return i.size;
  }
  return 1;
}

Result<DType> ParseDType(const std::string& s) {
  std::string names;
  for (const DTypeInfo& i : kDTypes) {
    if (s == i.name) return i.d;
    names += std::string(names.empty() ? "" : ", ") + i.name;
  }
  return InvalidArgument("unknown dtype '" + s + "' (known: " + names + ")");
}

uint64_t TensorMeta::nbytes() const {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

std::vector<int64_t> TensorMeta::GlobalShape() const {
  return global_shape.empty() ? shape : global_shape;
}

std::vector<int64_t> TensorMeta::Offsets() const {
  return offsets.empty() ? std::vector<int64_t>(shape.size(), 0) : offsets;
}

std::string TensorMeta::PieceString() const {
  return internal::Dims(shape) + " at " + internal::Dims(Offsets()) + " of " +
         internal::Dims(GlobalShape());
}

Status TensorMeta::Validate() const {
  if (name.empty()) return InvalidArgument("tensor name must not be empty");
  uint64_t bytes = DTypeSize(dtype);
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  for (int64_t d : shape) {
    if (d < 0)
      return InvalidArgument("tensor '" + name + "' has a negative dimension " +
                             internal::Dims(shape));
    if (!empty &&
        (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > (1ull << 62))) {
      return InvalidArgument("tensor '" + name + "' of shape " + internal::Dims(shape) +
                             " is larger than 2^62 bytes");
    }
  }
  std::vector<int64_t> g = GlobalShape(), o = Offsets();
  if (g.size() != shape.size() || o.size() != shape.size()) {
    return InvalidArgument("tensor '" + name + "': shape " + internal::Dims(shape) +
                           ", global_shape " + internal::Dims(g) + " and offsets " +
                           internal::Dims(o) + " must have the same rank");
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t end = 0;
    if (o[i] < 0 || __builtin_add_overflow(o[i], shape[i], &end) || end > g[i]) {
      return InvalidArgument("tensor '" + name + "': piece " + internal::Dims(shape) +
                             " at offsets " + internal::Dims(o) + " does not fit in global_shape " +
                             internal::Dims(g));
    }
  }
  return Status::Ok();
}

const TensorEntry* ShardIndex::Find(const std::string& n) const {
  for (const TensorEntry& t : tensors) {
    if (t.meta.name == n) return &t;
  }
  return nullptr;
}

std::vector<TensorView> BlobsToTensors(const std::vector<Blob>& blobs) {
  std::vector<TensorView> out;
  for (const Blob& b : blobs) {
    TensorView v;
    v.meta.name = b.name;
    v.meta.dtype = DType::kU8;
    v.meta.shape = {static_cast<int64_t>(b.size)};
    v.data = b.data;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace bulwark::ckpt
