// Shared helpers of the checkpoint engine's tests (test-only; header-only):
// status assertions, temporary directories, and tensors with random bytes.
// Not thread-safe beyond what the functions state; each test owns what it makes.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/staging.h"
#include "gtest/gtest.h"

#define BW_ASSERT_OK(expr)                                 \
  do {                                                     \
    const ::bulwark::Status _st = (expr);                  \
    ASSERT_TRUE(_st.ok()) << #expr ": " << _st.ToString(); \
  } while (0)
#define BW_EXPECT_OK(expr)                                 \
  do {                                                     \
    const ::bulwark::Status _st = (expr);                  \
    EXPECT_TRUE(_st.ok()) << #expr ": " << _st.ToString(); \
  } while (0)

namespace bulwark::ckpt::test_util {

// A fresh directory "<base>/<prefix>.XXXXXX"; "" if it cannot be made.
inline std::string MakeTempDir(const std::string& base, const std::string& prefix) {
  std::string tmpl = base + "/" + prefix + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// A tensor with owned bytes.
struct T {
  TensorMeta meta;
  std::vector<uint8_t> bytes;
  TensorView view() const { return {meta, bytes.data(), nullptr}; }
};

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng() >> 13);
  return out;
}

inline T MakeT(const std::string& name, DType dt, std::vector<int64_t> shape, uint64_t seed,
               std::vector<int64_t> global = {}, std::vector<int64_t> offsets = {},
               bool replicated = false) {
  T t;
  t.meta.name = name;
  t.meta.dtype = dt;
  t.meta.shape = std::move(shape);
  t.meta.global_shape = std::move(global);
  t.meta.offsets = std::move(offsets);
  t.meta.replicated = replicated;
  t.bytes = RandomBytes(t.meta.nbytes(), seed);
  return t;
}

inline std::vector<TensorView> Views(const std::vector<T>& ts) {
  std::vector<TensorView> out;
  for (const T& t : ts) out.push_back(t.view());
  return out;
}

// Stages `views` as a STAGED slot, not sealed (StageFilled with a plain copy, no
// hashes): what a writer that does not hash leaves, for the tests of the readers'
// sealing paths. Stager::Stage seals as it copies.
inline Result<StageResult> StageUnsealed(Stager& s, long step,
                                         const std::vector<TensorView>& views) {
  std::vector<TensorMeta> metas;
  for (const TensorView& v : views) metas.push_back(v.meta);
  return s.StageFilled(step, metas, [&views](const std::vector<uint8_t*>& dsts) {
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i].meta.nbytes() > 0) std::memcpy(dsts[i], views[i].data, views[i].meta.nbytes());
    }
    return Status::Ok();
  });
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

}  // namespace bulwark::ckpt::test_util
