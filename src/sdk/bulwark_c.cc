#include "sdk/bulwark_c.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "metrics/mfu.h"
#include "sdk/bulwark.h"

struct bw_blobs {
  std::vector<bulwark::ckpt::OwnedBlob> blobs;
};

struct bw_reader {
  std::unique_ptr<bulwark::sdk::LoadSession> session;
};

namespace {

using bulwark::Status;
using bulwark::sdk::Client;

thread_local std::string g_last_error;

Client& TheClient() {
  // Never destroyed (safe at process exit); at exit the reports the agent's full queue
  // held back (the last steps, a checkpoint's `staged`) still go out, within a bound.
  static Client* c = [] {
    std::atexit([] { TheClient().FlushReports(); });
    return new Client();
  }();
  return *c;
}

int Fail(const Status& st) {
  g_last_error = st.ToString();
  return -static_cast<int>(st.code());
}

// Initialises from the environment on first use; returns BW_OK or an error.
int Ensure() {
  Client& c = TheClient();
  if (c.initialized()) return BW_OK;
  Status st = c.InitFromEnvironment();
  return st.ok() ? BW_OK : Fail(st);
}

// A tensor's meta from the C arrays: dims taken from `shape` (and, when non-null,
// `global_shape` and `offsets`), each holding `ndim` entries. `fn` names the
// calling function in errors.
bulwark::Result<bulwark::ckpt::TensorMeta> MetaFromC(const char* fn, const char* name,
                                                     const char* dtype, int ndim,
                                                     const long long* shape,
                                                     const long long* global_shape,
                                                     const long long* offsets) {
  if (name == nullptr || dtype == nullptr) {
    return bulwark::InvalidArgument(std::string(fn) + ": a tensor has a null name or dtype");
  }
  const std::string what = std::string(fn) + ": tensor '" + name + "'";
  if (ndim < 0 || ndim > 64) {
    return bulwark::InvalidArgument(what + " has " + std::to_string(ndim) +
                                    " dimensions; 0 to 64 are supported");
  }
  if (ndim > 0 && shape == nullptr) {
    return bulwark::InvalidArgument(what + " has " + std::to_string(ndim) +
                                    " dimensions but the shape array is null");
  }
  auto dt = bulwark::ckpt::ParseDType(dtype);
  if (!dt.ok()) return dt.status().Annotate(what);
  bulwark::ckpt::TensorMeta m;
  m.name = name;
  m.dtype = *dt;
  m.shape.assign(shape, shape + ndim);
  if (global_shape != nullptr) m.global_shape.assign(global_shape, global_shape + ndim);
  if (offsets != nullptr) m.offsets.assign(offsets, offsets + ndim);
  if (Status st = m.Validate(); !st.ok()) return st.Annotate(fn);
  return m;
}

// bw_ckpt_save[_sharded]: `fn` names the entry point in errors.
int SaveC(const char* fn, long step, size_t n, const char* const* names, const char* const* dtypes,
          const int* ndims, const long long* shapes, const long long* global_shapes,
          const long long* offsets, const void* const* data, const int* flags) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  if (n > 0 && (names == nullptr || dtypes == nullptr || ndims == nullptr || data == nullptr ||
                flags == nullptr)) {
    return Fail(bulwark::InvalidArgument(std::string(fn) +
                                         ": names, dtypes, ndims, data and flags must be "
                                         "non-null"));
  }
  std::vector<bulwark::ckpt::TensorView> ts(n);
  size_t dim = 0;
  for (size_t i = 0; i < n; ++i) {
    if (names[i] == nullptr || dtypes[i] == nullptr) {
      return Fail(bulwark::InvalidArgument(std::string(fn) + ": tensor " + std::to_string(i) +
                                           " has a null name or dtype"));
    }
    auto at = [&](const long long* a) { return a != nullptr ? a + dim : a; };
    auto m =
        MetaFromC(fn, names[i], dtypes[i], ndims[i], at(shapes), at(global_shapes), at(offsets));
    if (!m.ok()) return Fail(m.status());
    dim += static_cast<size_t>(ndims[i]);
    bulwark::ckpt::TensorMeta& meta = ts[i].meta = std::move(*m);
    if (meta.GlobalShape() == meta.shape &&
        meta.Offsets() == std::vector<int64_t>(meta.shape.size(), 0)) {
      meta.global_shape.clear();  // whole: stored like an unsharded tensor
      meta.offsets.clear();
    }
    meta.replicated = (flags[i] & 1) != 0;
    if (meta.replicated && !meta.global_shape.empty()) {
      return Fail(bulwark::InvalidArgument(
          std::string(fn) + ": tensor '" + meta.name + "' is the piece " + meta.PieceString() +
          " and flagged replicated; a replicated tensor is whole and identical on every "
          "rank: clear bit 0 of its flags"));
    }
    ts[i].data = data[i];
  }
  Status st = TheClient().SaveTensors(step, ts);
  return st.ok() ? BW_OK : Fail(st);
}

}  // namespace

extern "C" {

const char* bw_last_error(void) { return g_last_error.c_str(); }

int bw_init(void) {
  Status st = TheClient().InitFromEnvironment();
  return st.ok() ? BW_OK : Fail(st);
}

int bw_shutdown(void) {
  TheClient().Init({}).ok();  // resets to standalone, closing the sockets
  return BW_OK;
}

int bw_rank(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().config().rank;
}

int bw_world_size(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().config().world_size;
}

long bw_resume_step(void) {
  if (Ensure() != BW_OK) return -1;
  return TheClient().ResumeStep();
}

int bw_should_checkpoint(long step) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().ShouldCheckpoint(step) ? 1 : 0;
}

long bw_skip_from(void) {
  if (Ensure() != BW_OK) return -1;
  return TheClient().SkipFrom();
}

long bw_skip_to(void) {
  if (Ensure() != BW_OK) return -1;
  return TheClient().SkipTo();
}

int bw_poll_injected_nan(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().PollInjectedNan() ? 1 : 0;
}

int bw_poll_injected_sdc(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().PollInjectedSdc() ? 1 : 0;
}

int bw_report_digest(long step, unsigned long long digest, const char* group) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().ReportDigest(step, digest, group ? group : "");
  return st.ok() ? BW_OK : Fail(st);
}

unsigned long long bw_digest(size_t n, const void* const* data, const size_t* lens) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) return 0;
  XXH3_64bits_reset(st);
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != nullptr && lens[i] > 0) XXH3_64bits_update(st, data[i], lens[i]);
  }
  const unsigned long long h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

int bw_mark_step_start(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  TheClient().MarkStepStart();
  return BW_OK;
}

int bw_declare_in_process(int process_group) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().DeclareInProcess(process_group != 0);
  return st.ok() ? BW_OK : Fail(st);
}

int bw_abort_requested(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  return TheClient().AbortRequested() ? 1 : 0;
}

int bw_wait_abort(double timeout_s) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  if (!std::isfinite(timeout_s) || timeout_s < 0) {
    return Fail(bulwark::InvalidArgument("bw_wait_abort: timeout_s must be a finite number >= 0"));
  }
  return TheClient().WaitAbort(timeout_s) ? 1 : 0;
}

int bw_park(const char* error) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().Park(error ? error : "");
  return st.ok() ? BW_OK : Fail(st);
}

int bw_finished(void) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().Finished();
  return st.ok() ? BW_OK : Fail(st);
}

int bw_wait_generation(double timeout_s, char* buf, size_t cap) {
  static thread_local std::string held;  // a message that did not fit the last buffer
  if (int rc = Ensure(); rc != BW_OK) return rc;
  if (held.empty()) {
    auto g = TheClient().WaitGeneration(timeout_s);
    if (!g.ok()) return Fail(g.status());
    held = g->dump(-1, ' ', false, bulwark::Json::error_handler_t::replace);
  }
  if (buf == nullptr || cap <= held.size()) {
    return Fail(bulwark::InvalidArgument("bw_wait_generation: buffer of " + std::to_string(cap) +
                                         " bytes is too small for " +
                                         std::to_string(held.size() + 1)));
  }
  std::memcpy(buf, held.data(), held.size());
  buf[held.size()] = '\0';
  const int n = static_cast<int>(held.size());
  held.clear();
  return n;
}

int bw_report_step(long step, double loss, long long tokens) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().ReportStep(step, loss, tokens);
  return st.ok() ? BW_OK : Fail(st);
}

int bw_report_step_ex(long step, double loss, long long tokens, const bw_step_metrics* m) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  bulwark::sdk::StepMetrics sm;
  if (m != nullptr) {
    if (m->size < offsetof(bw_step_metrics, samples)) {
      return Fail(
          bulwark::InvalidArgument("bw_report_step_ex: bw_step_metrics.size must be "
                                   "sizeof(bw_step_metrics)"));
    }
    bw_step_metrics c{};
    std::memcpy(&c, m, std::min<size_t>(m->size, sizeof c));
    const auto has = [&](size_t end) { return m->size >= end; };
    if (has(offsetof(bw_step_metrics, lr))) sm.samples = c.samples;
    if (has(offsetof(bw_step_metrics, grad_norm))) sm.lr = c.lr;
    if (has(offsetof(bw_step_metrics, data_wait_s))) sm.grad_norm = c.grad_norm;
    if (has(offsetof(bw_step_metrics, compute_s))) sm.data_wait_s = c.data_wait_s;
    if (has(offsetof(bw_step_metrics, optimizer_s))) sm.compute_s = c.compute_s;
    if (has(offsetof(bw_step_metrics, inferred))) sm.optimizer_s = c.optimizer_s;
    if (has(offsetof(bw_step_metrics, inferred) + sizeof(int))) sm.inferred = c.inferred != 0;
    if (has(offsetof(bw_step_metrics, busy_s) + sizeof(double))) sm.busy_s = c.busy_s;
    if (has(offsetof(bw_step_metrics, rng_digest) + sizeof(unsigned long long))) {
      sm.rng_digest = c.rng_digest;
    }
    if (has(offsetof(bw_step_metrics, data_digest) + sizeof(unsigned long long))) {
      sm.data_digest = c.data_digest;
    }
    if (has(offsetof(bw_step_metrics, sum_order) + sizeof(int))) {
      if (c.sum_order < 0 || c.sum_order > 2) {
        return Fail(bulwark::InvalidArgument(
            "bw_report_step_ex: sum_order must be 0 (not reported), 1 (fixed order) or 2 "
            "(order not fixed), got " +
            std::to_string(c.sum_order)));
      }
      sm.sum_order = c.sum_order;
    }
  }
  Status st = TheClient().ReportStep(step, loss, tokens, sm);
  return st.ok() ? BW_OK : Fail(st);
}

int bw_set_model_flops(double flops_per_token) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().SetModelFlops(flops_per_token);
  return st.ok() ? BW_OK : Fail(st);
}

double bw_data_delay(void) {
  if (Ensure() != BW_OK) return 0;
  return TheClient().DataDelay();
}

double bw_peak_flops(const char* gpu_name, const char* dtype) {
  return bulwark::metrics::PeakFlops(gpu_name ? gpu_name : "", dtype ? dtype : "");
}

int bw_save(long step, size_t n, const char* const* names, const void* const* data,
            const size_t* sizes) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  if (n > 0 && (names == nullptr || data == nullptr || sizes == nullptr)) {
    return Fail(bulwark::InvalidArgument("bw_save: names, data and sizes must be non-null"));
  }
  std::vector<bulwark::ckpt::Blob> blobs;
  blobs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (names[i] == nullptr) return Fail(bulwark::InvalidArgument("bw_save: null blob name"));
    blobs.push_back({names[i], data[i], sizes[i]});
  }
  Status st = TheClient().Save(step, blobs);
  return st.ok() ? BW_OK : Fail(st);
}

int bw_commit(long step) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().Commit(step);
  return st.ok() ? BW_OK : Fail(st);
}

int bw_load(long step, bw_blobs** out) {
  if (out == nullptr) return Fail(bulwark::InvalidArgument("bw_load: out must be non-null"));
  *out = nullptr;
  if (int rc = Ensure(); rc != BW_OK) return rc;
  auto r = TheClient().Load(step);
  if (!r.ok()) return Fail(r.status());
  *out = new (std::nothrow) bw_blobs{std::move(r).value()};
  if (*out == nullptr) return Fail(bulwark::Internal("bw_load: out of memory"));
  return BW_OK;
}

size_t bw_blobs_count(const bw_blobs* b) { return b ? b->blobs.size() : 0; }

const char* bw_blobs_name(const bw_blobs* b, size_t i) {
  return (b && i < b->blobs.size()) ? b->blobs[i].name.c_str() : nullptr;
}

const void* bw_blobs_data(const bw_blobs* b, size_t i) {
  return (b && i < b->blobs.size()) ? b->blobs[i].data.data() : nullptr;
}

size_t bw_blobs_size(const bw_blobs* b, size_t i) {
  return (b && i < b->blobs.size()) ? b->blobs[i].data.size() : 0;
}

void bw_blobs_free(bw_blobs* b) { delete b; }

int bw_ckpt_save(long step, size_t n, const char* const* names, const char* const* dtypes,
                 const int* ndims, const long long* shapes, const void* const* data,
                 const int* flags) {
  return SaveC("bw_ckpt_save", step, n, names, dtypes, ndims, shapes, nullptr, nullptr, data,
               flags);
}

int bw_ckpt_save_sharded(long step, size_t n, const char* const* names, const char* const* dtypes,
                         const int* ndims, const long long* shapes, const long long* global_shapes,
                         const long long* offsets, const void* const* data, const int* flags) {
  return SaveC("bw_ckpt_save_sharded", step, n, names, dtypes, ndims, shapes, global_shapes,
               offsets, data, flags);
}

int bw_ckpt_open(long step, int min_tier, bw_reader** out) {
  if (out == nullptr) return Fail(bulwark::InvalidArgument("bw_ckpt_open: out must be non-null"));
  *out = nullptr;
  if (int rc = Ensure(); rc != BW_OK) return rc;
  auto r = TheClient().OpenLoad(step, min_tier);
  if (!r.ok()) return Fail(r.status());
  *out = new (std::nothrow) bw_reader{std::move(r).value()};
  if (*out == nullptr) return Fail(bulwark::Internal("bw_ckpt_open: out of memory"));
  return BW_OK;
}

const char* bw_load_tier(const bw_reader* l) { return l ? l->session->tier().c_str() : ""; }
long bw_load_step(const bw_reader* l) { return l ? l->session->step() : -1; }
size_t bw_load_count(const bw_reader* l) { return l ? l->session->tensors().size() : 0; }

namespace {
const bulwark::ckpt::TensorMeta* MetaAt(const bw_reader* l, size_t i) {
  return (l && i < l->session->tensors().size()) ? &l->session->tensors()[i] : nullptr;
}
}  // namespace

const char* bw_load_name(const bw_reader* l, size_t i) {
  auto* m = MetaAt(l, i);
  return m ? m->name.c_str() : nullptr;
}
const char* bw_load_dtype(const bw_reader* l, size_t i) {
  auto* m = MetaAt(l, i);
  return m ? bulwark::ckpt::DTypeName(m->dtype) : nullptr;
}
int bw_load_ndim(const bw_reader* l, size_t i) {
  auto* m = MetaAt(l, i);
  return m ? static_cast<int>(m->shape.size()) : -1;
}
long long bw_load_dim(const bw_reader* l, size_t i, int d) {
  auto* m = MetaAt(l, i);
  return (m && d >= 0 && d < static_cast<int>(m->shape.size())) ? m->shape[d] : -1;
}
long long bw_load_global_dim(const bw_reader* l, size_t i, int d) {
  auto* m = MetaAt(l, i);
  if (m == nullptr || d < 0 || d >= static_cast<int>(m->shape.size())) return -1;
  return m->GlobalShape()[d];
}
long long bw_load_offset(const bw_reader* l, size_t i, int d) {
  auto* m = MetaAt(l, i);
  if (m == nullptr || d < 0 || d >= static_cast<int>(m->shape.size())) return -1;
  return m->Offsets()[d];
}
size_t bw_load_nbytes(const bw_reader* l, size_t i) {
  auto* m = MetaAt(l, i);
  return m ? m->nbytes() : 0;
}
int bw_load_read(bw_reader* l, size_t i, void* dst, size_t nbytes) {
  auto* m = MetaAt(l, i);
  if (m == nullptr)
    return Fail(bulwark::InvalidArgument("bw_load_read: no tensor " + std::to_string(i)));
  if (nbytes != m->nbytes() || (nbytes > 0 && dst == nullptr)) {
    return Fail(bulwark::InvalidArgument("bw_load_read: tensor '" + m->name + "' has " +
                                         std::to_string(m->nbytes()) + " bytes, destination has " +
                                         std::to_string(nbytes)));
  }
  Status st = l->session->Load(*m, dst);
  return st.ok() ? BW_OK : Fail(st);
}
int bw_load_piece(bw_reader* l, const char* name, const char* dtype, int ndim,
                  const long long* shape, const long long* global_shape, const long long* offsets,
                  void* dst, size_t nbytes) {
  if (l == nullptr) return Fail(bulwark::InvalidArgument("bw_load_piece: the reader is null"));
  auto m = MetaFromC("bw_load_piece", name, dtype, ndim, shape, global_shape, offsets);
  if (!m.ok()) return Fail(m.status());
  if (nbytes != m->nbytes() || (nbytes > 0 && dst == nullptr)) {
    return Fail(bulwark::InvalidArgument(
        "bw_load_piece: tensor '" + m->name + "': the piece " + m->PieceString() + " of " + dtype +
        " has " + std::to_string(m->nbytes()) + " bytes, the destination " +
        (dst == nullptr ? std::string("is null") : "has " + std::to_string(nbytes))));
  }
  Status st = l->session->Load(*m, dst);
  return st.ok() ? BW_OK : Fail(st);
}
void bw_load_close(bw_reader* l) { delete l; }

}  // extern "C"
