// Lease-based leader election (leader.h has the protocol).
#include "k8s/leader.h"

#include <cmath>

#include "k8s/internal.h"

namespace bulwark::k8s {

namespace {

Json LeaseSpec(const std::string& holder, double duration_s, const std::string& acquire,
               const std::string& renew, int64_t transitions) {
  return Json{{"holderIdentity", holder},
              {"leaseDurationSeconds", static_cast<int64_t>(std::llround(duration_s))},
              {"acquireTime", acquire},
              {"renewTime", renew},
              {"leaseTransitions", transitions}};
}

int64_t IntField(const Json& spec, const char* key, int64_t def) {
  auto it = spec.find(key);
  return it != spec.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}

}  // namespace

Result<std::unique_ptr<LeaderElector>> LeaderElector::Create(Client* client,
                                                             LeaderElectionConfig cfg,
                                                             const Clock* clock) {
  if (client == nullptr) return InvalidArgument("LeaderElector: client is null");
  if (cfg.identity.empty()) {
    return InvalidArgument(
        "LeaderElectionConfig.identity is empty; set it to a per-replica unique id (pod name "
        "plus a random suffix)");
  }
  if (cfg.lease_name.empty()) return InvalidArgument("LeaderElectionConfig.lease_name is empty");
  if (cfg.lease_namespace.empty()) {
    return InvalidArgument("LeaderElectionConfig.lease_namespace is empty");
  }
  if (!(cfg.lease_duration_s >= 1) || !(cfg.renew_deadline_s > 0) ||
      !(cfg.renew_deadline_s < cfg.lease_duration_s) || !(cfg.retry_period_s > 0) ||
      !(cfg.retry_period_s < cfg.renew_deadline_s)) {
    return InvalidArgument(
        "LeaderElectionConfig: need lease_duration_s >= 1 and lease_duration_s > "
        "renew_deadline_s > retry_period_s > 0 (defaults 15, 10, 2)");
  }
  return std::unique_ptr<LeaderElector>(
      new LeaderElector(client, std::move(cfg), clock != nullptr ? clock : SystemClock::Get()));
}

Result<bool> LeaderElector::Step() {
  const double now = clock_->NowMono();
  const std::string wall = internal::Rfc3339Micro(clock_->NowWall());
  // A leader that cannot renew in time steps down before anyone can take over.
  auto check_deadline = [&] {
    if (leader_.load() && now - last_renew_ok_ >= cfg_.renew_deadline_s) leader_.store(false);
  };
  auto won = [&](const Json& lease) {
    leader_.store(true);
    last_renew_ok_ = now;
    transitions_ =
        static_cast<int>(IntField(lease.value("spec", Json::object()), "leaseTransitions", 0));
    return true;
  };
  const Resource& r = Leases();
  auto got = client_->Get(r, cfg_.lease_namespace, cfg_.lease_name);
  if (!got.ok() && IsNotFound(got.status())) {
    Json lease = {{"apiVersion", r.ApiVersion()},
                  {"kind", r.kind},
                  {"metadata", {{"name", cfg_.lease_name}, {"namespace", cfg_.lease_namespace}}},
                  {"spec", LeaseSpec(cfg_.identity, cfg_.lease_duration_s, wall, wall, 0)}};
    auto created = client_->Create(r, cfg_.lease_namespace, lease);
    if (created.ok()) return won(*created);
    if (IsAlreadyExists(created.status())) {
      leader_.store(false);  // another replica created it first
      return false;
    }
    check_deadline();
    return created.status();
  }
  if (!got.ok()) {
    check_deadline();
    return got.status();
  }
  Json lease = std::move(got).value();
  if (!lease.contains("spec") || !lease["spec"].is_object()) lease["spec"] = Json::object();
  Json& spec = lease["spec"];
  const std::string holder = internal::StrField(spec, "holderIdentity");
  const int64_t transitions = IntField(spec, "leaseTransitions", 0);
  transitions_ = static_cast<int>(transitions);

  if (holder == cfg_.identity) {
    spec["renewTime"] = wall;
    spec["leaseDurationSeconds"] = static_cast<int64_t>(std::llround(cfg_.lease_duration_s));
  } else {
    if (!holder.empty()) {
      // Expiry by our own clock from when we first saw this renewal (skew-proof).
      const std::string seen = holder + "\n" + internal::StrField(spec, "renewTime");
      if (seen != observed_renew_) {
        observed_renew_ = seen;
        observed_at_ = now;
      }
      const double duration = static_cast<double>(
          IntField(spec, "leaseDurationSeconds", std::llround(cfg_.lease_duration_s)));
      if (observed_at_ + duration > now) {
        leader_.store(false);
        return false;
      }
    }
    spec.update(LeaseSpec(cfg_.identity, cfg_.lease_duration_s, wall, wall, transitions + 1));
  }
  // The lease's resourceVersion (as read) is the precondition of this write.
  auto put = client_->Update(r, cfg_.lease_namespace, lease);
  if (put.ok()) return won(*put);
  if (IsConflict(put.status())) {
    leader_.store(false);  // someone else wrote it since we read it
    return false;
  }
  check_deadline();
  return put.status();
}

Status LeaderElector::Release() {
  if (!leader_.load()) return Status::Ok();
  leader_.store(false);
  const std::string wall = internal::Rfc3339Micro(clock_->NowWall());
  auto got = client_->Get(Leases(), cfg_.lease_namespace, cfg_.lease_name);
  if (!got.ok()) return got.status();
  Json lease = std::move(got).value();
  if (internal::StrField(lease.value("spec", Json::object()), "holderIdentity") != cfg_.identity) {
    return Status::Ok();  // already taken over
  }
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = wall;
  auto put = client_->Update(Leases(), cfg_.lease_namespace, lease);
  if (!put.ok() && !IsConflict(put.status())) return put.status();
  return Status::Ok();
}

}  // namespace bulwark::k8s
