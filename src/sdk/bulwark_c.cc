#include "sdk/bulwark_c.h"

#include <new>
#include <string>
#include <vector>

#include "sdk/bulwark.h"

struct bw_blobs {
  std::vector<bulwark::ckpt::OwnedBlob> blobs;
};

namespace {

using bulwark::Status;
using bulwark::sdk::Client;

thread_local std::string g_last_error;

Client& TheClient() {
  static Client* c = new Client();  // never destroyed: safe at process exit
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

int bw_report_step(long step, double loss, long long tokens) {
  if (int rc = Ensure(); rc != BW_OK) return rc;
  Status st = TheClient().ReportStep(step, loss, tokens);
  return st.ok() ? BW_OK : Fail(st);
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

}  // extern "C"
