// The test control plane itself: real etcd + kube-apiserver + kube-controller-manager
// on loopback, authentication (client certificates, service-account tokens), RBAC
// enforcement, etcd compaction reaching clients as 410, the fault proxy, and that
// nothing is left running after Stop().
#include "k8s/testing/control_plane.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "k8s/testing/cluster.h"
#include "k8s/testing/fault_proxy.h"

namespace bulwark::k8s::testing {
namespace {

const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};
const Resource kServiceAccounts{"", "v1", "serviceaccounts", "ServiceAccount", true};

ControlPlaneOptions Options() {
  ControlPlaneOptions o;
  // configmaps bypass the watch cache, so a watch from a compacted revision reaches
  // etcd and gets 410 (the cached resources answer from the cache's own window).
  o.apiserver_flags = {"--watch-cache-sizes=configmaps#0"};
  return o;
}

std::unique_ptr<Client> NewClient(const ClientConfig& cfg) {
  auto c = Client::Create(cfg);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

Json ConfigMap(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"data", {{"k", "v"}}}};
}

TEST(ControlPlane, AuthenticatesWithCertificatesAndTokensAndEnforcesRbac) {
  ControlPlane* cp = SharedControlPlane(Options());
  ASSERT_NE(cp, nullptr);
  auto admin = NewClient(cp->AdminConfig());
  ASSERT_NE(admin, nullptr);
  auto ns = UniqueNamespace(admin.get(), "auth");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ASSERT_TRUE(admin->Create(kConfigMaps, *ns, ConfigMap(*ns, "a")).ok());

  // A certificate user with no bindings: authenticated, then refused by RBAC.
  auto nobody_cfg = cp->UserConfig("nobody");
  ASSERT_TRUE(nobody_cfg.ok()) << nobody_cfg.status().ToString();
  auto nobody = NewClient(*nobody_cfg);
  auto denied = nobody->Get(kConfigMaps, *ns, "a");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), Code::kPermissionDenied) << denied.status().ToString();
  EXPECT_NE(denied.status().message().find("403"), std::string::npos) << denied.status().ToString();
  EXPECT_NE(denied.status().message().find("\"nobody\""), std::string::npos)
      << denied.status().ToString();

  // A service account's bound token; a Role lets it read configmaps, nothing more.
  ASSERT_TRUE(admin
                  ->Create(kServiceAccounts, *ns,
                           {{"apiVersion", "v1"},
                            {"kind", "ServiceAccount"},
                            {"metadata", {{"name", "reader"}, {"namespace", *ns}}}})
                  .ok());
  ASSERT_TRUE(
      ApplyObjects(
          admin.get(),
          {{{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "Role"},
            {"metadata", {{"name", "reader"}, {"namespace", *ns}}},
            {"rules",
             {{{"apiGroups", {""}}, {"resources", {"configmaps"}}, {"verbs", {"get", "list"}}}}}},
           {{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "RoleBinding"},
            {"metadata", {{"name", "reader"}, {"namespace", *ns}}},
            {"roleRef",
             {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "reader"}}},
            {"subjects", {{{"kind", "ServiceAccount"}, {"name", "reader"}, {"namespace", *ns}}}}}})
          .ok());
  auto sa_cfg = cp->ServiceAccountConfig(*ns, "reader");
  ASSERT_TRUE(sa_cfg.ok()) << sa_cfg.status().ToString();
  auto sa = NewClient(*sa_cfg);
  ASSERT_TRUE(PollUntil([&] { return sa->Get(kConfigMaps, *ns, "a").ok(); }, 10));
  auto write = sa->Create(kConfigMaps, *ns, ConfigMap(*ns, "b"));
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), Code::kPermissionDenied);
  EXPECT_NE(write.status().message().find("system:serviceaccount:" + *ns + ":reader"),
            std::string::npos)
      << write.status().ToString();
  // A token that is not the server's.
  ClientConfig forged = *sa_cfg;
  forged.token = "not-a-token";
  auto bad = NewClient(forged)->Get(kConfigMaps, *ns, "a");
  EXPECT_EQ(bad.status().code(), Code::kPermissionDenied);
  EXPECT_NE(bad.status().message().find("401"), std::string::npos) << bad.status().ToString();
}

TEST(ControlPlane, EtcdCompactionReachesAWatchAs410) {
  ControlPlane* cp = SharedControlPlane(Options());
  ASSERT_NE(cp, nullptr);
  auto admin = NewClient(cp->AdminConfig());
  auto ns = UniqueNamespace(admin.get(), "compact");
  ASSERT_TRUE(ns.ok());
  auto first = admin->Create(kConfigMaps, *ns, ConfigMap(*ns, "a"));
  ASSERT_TRUE(first.ok());
  const std::string old_rv = (*first)["metadata"]["resourceVersion"];
  // Two more writes: a watch from `old_rv` starts at the revision after it, which the
  // compaction below (at the newest revision) must have removed.
  ASSERT_TRUE(admin->Create(kConfigMaps, *ns, ConfigMap(*ns, "b")).ok());
  ASSERT_TRUE(admin->Create(kConfigMaps, *ns, ConfigMap(*ns, "c")).ok());
  auto rev = cp->EtcdRevision();
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  EXPECT_GE(*rev, std::stoll(old_rv));
  ASSERT_TRUE(cp->CompactEtcd(*rev).ok());
  WatchOptions wo;
  wo.resource_version = old_rv;
  wo.timeout_seconds = 5;
  std::vector<std::string> seen;
  Status s = admin->Watch(kConfigMaps, *ns, wo, [&](const WatchEvent& e) {
    seen.push_back(EventTypeName(e.type));
    return true;
  });
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.ToString();
  EXPECT_TRUE(seen.empty()) << ::testing::PrintToString(seen);
}

TEST(ControlPlane, ProxyInjectsFaultsAndForwardsTheRest) {
  ControlPlane* cp = SharedControlPlane(Options());
  ASSERT_NE(cp, nullptr);
  auto admin = NewClient(cp->AdminConfig());
  auto ns = UniqueNamespace(admin.get(), "proxy");
  ASSERT_TRUE(ns.ok());
  auto proxy = FaultProxy::Start(cp->AdminConfig());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  ClientConfig cfg = (*proxy)->Through(cp->AdminConfig());
  cfg.max_attempts = 1;
  auto c = NewClient(cfg);
  ASSERT_TRUE(c->Create(kConfigMaps, *ns, ConfigMap(*ns, "a")).ok());  // forwarded
  (*proxy)->FailNext(1, 503, 0, "GET /api/v1/namespaces/" + *ns);
  auto failed = c->Get(kConfigMaps, *ns, "a");
  EXPECT_EQ(failed.status().code(), Code::kUnavailable) << failed.status().ToString();
  auto ok = c->Get(kConfigMaps, *ns, "a");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["data"]["k"], "v");
  auto missing = c->Get(kConfigMaps, *ns, "nope");  // the real server's 404, forwarded
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  int injected = 0, forwarded = 0;
  for (const RequestRecord& r : (*proxy)->Requests()) (r.injected ? injected : forwarded)++;
  EXPECT_EQ(injected, 1);
  EXPECT_EQ(forwarded, 3);
}

TEST(ControlPlane, StopLeavesNothingRunning) {
  // A second, private control plane (without the controller manager) so this test can
  // stop it: every process is gone and reaped afterwards.
  ControlPlaneOptions o;
  o.controller_manager = false;
  auto cp = ControlPlane::Start(o);
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  std::vector<ComponentInfo> comps = (*cp)->Components();
  ASSERT_EQ(comps.size(), 2u);
  const std::string dir = (*cp)->work_dir();
  EXPECT_TRUE(std::filesystem::exists(dir));
  EXPECT_EQ((*cp)->Check(), "");
  (*cp)->Stop();
  for (const ComponentInfo& c : comps) {
    EXPECT_NE(::kill(c.pid, 0), 0) << c.name << " (pid " << c.pid << ") still exists";
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace bulwark::k8s::testing
