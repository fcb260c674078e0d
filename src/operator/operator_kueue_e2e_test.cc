// scheduling.gang: kueue end to end against the real Kueue v0.17.0 and the real
// kube-scheduler on the test control plane (operator/testing/e2e_fixture.h,
// k8s/testing/kueue.h).
#include "operator/testing/e2e_fixture.h"

namespace bulwark::op::e2e {
namespace {

// The condition `type` of a Kueue object ("True: Reason: message"), "" when absent.
std::string KueueCondition(const Json& obj, const std::string& type) {
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return "";
  for (const Json& c : obj["status"]["conditions"]) {
    if (Str(c, {"type"}) == type) {
      return Str(c, {"status"}) + ": " + Str(c, {"reason"}) + ": " + Str(c, {"message"});
    }
  }
  return "";
}

bool KueueConditionTrue(const Json& obj, const std::string& type) {
  return KueueCondition(obj, type).rfind("True", 0) == 0;
}

// A ClusterQueue of one flavor with `gpus` nvidia.com/gpu of quota.
Json KueueClusterQueue(const std::string& name, const std::string& flavor, int gpus) {
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"namespaceSelector", Json::object()},
            {"resourceGroups",
             {{{"coveredResources", {"nvidia.com/gpu"}},
               {"flavors",
                {{{"name", flavor},
                  {"resources", {{{"name", "nvidia.com/gpu"}, {"nominalQuota", gpus}}}}}}}}}}}}};
}

// Kueue for one test: the real Kueue on the shared control plane with the real
// kube-scheduler, managing namespace `ns` only (labelled for it when created), whose
// LocalQueue "train" feeds ClusterQueue `cq` (`gpus` GPUs of ResourceFlavor `flavor`).
Result<std::unique_ptr<k8s::testing::Kueue>> StartKueue(k8s::testing::ControlPlane* cp,
                                                        k8s::Client* admin, const std::string& ns,
                                                        const std::string& flavor,
                                                        const std::string& cq, int gpus) {
  const double t0 = SystemClock::Get()->NowMono();
  BW_ASSIGN_OR_RETURN(std::unique_ptr<k8s::testing::Kueue> kueue, k8s::testing::Kueue::Start(cp));
  std::printf("[kueue] %s ready in %.1f s, webhook %s\n", kueue->version().c_str(),
              SystemClock::Get()->NowMono() - t0, kueue->webhook_url().c_str());
  BW_RETURN_IF_ERROR(cp->StartScheduler());
  BW_RETURN_IF_ERROR(
      k8s::testing::ApplyObjects(admin, {{{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                                          {"kind", "ResourceFlavor"},
                                          {"metadata", {{"name", flavor}}}},
                                         KueueClusterQueue(cq, flavor, gpus),
                                         {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                                          {"kind", "LocalQueue"},
                                          {"metadata", {{"name", "train"}, {"namespace", ns}}},
                                          {"spec", {{"clusterQueue", cq}}}}}));
  // Kueue has read the queues once the LocalQueue is Active.
  if (!WaitFor(
          [&] {
            auto lq = admin->Get(k8s::testing::KueueLocalQueues(), ns, "train");
            return lq.ok() && KueueConditionTrue(*lq, "Active");
          },
          60)) {
    return DeadlineExceeded("LocalQueue train not Active\n" + kueue->LogTail());
  }
  return kueue;
}

// The namespace of a Kueue test: Pod Security privileged (hostNetwork pods) and
// labelled for Kueue (k8s::testing::KueueOptions: other tests' pods never reach Kueue).
Result<std::string> KueueNamespace(k8s::Client* admin) {
  return k8s::testing::UniqueNamespace(
      admin, "kueue",
      {{"pod-security.kubernetes.io/enforce", "privileged"}, {"bulwark.dev/kueue", "enabled"}});
}

// Each pod's name, node, phase, gates, finalizers and deletion: failures' context.
std::string KueuePods(k8s::testing::Objects* api, const std::string& ns) {
  std::string out;
  for (const Json& p : api->List(k8s::Pods(), ns)) {
    out += Str(p, {"metadata", "name"}) + " node=" + Str(p, {"spec", "nodeName"}) +
           " phase=" + Str(p, {"status", "phase"}) +
           " gates=" + Str(p, {"spec", "schedulingGates"}) +
           " finalizers=" + Str(p, {"metadata", "finalizers"}) +
           " deleted=" + Str(p, {"metadata", "deletionTimestamp"}) + "\n";
  }
  return out;
}

// Whether Kueue declared the Workload `name` of namespace `ns` finished: its Finished
// condition (then kept in *finished), or, once the garbage collector has deleted it (its
// owners, the group's pods, are gone once Kueue lets go of them), Kueue's
// FinishedWorkload Event on one of its pods.
bool KueueFinished(k8s::Client* admin, k8s::testing::Objects* api, const std::string& ns,
                   const std::string& name, std::string* finished) {
  auto w = admin->Get(k8s::testing::KueueWorkloads(), ns, name);
  if (w.ok()) {
    if (!KueueConditionTrue(*w, "Finished")) return false;
    *finished = KueueCondition(*w, "Finished");
    return true;
  }
  for (const Json& e : api->List(k8s::Events(), ns)) {
    if (Str(e, {"reason"}) == "FinishedWorkload" &&
        Str(e, {"message"}).find("'" + ns + "/" + name + "'") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The Kueue pod group of the workers among `pods` ("" if none).
std::string KueueGroup(const std::vector<Json>& pods) {
  for (const Json& p : pods) {
    const std::string g = Str(p, {"metadata", "labels", "kueue.x-k8s.io/pod-group-name"});
    if (!g.empty()) return g;
  }
  return "";
}

// gang: kueue against the real Kueue (v0.17.0) and the real kube-scheduler: the operator
// creates the pods unbound with Kueue's plain-pod group labels; Kueue's webhook gates
// them and Kueue makes a Workload of the workers' group (and one of the standby), which
// waits until the ClusterQueue has GPU quota; once admitted, Kueue removes the gates,
// kube-scheduler binds the pods to the emulated nodes, the agents run and the job
// succeeds; Kueue sees the group finish and lets go of the pods. The operator binds
// nothing itself.
TEST_F(OperatorE2E, KueueGangSchedulingIsDelegated) {
  auto ns = KueueNamespace(admin_.get());
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ns_ = *ns;
  const std::string flavor = tag_ + "-gpu", cq = tag_ + "-cq";
  auto kueue = StartKueue(cp_, admin_.get(), ns_, flavor, cq, 0);  // no quota yet
  ASSERT_TRUE(kueue.ok()) << kueue.status().ToString();

  StartOperator();
  Json tj = TrainJob("kq", 2, 200, "1");
  tj["spec"]["scheduling"]["gang"] = "kueue";
  tj["spec"]["scheduling"]["kueueQueue"] = "train";
  ASSERT_TRUE(admin_->Create(k8s::TrainJobs(), ns_, tj).ok());

  // Kueue's webhook gated the three pods (two workers, one standby) and Kueue made a
  // Workload of the workers' group; with no quota it reserves none.
  ASSERT_TRUE(WaitFor([&] { return Pods().size() == 3; }, 60)) << Describe("kq");
  for (const Json& p : Pods()) {
    EXPECT_EQ(Str(p, {"spec", "nodeName"}), "") << "the operator must not bind: " << p.dump();
    EXPECT_THAT(Str(p, {"spec", "schedulingGates"}), HasSubstr("kueue.x-k8s.io/admission"))
        << p.dump();
    EXPECT_EQ(Str(p, {"metadata", "labels", "kueue.x-k8s.io/managed"}), "true") << p.dump();
    EXPECT_THAT(Str(p, {"metadata", "finalizers"}), HasSubstr("kueue.x-k8s.io/managed"));
    if (Str(p, {"metadata", "labels", "bulwark.dev/role"}) == "worker") {
      EXPECT_EQ(Str(p, {"metadata", "annotations", "kueue.x-k8s.io/retriable-in-group"}), "false");
    }
  }
  // The workers' group is this runner's ("kq-<run id>"): its Workload has that name.
  const std::string group = KueueGroup(Pods());
  ASSERT_THAT(group, ::testing::StartsWith("kq-r")) << KueuePods(api_.get(), ns_);
  auto workload = [&] {
    auto w = admin_->Get(k8s::testing::KueueWorkloads(), ns_, group);
    return w.ok() ? *w : Json();
  };
  ASSERT_TRUE(WaitFor(
      [&] { return KueueCondition(workload(), "QuotaReserved").rfind("False", 0) == 0; }, 60))
      << workload().dump(2) << "\n"
      << (*kueue)->LogTail();
  const Json pending = workload();
  ASSERT_EQ(pending["spec"]["podSets"].size(), 1u) << pending.dump(2);
  EXPECT_EQ(pending["spec"]["podSets"][0]["count"], 2) << pending.dump(2);
  EXPECT_EQ(Str(pending, {"spec", "queueName"}), "train");
  EXPECT_THAT(KueueCondition(pending, "QuotaReserved"), HasSubstr("insufficient quota"));
  std::printf("pending: %s\n", KueueCondition(pending, "QuotaReserved").c_str());
  Kubectl({"get", "workloads", "-n", ns_, "-o", "wide"});
  // The operator waits for its agents meanwhile; no rank runs.
  EXPECT_NE(Phase("kq"), "Running") << Describe("kq");
  EXPECT_EQ(Step("kq"), -1) << Describe("kq");
  std::printf("while Kueue holds the pods:\n%s", Describe("kq").c_str());

  // Quota: Kueue admits the group and the standby, removes the gates, and kube-scheduler
  // binds the pods.
  ASSERT_TRUE(k8s::testing::ApplyObjects(admin_.get(), {KueueClusterQueue(cq, flavor, 48)}).ok());
  ASSERT_TRUE(WaitFor([&] { return KueueConditionTrue(workload(), "Admitted"); }, 60))
      << workload().dump(2) << "\n"
      << (*kueue)->LogTail();
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<Json> pods = Pods();
        return pods.size() == 3 && std::all_of(pods.begin(), pods.end(), [](const Json& p) {
                 return !Str(p, {"spec", "nodeName"}).empty() &&
                        Str(p, {"spec", "schedulingGates"}).empty();
               });
      },
      60))
      << KueuePods(api_.get(), ns_) << "\n"
      << cp_->LogTail("kube-scheduler");
  std::map<std::string, std::string> bound;  // pod -> node
  for (const Json& p : Pods()) {
    const std::string name = Str(p, {"metadata", "name"});
    bound[name] = Str(p, {"spec", "nodeName"});
    // kube-scheduler records the event after the binding, asynchronously.
    EXPECT_TRUE(
        WaitFor([&] { return HasEvent("Pod", name, "Scheduled", "Successfully assigned"); }, 30))
        << name;
  }
  Kubectl({"get", "pods", "-n", ns_, "-o", "wide"});
  Kubectl({"get", "workloads", "-n", ns_, "-o", "wide"});

  ASSERT_TRUE(WaitFor([&] { return Finished("kq"); }, 180)) << Describe("kq");
  EXPECT_EQ(Phase("kq"), "Succeeded") << Describe("kq");
  EXPECT_EQ(Step("kq"), 200) << Describe("kq");
  // Kueue saw the group succeed, released its quota and removed its finalizers: no pod
  // is left behind.
  std::string finished;
  ASSERT_TRUE(
      WaitFor([&] { return KueueFinished(admin_.get(), api_.get(), ns_, group, &finished); }, 60))
      << workload().dump(2) << "\n"
      << KueuePods(api_.get(), ns_);
  if (!finished.empty()) {
    EXPECT_EQ(finished, "True: Succeeded: Pods succeeded: 2/2.");
  }
  std::printf("group %s finished: %s\n", group.c_str(), finished.c_str());
  // Kueue's Workload is owned by the group's pods: once they are gone the garbage
  // collector may already have deleted it.
  Kubectl({"describe", "workload", group, "-n", ns_}, /*may_fail=*/true);
  EXPECT_TRUE(WaitFor([&] { return Pods().empty(); }, 60)) << KueuePods(api_.get(), ns_);
  Kubectl({"get", "clusterqueue", cq, "-o", "wide"});
  std::printf("%s", Describe("kq").c_str());
  std::printf("bound by kube-scheduler: %s\n", ::testing::PrintToString(bound).c_str());
  StopOperator();
  EXPECT_TRUE(op_status_.ok()) << op_status_.ToString();
}

// gang: kueue and a node loss: the standby takes the lost worker's place as with
// Bulwark's own placement, the operator's new standby is admitted by Kueue (a Workload
// of its own) and bound by kube-scheduler, and the job succeeds. The lost worker's pod
// keeps its last status while its node is down (nobody reports for a dead kubelet), so
// Kueue keeps the group's Workload and pods until the node comes back and reports the
// pod Failed; then the group (retriable-in-group: false) ends and Kueue lets go.
TEST_F(OperatorE2E, KueueGangSurvivesANodeLoss) {
  auto ns = KueueNamespace(admin_.get());
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ns_ = *ns;
  const std::string flavor = tag_ + "-gpu", cq = tag_ + "-cq";
  auto kueue = StartKueue(cp_, admin_.get(), ns_, flavor, cq, 48);
  ASSERT_TRUE(kueue.ok()) << kueue.status().ToString();
  StartOperator();
  Json tj = TrainJob("kl", 2, 300, "1");
  tj["spec"]["scheduling"]["gang"] = "kueue";
  tj["spec"]["scheduling"]["kueueQueue"] = "train";
  ASSERT_TRUE(admin_->Create(k8s::TrainJobs(), ns_, tj).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("kl") >= 40; }, 90))
      << Describe("kl") << KueuePods(api_.get(), ns_);
  const std::string group = KueueGroup(Pods());
  auto workload = [&] {
    auto w = admin_->Get(k8s::testing::KueueWorkloads(), ns_, group);
    return w.ok() ? *w : Json();
  };
  ASSERT_TRUE(KueueConditionTrue(workload(), "Admitted")) << workload().dump(2);
  std::string victim, victim_pod;
  for (const Json& p : Pods()) {
    if (Str(p, {"metadata", "labels", "bulwark.dev/role"}) == "worker") {
      victim = Str(p, {"spec", "nodeName"});
      victim_pod = Str(p, {"metadata", "name"});
      break;
    }
  }
  ASSERT_FALSE(victim.empty()) << KueuePods(api_.get(), ns_);
  std::set<std::string> before;
  for (const Json& p : Pods()) before.insert(Str(p, {"metadata", "name"}));
  ASSERT_TRUE(kubelet_->SetNodeReady(victim, false).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEvent("TrainJob", "kl", "StandbyPromoted"); }, 30))
      << Describe("kl");
  // The new standby: Kueue admits it and kube-scheduler binds it.
  std::string restocked;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Json& p : Pods()) {
          const std::string name = Str(p, {"metadata", "name"});
          if (!before.count(name) && !Str(p, {"spec", "nodeName"}).empty()) restocked = name;
        }
        return !restocked.empty();
      },
      60))
      << KueuePods(api_.get(), ns_) << Describe("kl");
  EXPECT_TRUE(
      WaitFor([&] { return HasEvent("Pod", restocked, "Scheduled", "Successfully assigned"); }, 30))
      << restocked;
  EXPECT_TRUE(WaitFor([&] { return HasEvent("Pod", restocked, "CreatedWorkload"); }, 30))
      << restocked;
  ASSERT_TRUE(WaitFor([&] { return Finished("kl"); }, 180)) << Describe("kl");
  EXPECT_EQ(Phase("kl"), "Succeeded") << Describe("kl");
  EXPECT_GE(std::stoi(Str(Get("kl"), {"status", "restarts"})), 1) << Describe("kl");
  std::printf("%s", Describe("kl").c_str());
  Kubectl({"get", "pods", "-n", ns_, "-o", "wide"});
  Kubectl({"get", "workloads", "-n", ns_, "-o", "wide"});

  // While the node is down Kueue still counts the lost pod as running: the group is not
  // finished, and Kueue keeps its finalizer on the group's pods (the standbys are gone).
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<Json> left = Pods();
        return left.size() == 2 && std::all_of(left.begin(), left.end(), [&](const Json& p) {
                 return Str(p, {"metadata", "labels", "kueue.x-k8s.io/pod-group-name"}) == group;
               });
      },
      60))
      << KueuePods(api_.get(), ns_);
  std::printf("node %s down:\n%s", victim.c_str(), KueuePods(api_.get(), ns_).c_str());
  EXPECT_EQ(KueueCondition(workload(), "Finished"), "") << workload()["status"].dump(2);
  // The node is repaired: its kubelet reports the pod Failed, the group has ended.
  ASSERT_TRUE(kubelet_->SetNodeReady(victim, true).ok());
  std::string finished;
  ASSERT_TRUE(
      WaitFor([&] { return KueueFinished(admin_.get(), api_.get(), ns_, group, &finished); }, 60))
      << workload()["status"].dump(2) << "\n"
      << KueuePods(api_.get(), ns_);
  // (Kueue's wording: the group ended; one of its two pods succeeded.)
  if (!finished.empty()) {
    EXPECT_EQ(finished, "True: Succeeded: Pods succeeded: 1/2.");
  }
  std::printf("group %s finished: %s\n", group.c_str(), finished.c_str());
  EXPECT_TRUE(WaitFor([&] { return Pods().empty(); }, 60)) << KueuePods(api_.get(), ns_);
  Kubectl({"get", "workloads", "-n", ns_, "-o", "wide"});
  StopOperator();
  EXPECT_TRUE(op_status_.ok()) << op_status_.ToString();
}

// Suspended and resumed (Kueue's own contract for jobs): the pods of the resumed job
// form a new Kueue group (one per runner), so Kueue admits them instead of matching
// them to the finished Workload of the first run — the job carries on from its
// checkpoint.
TEST_F(OperatorE2E, KueueGangResumesAfterSuspend) {
  auto ns = KueueNamespace(admin_.get());
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ns_ = *ns;
  const std::string flavor = tag_ + "-gpu", cq = tag_ + "-cq";
  auto kueue = StartKueue(cp_, admin_.get(), ns_, flavor, cq, 48);
  ASSERT_TRUE(kueue.ok()) << kueue.status().ToString();
  StartOperator();
  Json tj = TrainJob("ks", 2, 300, "0");
  tj["spec"]["scheduling"]["gang"] = "kueue";
  tj["spec"]["scheduling"]["kueueQueue"] = "train";
  ASSERT_TRUE(admin_->Create(k8s::TrainJobs(), ns_, tj).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return Str(Get("ks"), {"status", "lastCheckpoint", "step"}) != "";
      },
      90))
      << Describe("ks") << KueuePods(api_.get(), ns_);
  const std::string first = KueueGroup(Pods());
  auto set_suspend = [&](bool v) {
    return admin_->UpdateWithRetry(k8s::TrainJobs(), ns_, "ks", [v](Json& o) {
      o["spec"]["suspend"] = v;
      return Status::Ok();
    });
  };
  ASSERT_TRUE(set_suspend(true).ok());
  // The first run's group ends with its pods (stopped: exit 0); Kueue lets go of them.
  std::string finished;
  ASSERT_TRUE(
      WaitFor([&] { return KueueFinished(admin_.get(), api_.get(), ns_, first, &finished); }, 60))
      << KueuePods(api_.get(), ns_);
  ASSERT_TRUE(WaitFor([&] { return Pods().empty(); }, 60)) << KueuePods(api_.get(), ns_);
  std::printf("first group %s finished: %s\n", first.c_str(), finished.c_str());
  ASSERT_TRUE(set_suspend(false).ok());
  // The resumed job's workers: a group of their own, admitted by Kueue.
  std::string second;
  ASSERT_TRUE(WaitFor(
      [&] {
        second = KueueGroup(Pods());
        return !second.empty();
      },
      60))
      << Describe("ks");
  EXPECT_NE(second, first);
  Kubectl({"get", "workloads", "-n", ns_, "-o", "wide"});
  ASSERT_TRUE(WaitFor([&] { return Finished("ks"); }, 180))
      << Describe("ks") << KueuePods(api_.get(), ns_);
  EXPECT_EQ(Phase("ks"), "Succeeded") << Describe("ks");
  EXPECT_TRUE(HasEvent("TrainJob", "ks", "AttemptStarted", "resuming after step"))
      << Describe("ks");
  finished.clear();
  EXPECT_TRUE(
      WaitFor([&] { return KueueFinished(admin_.get(), api_.get(), ns_, second, &finished); }, 60))
      << KueuePods(api_.get(), ns_);
  std::printf("second group %s finished: %s\n", second.c_str(), finished.c_str());
  StopOperator();
  EXPECT_TRUE(op_status_.ok()) << op_status_.ToString();
}

}  // namespace
}  // namespace bulwark::op::e2e
