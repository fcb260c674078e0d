#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "common/json_util.h"
#include "common/net.h"
#include "sdk/bulwark.h"

namespace bulwark::sdk {
namespace {

double ProcessCpuSeconds() {
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace
namespace {

const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "BULWARK_AGENT_SOCK",
                             "BULWARK_RANK_SOCK",
                             "BULWARK_RESUME_STEP",
                             "BULWARK_CKPT_DIR",
                             "BULWARK_CKPT_INTERVAL_STEPS",
                             "BULWARK_CKPT_PERSIST",
                             "BULWARK_SKIP_FROM",
                             "BULWARK_SKIP_TO",
                             "BULWARK_STAGING_DIR",
                             "BULWARK_MEMORY_SLOTS",
                             "BULWARK_CKPT_SHARED_DIR",
                             "BULWARK_ATTEMPT"};

// Parses env[name] as an integer in [lo, hi]; leaves *out untouched if unset/empty.
Status ParseInt(const EnvMap& env, const char* name, long lo, long hi, long* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::Ok();
  const std::string& v = it->second;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') {
    return InvalidArgument("environment variable " + std::string(name) + "='" + v +
                           "' is not an integer; unset it or set a whole number");
  }
  if (x < lo || x > hi) {
    return InvalidArgument("environment variable " + std::string(name) + "=" + v +
                           " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "]");
  }
  *out = x;
  return Status::Ok();
}

std::string Get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

Result<Config> ConfigFromEnv(const EnvMap& env) {
  Config c;
  long rank = 0, world = 1;
  BW_RETURN_IF_ERROR(ParseInt(env, "WORLD_SIZE", 1, 99999, &world));
  BW_RETURN_IF_ERROR(ParseInt(env, "RANK", 0, world - 1, &rank));
  c.rank = static_cast<int>(rank);
  c.world_size = static_cast<int>(world);
  c.agent_sock = Get(env, "BULWARK_AGENT_SOCK");
  c.rank_sock = Get(env, "BULWARK_RANK_SOCK");
  c.ckpt_dir = Get(env, "BULWARK_CKPT_DIR");
  BW_RETURN_IF_ERROR(ParseInt(env, "BULWARK_RESUME_STEP", -1, 999999999999L, &c.resume_step));
  BW_RETURN_IF_ERROR(
      ParseInt(env, "BULWARK_CKPT_INTERVAL_STEPS", 0, 999999999999L, &c.ckpt_interval_steps));
  BW_RETURN_IF_ERROR(ParseInt(env, "BULWARK_SKIP_FROM", -1, 999999999999L, &c.skip_from));
  BW_RETURN_IF_ERROR(ParseInt(env, "BULWARK_SKIP_TO", -1, 999999999999L, &c.skip_to));
  const std::string persist = Get(env, "BULWARK_CKPT_PERSIST");
  if (!persist.empty() && persist != "agent" && persist != "sdk") {
    return InvalidArgument("BULWARK_CKPT_PERSIST: must be agent or sdk (got \"" + persist +
                           "\"); unset it to let the SDK follow BULWARK_CKPT_INTERVAL_STEPS");
  }
  c.persist_by_agent = persist == "agent";
  c.staging_dir = Get(env, "BULWARK_STAGING_DIR");
  c.shared_dir = Get(env, "BULWARK_CKPT_SHARED_DIR");
  BW_RETURN_IF_ERROR(ParseInt(env, "BULWARK_MEMORY_SLOTS", 2, 62, &c.memory_slots));
  BW_RETURN_IF_ERROR(ParseInt(env, "BULWARK_ATTEMPT", 0, 999999999L, &c.attempt));
  return c;
}

EnvMap ProcessEnv() {
  EnvMap env;
  for (const char* v : kVars) {
    if (const char* x = std::getenv(v)) env[v] = x;
  }
  return env;
}

Client::Client(const Clock* clock) : clock_(clock ? clock : SystemClock::Get()) {}

Client::~Client() {
  std::lock_guard<std::mutex> l(mu_);
  ResetLocked();
  if (abort_efd_ >= 0 && abort_efd_pid_ == ::getpid()) ::close(abort_efd_);
}

void Client::SetAbortLocked(bool pending) {
  abort_pending_ = pending;
  if (abort_efd_ < 0 || abort_efd_pid_ != ::getpid()) return;
  uint64_t n = 1;
  if (pending) {
    if (::write(abort_efd_, &n, sizeof n) != sizeof n) {
      // Only a counter at 2^64 - 2 refuses a write; WaitAbort reads the flag as well.
    }
  } else {
    while (::read(abort_efd_, &n, sizeof n) == sizeof n) {
    }
  }
}

void Client::ResetLocked() {
  FlushWithinLocked(kFlushWaitS);  // the reports held back are still the agent's
  outbox_.clear();
  if (fd_ >= 0) {
    ::close(fd_);
    if (!cfg_.rank_sock.empty()) ::unlink(cfg_.rank_sock.c_str());
  }
  fd_ = -1;
  initialized_ = false;
  nan_pending_ = false;
  SetAbortLocked(false);
  next_gen_.reset();
  stall_s_ = 0.0;
  stager_.reset();
}

Status Client::Init(const EnvMap& env) {
  BW_ASSIGN_OR_RETURN(Config cfg, ConfigFromEnv(env));
  std::lock_guard<std::mutex> l(mu_);
  if (abort_efd_ < 0 || abort_efd_pid_ != ::getpid()) {
    // This process's own (a forked child's parent's stays the parent's, closed on exec).
    abort_efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    abort_efd_pid_ = ::getpid();
    if (abort_pending_) SetAbortLocked(true);
  }
  // A new generation of the same rank keeps its socket (the agent may already be
  // writing to it) and its staging ring; anything else starts over.
  const bool same_rank = initialized_ && fd_ >= 0 && cfg.rank_sock == cfg_.rank_sock &&
                         cfg.agent_sock == cfg_.agent_sock && cfg.rank == cfg_.rank;
  const bool same_ring = same_rank && stager_ && cfg.staging_dir == cfg_.staging_dir &&
                         cfg.world_size == cfg_.world_size && cfg.memory_slots == cfg_.memory_slots;
  if (!same_rank) {
    ResetLocked();
    if (!cfg.rank_sock.empty()) {
      Result<Fd> fd = UnixDgramBind(cfg.rank_sock);
      if (!fd.ok()) return fd.status().Annotate("BULWARK_RANK_SOCK");
      fd_ = fd->Release();
    } else if (!cfg.agent_sock.empty()) {
      Result<Fd> fd = UnixDgramSocket();
      if (!fd.ok()) return fd.status();
      fd_ = fd->Release();
    }
  } else {
    if (!same_ring) stager_.reset();
    stall_s_ = 0.0;
    nan_pending_ = false;
    if (cfg.attempt != cfg_.attempt) SetAbortLocked(false);  // that abort ended its generation
  }
  cfg_ = std::move(cfg);
  initialized_ = true;
  last_mark_ = clock_->NowMono();
  last_cpu_ = ProcessCpuSeconds();
  SendHelloLocked();
  return Status::Ok();
}

void Client::SendHelloLocked() {
  Json hello = {{"type", "hello"}, {"rank", cfg_.rank}, {"pid", ::getpid()}};
  if (in_process_) hello["in_process"] = true;
  if (in_process_ && process_group_) hello["process_group"] = true;
  if (cfg_.attempt >= 0) hello["attempt"] = cfg_.attempt;
  if (flops_per_token_ > 0) hello["flops_per_token"] = flops_per_token_;
  SendLocked(hello.dump());
}

bool Client::initialized() const {
  std::lock_guard<std::mutex> l(mu_);
  return initialized_;
}

bool Client::managed() const {
  std::lock_guard<std::mutex> l(mu_);
  return initialized_ && !cfg_.agent_sock.empty();
}

Config Client::config() const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_;
}

void Client::SendLocked(std::string payload) {
  if (fd_ < 0 || cfg_.agent_sock.empty()) return;
  DropInheritedReportsLocked();
  outbox_.push_back(std::move(payload));
  if (outbox_.size() > kMaxOutbox) {
    outbox_.pop_front();
    if (outbox_dropped_++ == 0) {
      std::fprintf(stderr,
                   "bulwark: the agent has not read %zu reports of rank %d; dropping the oldest "
                   "(is the agent stopped?)\n",
                   kMaxOutbox, cfg_.rank);
    }
  }
  FlushOutboxLocked();
}

void Client::DropInheritedReportsLocked() {
  if (outbox_pid_ == ::getpid()) return;
  outbox_.clear();
  outbox_pid_ = ::getpid();
}

bool Client::FlushOutboxLocked() {
  DropInheritedReportsLocked();
  while (!outbox_.empty() && fd_ >= 0 && !cfg_.agent_sock.empty()) {
    const Status st = UnixDgramSend(fd_, cfg_.agent_sock, outbox_.front());
    if (st.code() == Code::kResourceExhausted) return false;
    IgnoreError(st, "sent, or no agent is bound there: a rank without an agent reports nowhere");
    outbox_.pop_front();
  }
  return true;
}

bool Client::FlushWithinLocked(double timeout_s) {
  const double deadline = clock_->NowMono() + timeout_s;
  while (!FlushOutboxLocked()) {
    if (clock_->NowMono() >= deadline) return false;
    clock_->SleepFor(0.002);
  }
  return true;
}

bool Client::FlushReports(double timeout_s) {
  std::lock_guard<std::mutex> l(mu_);
  return FlushWithinLocked(timeout_s);
}

long Client::reports_dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return outbox_dropped_;
}

Status Client::ReportStep(long step, double loss, long long tokens, const StepMetrics& m) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("report_step called before init()");
  DrainLocked();  // chaos that changes this report (loss_spike) or the next steps
  if (loss_spike_factor_ > 1) {
    loss *= loss_spike_factor_;
    loss_spike_factor_ = 0;
  }
  const double now = clock_->NowMono();
  Json msg = {{"type", "step"},
              {"rank", cfg_.rank},
              {"step", step},
              {"tokens", tokens},
              {"step_time", now - last_mark_},
              {"ckpt_stall", stall_s_},
              {"t", clock_->NowWall()}};
  msg["loss"] = std::isfinite(loss) ? Json(loss) : Json(nullptr);
  const std::pair<const char*, double> optional[] = {
      {"samples", m.samples},     {"lr", m.lr},
      {"grad_norm", m.grad_norm}, {"data_wait", m.data_wait_s},
      {"compute", m.compute_s},   {"optimizer", m.optimizer_s}};
  for (const auto& [key, v] : optional) {
    if (std::isfinite(v) && v >= 0) msg[key] = v;
  }
  const double cpu = ProcessCpuSeconds();
  const double busy = std::isfinite(m.busy_s) ? m.busy_s : last_cpu_ >= 0 ? cpu - last_cpu_ : -1;
  if (std::isfinite(busy) && busy >= 0) msg["busy"] = busy;
  last_cpu_ = cpu;
  if (m.inferred) msg["inferred"] = true;
  if (m.rng_digest != 0) msg["rng"] = DigestHex(m.rng_digest);
  if (m.data_digest != 0) msg["data"] = DigestHex(m.data_digest);
  if (m.sum_order == 1 || m.sum_order == 2)
    msg["sums"] = m.sum_order == 1 ? "ordered" : "unordered";
  const double step_time = now - last_mark_;
  last_mark_ = now;
  stall_s_ = 0.0;
  SendLocked(msg.dump());
  if (slow_factor_ > 1) {
    // Chaos slow_rank: the rank's next step takes factor × as long, spent on the CPU (a
    // slower device), not asleep. Real time, not the injected clock; ≤ 2 s a step.
    // The step's own time excludes the previous step's spin, so the slowdown stays
    // `factor`, not compounding.
    const double own = std::max(0.0, step_time - last_spin_s_);
    last_spin_s_ = std::min(2.0, (slow_factor_ - 1) * own);
    const auto t0 = std::chrono::steady_clock::now();
    const auto until = t0 + std::chrono::duration<double>(last_spin_s_);
    volatile unsigned long spin = 0;
    while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  }
  return Status::Ok();
}

double Client::DataDelay() {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return 0;
  DrainLocked();
  return data_delay_s_;
}

Status Client::SetModelFlops(double flops_per_token) {
  if (!std::isfinite(flops_per_token) || flops_per_token <= 0) {
    return InvalidArgument("set_model_flops: flops_per_token must be a finite number > 0 (got " +
                           std::to_string(flops_per_token) + ")");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("set_model_flops called before init()");
  flops_per_token_ = flops_per_token;
  SendLocked(
      Json({{"type", "model"}, {"rank", cfg_.rank}, {"flops_per_token", flops_per_token}}).dump());
  return Status::Ok();
}

void Client::MarkStepStart() {
  std::lock_guard<std::mutex> l(mu_);
  last_mark_ = clock_->NowMono();
  last_cpu_ = ProcessCpuSeconds();
  stall_s_ = 0.0;
}

long Client::ResumeStep() const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.resume_step;
}

bool Client::ShouldCheckpoint(long step) const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.ckpt_interval_steps > 0 && step % cfg_.ckpt_interval_steps == 0;
}

Status Client::SaveTensors(long step, const std::vector<ckpt::TensorView>& tensors) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("save called before init()");
  const double t0 = clock_->NowMono();
  if (!cfg_.staging_dir.empty()) {
    if (!stager_) {
      BW_ASSIGN_OR_RETURN(stager_, ckpt::Stager::Open(cfg_.staging_dir, cfg_.rank, cfg_.world_size,
                                                      static_cast<int>(cfg_.memory_slots)));
    }
    const bool persist = !cfg_.persist_by_agent && cfg_.ckpt_interval_steps > 0 &&
                         step % cfg_.ckpt_interval_steps == 0;
    const double wait_s = persist ? kRingWaitPersistS : kRingWaitS;
    const double deadline = t0 + wait_s;
    // Bounded by tries as well, so an injected clock that stands still cannot hang it.
    const int max_tries = static_cast<int>(wait_s * 1000) + 1;
    Result<ckpt::StageResult> r = stager_->Stage(step, tensors);
    for (int tries = 0; !r.ok() && r.status().code() == Code::kUnavailable &&
                        clock_->NowMono() < deadline && tries < max_tries;
         ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the agent unpins soon
      r = stager_->Stage(step, tensors);
    }
    const double stall = clock_->NowMono() - t0;
    stall_s_ += stall;
    if (!r.ok() && r.status().code() == Code::kUnavailable) {
      ++skipped_;
      if (clock_->NowMono() >= next_skip_warning_) {
        next_skip_warning_ = clock_->NowMono() + 30;
        std::fprintf(stderr,
                     "bulwark: rank %d skipped the memory snapshot of step %ld (%ld skipped so "
                     "far): %s\n",
                     cfg_.rank, step, skipped_, r.status().message().c_str());
      }
      return Status::Ok();
    }
    BW_RETURN_IF_ERROR(r.status().Annotate("stage step " + std::to_string(step)));
    SendLocked(Json{{"type", "staged"},
                    {"rank", cfg_.rank},
                    {"step", step},
                    {"slot", r->slot},
                    {"seq", r->seq},
                    {"generation", r->generation},
                    {"bytes", r->bytes},
                    {"persist", persist},
                    {"stall_s", stall},
                    {"t", clock_->NowWall()}}
                   .dump());
    return Status::Ok();
  }
  if (cfg_.ckpt_dir.empty()) {
    return FailedPrecondition("cannot save: BULWARK_CKPT_DIR is not set; set it to a directory");
  }
  ckpt::Env* env = ckpt::Env::Default();
  ckpt::ShardStats stats;
  Status st = ckpt::WriteShard(env, cfg_.ckpt_dir, step, cfg_.rank, cfg_.world_size, tensors,
                               ckpt::WriteOptions(), &stats);
  if (st.ok() && cfg_.agent_sock.empty() && cfg_.world_size == 1) {
    st = ckpt::Commit(env, cfg_.ckpt_dir, step, 1);
  }
  const double write_s = clock_->NowMono() - t0;
  stall_s_ += write_s;
  BW_RETURN_IF_ERROR(st);
  SendLocked(Json{{"type", "ckpt"},
                  {"rank", cfg_.rank},
                  {"step", step},
                  {"tier", "disk"},
                  {"bytes", stats.file_bytes},
                  {"write_s", write_s},
                  {"t", clock_->NowWall()}}
                 .dump());
  return Status::Ok();
}

Status Client::Save(long step, const std::vector<ckpt::Blob>& blobs) {
  return SaveTensors(step, ckpt::BlobsToTensors(blobs));
}

long Client::snapshots_skipped() const {
  std::lock_guard<std::mutex> l(mu_);
  return skipped_;
}

Status Client::Commit(long step) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("commit called before init()");
  if (cfg_.ckpt_dir.empty())
    return FailedPrecondition("cannot commit: BULWARK_CKPT_DIR is not set");
  return ckpt::Commit(ckpt::Env::Default(), cfg_.ckpt_dir, step, cfg_.world_size);
}

namespace {

// Why each tier could not serve a step, and the most severe reason's code.
struct TierReasons {
  std::vector<std::string> list;
  Code code = Code::kNotFound;
  void Add(const std::string& tier, const Status& st) {
    list.push_back(tier + ": " + st.message());
    const Code c = st.code();
    if (c == Code::kDataLoss || (c == Code::kFailedPrecondition && code == Code::kNotFound)) {
      code = c;
    }
  }
  std::string Joined() const {
    std::string all;
    for (const std::string& s : list) all += (all.empty() ? "" : "; ") + s;
    return all;
  }
};

class FileSession : public LoadSession {
 public:
  FileSession(std::string tier, std::unique_ptr<ckpt::StepReader> r, int rank)
      : tier_(std::move(tier)), reader_(std::move(r)), rank_(rank) {
    for (const ckpt::TensorEntry& e : reader_->index(rank_).tensors) metas_.push_back(e.meta);
  }
  const std::string& tier() const override { return tier_; }
  long step() const override { return reader_->manifest().step; }
  const std::vector<ckpt::TensorMeta>& tensors() const override { return metas_; }
  Status Load(const ckpt::TensorMeta& want, void* dst) override {
    return reader_->Load(want, dst, rank_);
  }

 private:
  std::string tier_;
  std::unique_ptr<ckpt::StepReader> reader_;
  int rank_;
  std::vector<ckpt::TensorMeta> metas_;
};

// Opens committed `step` on the first file tier numbered >= min_tier (1 disk, 2
// shared) that holds it; null, with each configured tier's reason added to `why`,
// if none does.
std::unique_ptr<LoadSession> OpenFileTier(const Config& cfg, long step, int min_tier,
                                          TierReasons* why) {
  const std::pair<const char*, std::string> files[] = {{"disk", cfg.ckpt_dir},
                                                       {"shared", cfg.shared_dir}};
  for (int t = 1; t <= 2; ++t) {
    const auto& [name, dir] = files[t - 1];
    if (t < min_tier || dir.empty()) continue;
    Result<std::unique_ptr<ckpt::StepReader>> r =
        ckpt::StepReader::Open(ckpt::Env::Default(), dir, step);
    if (!r.ok()) {
      why->Add(name, r.status());
      continue;
    }
    // Another world size (an elastic job resized): this rank reads the entries of
    // rank `rank mod saved world`; pieces of sharded tensors are stitched and
    // re-split by StepReader::Load, replicated ones are the same on every rank.
    const int saved = (*r)->manifest().world;
    const int source = saved > 0 ? cfg.rank % saved : 0;
    if (saved != cfg.world_size) {
      std::fprintf(stderr,
                   "bulwark: step %ld was saved by %d ranks and WORLD_SIZE is %d: rank %d "
                   "reads rank %d's entries from the %s tier\n",
                   step, saved, cfg.world_size, cfg.rank, source, name);
    }
    return std::make_unique<FileSession>(name, std::move(*r), source);
  }
  return nullptr;
}

// This rank's sealed snapshot in the staging ring. Regions other than the pieces
// it holds are read from the file tiers, opened on first need.
class MemorySession : public LoadSession {
 public:
  MemorySession(std::unique_ptr<ckpt::RingReader> r, std::unique_ptr<ckpt::Snapshot> s, Config cfg)
      : reader_(std::move(r)), snap_(std::move(s)), cfg_(std::move(cfg)) {
    for (const ckpt::TensorView& v : snap_->tensors()) metas_.push_back(v.meta);
  }
  const std::string& tier() const override { return tier_; }
  long step() const override { return snap_->step(); }
  const std::vector<ckpt::TensorMeta>& tensors() const override { return metas_; }
  Status Load(const ckpt::TensorMeta& want, void* dst) override {
    const std::string of_step = "this rank's memory snapshot of step " + std::to_string(step());
    std::string held = "is not in " + of_step;
    for (const ckpt::TensorView& v : snap_->tensors()) {
      if (v.meta.name != want.name) continue;
      if (v.meta.dtype != want.dtype || v.meta.GlobalShape() != want.GlobalShape()) {
        return InvalidArgument("tensor '" + want.name + "' was saved as " +
                               ckpt::DTypeName(v.meta.dtype) + " " + v.meta.PieceString() +
                               ", asked for " + ckpt::DTypeName(want.dtype) + " " +
                               want.PieceString() + ": dtype and global shape must match");
      }
      if (v.meta.shape == want.shape && v.meta.Offsets() == want.Offsets()) {
        return ckpt::CopyVerified(v, snap_->chunk_size(), dst);
      }
      held = "is not the piece " + of_step + " holds (" + v.meta.PieceString() + ")";
      break;
    }
    if (!files_) {
      TierReasons why;
      files_ = OpenFileTier(cfg_, step(), 1, &why);
      if (!files_) {
        return Status(why.code,
                      "tensor '" + want.name + "': the wanted piece " + want.PieceString() + " " +
                          held + ", and no file tier holds the step to reshard from (" +
                          (why.list.empty() ? std::string("none configured") : why.Joined()) +
                          "); load with the sharding this rank saved, or from a step "
                          "persisted to disk");
      }
    }
    return files_->Load(want, dst);
  }

 private:
  std::string tier_ = "memory";
  std::unique_ptr<ckpt::RingReader> reader_;
  std::unique_ptr<ckpt::Snapshot> snap_;
  Config cfg_;
  std::vector<ckpt::TensorMeta> metas_;
  std::unique_ptr<LoadSession> files_;  // the file tiers' copy, once needed
};

}  // namespace

int Client::TierNumber(const std::string& tier) {
  return tier == "memory" ? 0 : tier == "disk" ? 1 : 2;
}

Result<std::unique_ptr<LoadSession>> Client::OpenLoad(long step, int min_tier,
                                                      std::vector<std::string>* skipped) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("load called before init()");
  if (step < 0) step = cfg_.resume_step;
  if (step < 0) return NotFound("no checkpoint to resume from (BULWARK_RESUME_STEP is -1)");
  TierReasons why;
  if (min_tier <= 0 && !cfg_.staging_dir.empty()) {
    Result<std::unique_ptr<ckpt::RingReader>> r =
        ckpt::RingReader::Open(ckpt::RingPath(cfg_.staging_dir, cfg_.rank));
    Status st = r.status();
    if (r.ok()) {
      Result<std::unique_ptr<ckpt::Snapshot>> s = (*r)->PinStep(step);
      if (s.ok() && (*s)->world() == cfg_.world_size) {
        return std::unique_ptr<LoadSession>(new MemorySession(std::move(*r), std::move(*s), cfg_));
      }
      st = s.ok() ? FailedPrecondition("saved by another world size") : s.status();
    }
    // Only a corrupt memory copy raises the error's severity.
    why.Add("memory", st.code() == Code::kDataLoss ? st : Status(Code::kNotFound, st.message()));
  }
  if (std::unique_ptr<LoadSession> files = OpenFileTier(cfg_, step, min_tier, &why)) {
    return files;
  }
  if (skipped != nullptr) skipped->insert(skipped->end(), why.list.begin(), why.list.end());
  if (why.list.empty())
    return FailedPrecondition("cannot load: no checkpoint tier configured (set BULWARK_CKPT_DIR)");
  return Status(why.code,
                "step " + std::to_string(step) + " is not loadable from any tier: " + why.Joined());
}

Result<std::vector<ckpt::OwnedBlob>> Client::Load(long step) {
  std::vector<std::string> skipped;
  for (int tier = 0; tier <= 2;) {
    BW_ASSIGN_OR_RETURN(auto session, OpenLoad(step, tier, &skipped));
    std::vector<ckpt::OwnedBlob> out;
    Status st;
    for (const ckpt::TensorMeta& m : session->tensors()) {
      ckpt::OwnedBlob b;
      b.name = m.name;
      b.data.resize(m.nbytes());
      st = session->Load(m, b.data.data());
      if (!st.ok()) break;
      out.push_back(std::move(b));
    }
    if (st.ok()) return out;
    if (st.code() != Code::kDataLoss) return st;
    std::fprintf(stderr, "bulwark: skipping %s tier copy of step %ld: %s\n",
                 session->tier().c_str(), session->step(), st.message().c_str());
    tier = TierNumber(session->tier()) + 1;
  }
  return DataLoss("step " + std::to_string(step) + ": no intact copy on any tier");
}

void Client::DrainLocked() {
  FlushOutboxLocked();  // every step comes here: what the agent's queue held back goes out
  if (fd_ < 0 || cfg_.rank_sock.empty()) return;
  for (const std::string& d : UnixDgramRecvAll(fd_)) {
    Json j = Json::parse(d, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) continue;
    const std::string type = j["type"].get<std::string>();
    const double factor =
        j.contains("factor") && j["factor"].is_number() ? j["factor"].get<double>() : 0;
    if (type == "inject_nan") {
      nan_pending_ = true;
    } else if (type == "inject_sdc") {
      sdc_pending_ = true;
    } else if (type == "inject_slow_rank") {
      slow_factor_ = std::clamp(factor, 1.0, 100.0);
    } else if (type == "inject_slow_data") {
      const double d =
          j.contains("delay_s") && j["delay_s"].is_number() ? j["delay_s"].get<double>() : 0;
      data_delay_s_ = std::clamp(d, 0.0, 60.0);
    } else if (type == "inject_loss_spike") {
      loss_spike_factor_ = std::clamp(factor, 1.0, 1e6);
    } else if (type == "abort") {
      // An abort of an earlier generation (delivered late) does not end this one.
      const long attempt =
          j.contains("attempt") && j["attempt"].is_number_integer() ? j["attempt"].get<long>() : -1;
      if (attempt < 0 || cfg_.attempt < 0 || attempt >= cfg_.attempt) SetAbortLocked(true);
    } else if (type == "generation") {
      next_gen_ = std::move(j);
    }
  }
}

bool Client::PollInjectedNan() {
  std::lock_guard<std::mutex> l(mu_);
  DrainLocked();
  bool r = nan_pending_;
  nan_pending_ = false;
  return r;
}

bool Client::PollInjectedSdc() {
  std::lock_guard<std::mutex> l(mu_);
  DrainLocked();
  bool r = sdc_pending_;
  sdc_pending_ = false;
  return r;
}

Status Client::ReportDigest(long step, uint64_t digest, const std::string& group) {
  if (step < 0) return InvalidArgument("report_digest: step must be >= 0");
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("report_digest called before init()");
  Json msg = {
      {"type", "digest"}, {"rank", cfg_.rank}, {"step", step}, {"digest", DigestHex(digest)}};
  if (!group.empty()) msg["group"] = group;
  SendLocked(msg.dump());
  return Status::Ok();
}

Status Client::DeclareInProcess(bool process_group) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("declare_in_process called before init()");
  in_process_ = true;
  process_group_ = process_group;
  SendHelloLocked();
  return Status::Ok();
}

bool Client::in_process() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_process_;
}

bool Client::AbortRequested() {
  std::lock_guard<std::mutex> l(mu_);
  DrainLocked();
  return abort_pending_;
}

bool Client::WaitAbort(double timeout_s) {
  std::unique_lock<std::mutex> l(mu_);
  if (!initialized_) return false;
  DrainLocked();
  if (abort_pending_) return true;
  std::vector<int> fds;
  if (fd_ >= 0 && !cfg_.rank_sock.empty()) fds.push_back(fd_);
  if (abort_efd_ >= 0 && abort_efd_pid_ == ::getpid()) fds.push_back(abort_efd_);
  const int fd = fd_;
  l.unlock();  // reports and safe points of other threads go on meanwhile
  clock_->WaitReadable(fds, std::max(0.0, timeout_s));
  l.lock();
  if (fd_ != fd || !initialized_) return false;  // re-initialised meanwhile: ask again
  DrainLocked();
  return abort_pending_;
}

Status Client::Park(const std::string& error) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("park called before init()");
  DrainLocked();
  Json msg = {{"type", "parked"},
              {"rank", cfg_.rank},
              {"pid", ::getpid()},
              {"attempt", cfg_.attempt},
              {"aborted", abort_pending_},
              {"error", error.size() > 2000 ? error.substr(0, 2000) + "..." : error}};
  SetAbortLocked(false);
  SendLocked(msg.dump(-1, ' ', false, Json::error_handler_t::replace));
  FlushWithinLocked(kFlushWaitS);  // the agent waits for it to start the next generation
  return Status::Ok();
}

Status Client::Finished() {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("finished called before init()");
  Json msg = {{"type", "finished"}, {"rank", cfg_.rank}, {"attempt", cfg_.attempt}};
  SendLocked(msg.dump());
  FlushWithinLocked(kFlushWaitS);  // the process exits next
  return Status::Ok();
}

Result<Json> Client::WaitGeneration(double timeout_s) {
  std::unique_lock<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("wait_generation called before init()");
  if (fd_ < 0 || cfg_.rank_sock.empty()) {
    return FailedPrecondition("no agent: a rank without BULWARK_RANK_SOCK has no next generation");
  }
  const double deadline = clock_->NowMono() + std::max(0.0, timeout_s);
  while (true) {
    DrainLocked();
    if (next_gen_) {
      Json g = std::move(*next_gen_);
      next_gen_.reset();
      return g;
    }
    const double left = deadline - clock_->NowMono();
    if (left <= 0) break;
    const int fd = fd_;
    l.unlock();  // reports from other threads may go on meanwhile
    clock_->WaitReadable({fd}, std::min(left, 0.5));
    l.lock();
    if (fd_ != fd) return Aborted("the client was re-initialised while waiting for a generation");
  }
  return DeadlineExceeded("no next generation from the agent within " + std::to_string(timeout_s) +
                          " s");
}

long Client::SkipFrom() const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.skip_from;
}

long Client::SkipTo() const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.skip_to;
}

bool Client::ShouldSkip(long step) const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.skip_from >= 0 && step >= cfg_.skip_from && step < cfg_.skip_to;
}

}  // namespace bulwark::sdk
