// Lease leader election between replicas sharing a real kube-apiserver (the binary's
// shared control plane), each through its own client and the test's FaultProxy (for
// 500s on demand). Each elector has its own FakeClock (with different wall clocks:
// expiry must not depend on skew).
#include <atomic>
#include <thread>

#include "k8s/contract_test_util.h"
#include "k8s/leader.h"

namespace bulwark::k8s {
namespace {

using contract::ContractTest;
using contract::PollUntil;

class LeaderContractTest : public ContractTest {
 protected:
  std::unique_ptr<LeaderElector> Elector(const std::string& id, const Clock* clock, Client* c) {
    LeaderElectionConfig cfg;
    cfg.identity = id;
    cfg.lease_namespace = ns_;
    cfg.lease_duration_s = 15;
    cfg.renew_deadline_s = 10;
    cfg.retry_period_s = 2;
    auto e = LeaderElector::Create(c, cfg, clock);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  Json Lease() {
    auto l = admin_->Get(Leases(), ns_, "bulwark-operator");
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? (*l)["spec"] : Json();
  }
  void AdvanceBoth(double s) {
    clock_a_.Advance(s);
    clock_b_.Advance(s);
  }
  bool StepOk(LeaderElector* e) {
    auto r = e->Step();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && *r;
  }

  FakeClock clock_a_{1000, 1.7e9};
  FakeClock clock_b_{50, 1.8e9};  // 100 million seconds ahead on the wall
};

TEST_F(LeaderContractTest, AcquireRenewTakeoverAndRelease) {
  auto client_b = NewClient();
  auto a = Elector("a", &clock_a_, client_.get());
  auto b = Elector("b", &clock_b_, client_b.get());
  EXPECT_TRUE(StepOk(a.get()));  // creates the Lease
  EXPECT_TRUE(a->IsLeader());
  EXPECT_FALSE(StepOk(b.get()));
  EXPECT_EQ(Lease()["holderIdentity"], "a");
  EXPECT_EQ(Lease()["leaseTransitions"], 0);
  EXPECT_EQ(Lease()["leaseDurationSeconds"], 15);
  const std::string first_renew = Lease()["renewTime"];
  ASSERT_TRUE(ParseRfc3339(first_renew).ok()) << first_renew;

  AdvanceBoth(5);
  EXPECT_TRUE(StepOk(a.get()));  // renews
  EXPECT_NE(Lease()["renewTime"], first_renew);
  EXPECT_FALSE(StepOk(b.get()));  // b first sees this renewal at t+5

  AdvanceBoth(14);  // a stops renewing (crashed); 14 s after b saw the renewal
  EXPECT_FALSE(StepOk(b.get()));
  AdvanceBoth(2);  // 16 s > leaseDurationSeconds
  EXPECT_TRUE(StepOk(b.get()));
  EXPECT_TRUE(b->IsLeader());
  EXPECT_EQ(Lease()["holderIdentity"], "b");
  EXPECT_EQ(Lease()["leaseTransitions"], 1);
  EXPECT_EQ(b->transitions_seen(), 1);

  // a comes back: it sees b's fresh lease and does not lead.
  EXPECT_FALSE(StepOk(a.get()));
  EXPECT_FALSE(a->IsLeader());

  // b releases: a takes over at once, without waiting for expiry.
  ASSERT_TRUE(b->Release().ok());
  EXPECT_FALSE(b->IsLeader());
  EXPECT_EQ(Lease()["holderIdentity"], "");
  AdvanceBoth(0.5);
  EXPECT_TRUE(StepOk(a.get()));
  EXPECT_EQ(Lease()["holderIdentity"], "a");
  EXPECT_EQ(Lease()["leaseTransitions"], 2);
  EXPECT_TRUE(b->Release().ok());  // not leader: nothing to do
  EXPECT_EQ(Lease()["holderIdentity"], "a");
}

TEST_F(LeaderContractTest, LeaderStepsDownWhenItCannotRenewInTime) {
  ClientConfig cfg = FastConfig();
  cfg.max_attempts = 1;
  auto c = NewClient(cfg);
  auto a = Elector("a", &clock_a_, c.get());
  ASSERT_TRUE(StepOk(a.get()));
  proxy_->FailNext(2, 500, 0, "leases");
  clock_a_.Advance(5);
  auto r = a->Step();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(a->IsLeader());  // within renew_deadline_s of the last renewal
  clock_a_.Advance(6);
  r = a->Step();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("500"), std::string::npos);
  EXPECT_FALSE(a->IsLeader());  // 11 s > renew_deadline_s: stepped down
  clock_a_.Advance(1);
  EXPECT_TRUE(StepOk(a.get()));  // the API is back; the lease is still ours
  EXPECT_EQ(Lease()["leaseTransitions"], 0);
}

TEST_F(LeaderContractTest, ConflictingWriteMeansNotLeader) {
  auto a = Elector("a", &clock_a_, client_.get());
  ASSERT_TRUE(StepOk(a.get()));
  // Another writer keeps changing the Lease (an annotation, the holder untouched), so
  // sooner or later it changes between a renewal's read and its write: the real
  // server's 409 on that write means "not leader", not an error.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      (void)admin_->Patch(Leases(), ns_, "bulwark-operator",
                          {{"metadata", {{"annotations", {{"writer", std::to_string(i)}}}}}});
    }
  });
  bool lost = false;
  const bool conflicted = PollUntil(
      [&] {
        clock_a_.Advance(2);
        auto r = a->Step();
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        lost = r.ok() && !*r;
        return lost || !r.ok();
      },
      30);
  stop = true;
  writer.join();
  ASSERT_TRUE(conflicted && lost);
  EXPECT_FALSE(a->IsLeader());
  int real_409 = 0;
  for (const auto& r : proxy_->Requests())
    real_409 += r.method == "PUT" && r.status == 409 && !r.injected;
  EXPECT_GE(real_409, 1);
  clock_a_.Advance(2);
  EXPECT_TRUE(StepOk(a.get()));  // re-read: still ours
  EXPECT_EQ(Lease()["holderIdentity"], "a");
  EXPECT_EQ(Lease()["leaseTransitions"], 0);
}

TEST_F(LeaderContractTest, ConcurrentCandidatesNeverBothWin) {
  auto client_b = NewClient();
  auto a = Elector("a", &clock_a_, client_.get());
  auto b = Elector("b", &clock_b_, client_b.get());
  for (int round = 0; round < 10; ++round) {
    Result<bool> ra = false, rb = false;
    std::thread ta([&] { ra = a->Step(); });
    std::thread tb([&] { rb = b->Step(); });
    ta.join();
    tb.join();
    ASSERT_TRUE(ra.ok()) << ra.status().ToString();
    ASSERT_TRUE(rb.ok()) << rb.status().ToString();
    ASSERT_EQ(*ra + *rb, 1) << "round " << round;
    LeaderElector* winner = *ra ? a.get() : b.get();
    EXPECT_EQ(Lease()["holderIdentity"], winner->config().identity);
    ASSERT_TRUE(winner->Release().ok());
    AdvanceBoth(1);
  }
  EXPECT_EQ(Lease()["leaseTransitions"], 9 + 0);  // first round created it
}

TEST_F(LeaderContractTest, ConfigErrorsNameTheField) {
  LeaderElectionConfig cfg;
  auto e = LeaderElector::Create(client_.get(), cfg, &clock_a_);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("identity"), std::string::npos);
  cfg.identity = "x";
  cfg.renew_deadline_s = 20;
  e = LeaderElector::Create(client_.get(), cfg, &clock_a_);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("renew_deadline_s"), std::string::npos);
}

}  // namespace
}  // namespace bulwark::k8s
