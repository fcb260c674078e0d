// Leader election with a coordination.k8s.io/v1 Lease (client-go's leaderelection
// protocol): exactly one operator replica reconciles at a time.
//
// The Lease's spec: holderIdentity, leaseDurationSeconds, acquireTime, renewTime,
// leaseTransitions. One Step(now):
//   * no Lease: create it holding it (409 AlreadyExists: another replica won; not
//     leader);
//   * held by us: renew (renewTime = now) with the read resourceVersion as the
//     precondition (409: someone else wrote it; not leader until re-read);
//   * held by another, renewTime + leaseDuration > now (by our clock, measured from
//     when we first saw that renewTime, as client-go does, so clock skew between
//     replicas does not matter): not leader;
//   * held by another and expired, or holderIdentity empty: take it over
//     (leaseTransitions + 1, acquireTime = now), with the precondition.
// A leader that has not renewed successfully for renew_deadline_s stops being leader
// (IsLeader() false) even before anyone takes over, so two replicas never both act
// for longer than the clock drift allows. Release() clears holderIdentity so a
// successor need not wait for expiry.
//
// Time comes from the injected clock only. Thread-safe: Step/Release from one thread,
// IsLeader from any.
#pragma once

#include <atomic>
#include <string>

#include "k8s/client.h"

namespace bulwark::k8s {

struct LeaderElectionConfig {
  std::string lease_namespace = "bulwark-system";
  std::string lease_name = "bulwark-operator";
  std::string identity;  // unique per replica (pod name + random suffix)
  double lease_duration_s = 15;
  double renew_deadline_s = 10;
  double retry_period_s = 2;  // how often the caller should Step()
};

class LeaderElector {
 public:
  // client and clock are not owned. Errors name the empty field.
  static Result<std::unique_ptr<LeaderElector>> Create(Client* client, LeaderElectionConfig cfg,
                                                       const Clock* clock);

  // One round of the protocol at clock->NowMono(). Returns whether we lead now. API
  // errors are returned (and we stop leading once renew_deadline_s has passed
  // without a successful renewal).
  Result<bool> Step();
  Status Release();
  bool IsLeader() const { return leader_.load(); }
  // The Lease's leaseTransitions as last read or written by Step (same thread).
  int transitions_seen() const { return transitions_; }
  const LeaderElectionConfig& config() const { return cfg_; }

 private:
  LeaderElector(Client* client, LeaderElectionConfig cfg, const Clock* clock)
      : client_(client), cfg_(std::move(cfg)), clock_(clock) {}
  Client* client_;
  LeaderElectionConfig cfg_;
  const Clock* clock_;
  std::atomic<bool> leader_{false};
  double last_renew_ok_ = -1;   // mono time of our last successful write
  std::string observed_renew_;  // the other holder's renewTime as last read
  double observed_at_ = -1;     // mono time we first saw observed_renew_
  int transitions_ = 0;
};

}  // namespace bulwark::k8s
