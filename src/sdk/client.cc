#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/net.h"
#include "sdk/bulwark.h"

namespace bulwark::sdk {
namespace {

const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "BULWARK_AGENT_SOCK",
                             "BULWARK_RANK_SOCK",
                             "BULWARK_RESUME_STEP",
                             "BULWARK_CKPT_DIR",
                             "BULWARK_CKPT_INTERVAL_STEPS",
                             "BULWARK_SKIP_FROM",
                             "BULWARK_SKIP_TO"};

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
}

void Client::ResetLocked() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!cfg_.rank_sock.empty()) ::unlink(cfg_.rank_sock.c_str());
  }
  fd_ = -1;
  initialized_ = false;
  nan_pending_ = false;
  stall_s_ = 0.0;
}

Status Client::Init(const EnvMap& env) {
  BW_ASSIGN_OR_RETURN(Config cfg, ConfigFromEnv(env));
  std::lock_guard<std::mutex> l(mu_);
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
  cfg_ = std::move(cfg);
  initialized_ = true;
  last_mark_ = clock_->NowMono();
  SendLocked(Json{{"type", "hello"}, {"rank", cfg_.rank}, {"pid", ::getpid()}}.dump());
  return Status::Ok();
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

void Client::SendLocked(const std::string& payload) {
  if (fd_ < 0 || cfg_.agent_sock.empty()) return;
  // Dropped on EAGAIN (full), ENOENT/ECONNREFUSED (no agent): reports are best effort.
  (void)UnixDgramSend(fd_, cfg_.agent_sock, payload);
}

Status Client::ReportStep(long step, double loss, long long tokens) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("report_step called before init()");
  const double now = clock_->NowMono();
  Json msg = {{"type", "step"},
              {"rank", cfg_.rank},
              {"step", step},
              {"tokens", tokens},
              {"step_time", now - last_mark_},
              {"ckpt_stall", stall_s_},
              {"t", clock_->NowWall()}};
  msg["loss"] = std::isfinite(loss) ? Json(loss) : Json(nullptr);
  last_mark_ = now;
  stall_s_ = 0.0;
  SendLocked(msg.dump());
  return Status::Ok();
}

long Client::ResumeStep() const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.resume_step;
}

bool Client::ShouldCheckpoint(long step) const {
  std::lock_guard<std::mutex> l(mu_);
  return cfg_.ckpt_interval_steps > 0 && step % cfg_.ckpt_interval_steps == 0;
}

Status Client::Save(long step, const std::vector<ckpt::Blob>& blobs) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("save called before init()");
  if (cfg_.ckpt_dir.empty()) {
    return FailedPrecondition("cannot save: BULWARK_CKPT_DIR is not set; set it to a directory");
  }
  const double t0 = clock_->NowMono();
  ckpt::ShardStats stats;
  Status st = ckpt::WriteShard(cfg_.ckpt_dir, step, cfg_.rank, cfg_.world_size, blobs, &stats);
  if (st.ok() && cfg_.agent_sock.empty() && cfg_.world_size == 1) {
    st = ckpt::Commit(cfg_.ckpt_dir, step, 1);
  }
  const double write_s = clock_->NowMono() - t0;
  stall_s_ += write_s;
  BW_RETURN_IF_ERROR(st);
  SendLocked(Json{{"type", "ckpt"},
                  {"rank", cfg_.rank},
                  {"step", step},
                  {"bytes", stats.bytes},
                  {"write_s", write_s},
                  {"t", clock_->NowWall()}}
                 .dump());
  return Status::Ok();
}

Status Client::Commit(long step) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("commit called before init()");
  if (cfg_.ckpt_dir.empty())
    return FailedPrecondition("cannot commit: BULWARK_CKPT_DIR is not set");
  return ckpt::Commit(cfg_.ckpt_dir, step, cfg_.world_size);
}

Result<std::vector<ckpt::OwnedBlob>> Client::Load(long step) {
  std::lock_guard<std::mutex> l(mu_);
  if (!initialized_) return FailedPrecondition("load called before init()");
  if (step < 0) step = cfg_.resume_step;
  if (step < 0) return NotFound("no checkpoint to resume from (BULWARK_RESUME_STEP is -1)");
  if (cfg_.ckpt_dir.empty()) return FailedPrecondition("cannot load: BULWARK_CKPT_DIR is not set");
  Result<ckpt::CommitRecord> rec = ckpt::ReadCommit(cfg_.ckpt_dir, step);
  if (!rec.ok()) {
    return Status(rec.status().code(),
                  "step " + std::to_string(step) +
                      " is not a valid committed checkpoint: " + rec.status().message());
  }
  if (rec->world != cfg_.world_size) {
    return FailedPrecondition("step " + std::to_string(step) + " was saved by " +
                              std::to_string(rec->world) + " ranks but WORLD_SIZE is " +
                              std::to_string(cfg_.world_size));
  }
  return ckpt::ReadShard(cfg_.ckpt_dir, step, cfg_.rank, cfg_.world_size);
}

bool Client::PollInjectedNan() {
  std::lock_guard<std::mutex> l(mu_);
  if (fd_ >= 0 && !cfg_.rank_sock.empty()) {
    for (const std::string& d : UnixDgramRecvAll(fd_)) {
      Json j = Json::parse(d, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("type") && j["type"] == "inject_nan") nan_pending_ = true;
    }
  }
  bool r = nan_pending_;
  nan_pending_ = false;
  return r;
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
