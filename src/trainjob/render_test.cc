// The rendered pods, Service, PodGroup, Events and taint: every field the operator
// and the cluster depend on.
#include "trainjob/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainjob/testing/test_files.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

using testing::kTestdata;

TrainJob Full() {
  auto r = ParseTrainJob(testing::ReadTestFile(kTestdata + "/trainjob-full.yaml"), "full.yaml", "",
                         Target::kKubernetes);
  EXPECT_TRUE(r.ok()) << r.status().message();
  TrainJob t = r.ok() ? *r : TrainJob();
  t.uid = "uid-1";
  t.scheduling.gang = GangMode::kBulwark;
  return t;
}

// The volume named `name` in a pod, or null.
Json Volume(const Json& pod, const std::string& name) {
  for (const Json& v : pod["spec"]["volumes"]) {
    if (v["name"] == name) return v;
  }
  return nullptr;
}

std::string MountPath(const Json& pod, const std::string& name) {
  for (const Json& m : pod["spec"]["containers"][0]["volumeMounts"]) {
    if (m["name"] == name) return m["mountPath"];
  }
  return "";
}

TEST(RenderPodTest, WorkerPodHasEverythingTheNodeNeeds) {
  RenderOptions o;
  o.controller_addr = "10.0.0.5:7070";
  o.labels = {{"bulwark.dev/operator", "op-1"}};
  const TrainJob t = Full();
  const Json pod = RenderPod(t, "node-1", 1, "gpu-node-17", o);
  const Json& meta = pod["metadata"];
  EXPECT_EQ(pod["apiVersion"], "v1");
  EXPECT_EQ(pod["kind"], "Pod");
  EXPECT_EQ(meta["name"], "gpt-char-node-1");
  EXPECT_EQ(meta["namespace"], "ml");
  EXPECT_EQ(meta["labels"][kJobLabel], "gpt-char");
  EXPECT_EQ(meta["labels"][kNodeIdLabel], "node-1");
  EXPECT_EQ(meta["labels"][kRoleLabel], "worker");
  EXPECT_EQ(meta["labels"]["bulwark.dev/operator"], "op-1");
  EXPECT_EQ(meta["annotations"][kSlotAnnotation], "1");
  EXPECT_EQ(meta["finalizers"], Json::array({"bulwark.dev/agent"}));
  const Json& owner = meta["ownerReferences"][0];
  EXPECT_EQ(owner["apiVersion"], "bulwark.dev/v1alpha1");
  EXPECT_EQ(owner["kind"], "TrainJob");
  EXPECT_EQ(owner["name"], "gpt-char");
  EXPECT_EQ(owner["uid"], "uid-1");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);

  const Json& spec = pod["spec"];
  EXPECT_EQ(spec["hostNetwork"], true);
  EXPECT_EQ(spec["dnsPolicy"], "ClusterFirstWithHostNet");
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["nodeName"], "gpu-node-17");
  EXPECT_EQ(spec["hostname"], "node-1");
  EXPECT_EQ(spec["subdomain"], "gpt-char");
  EXPECT_EQ(spec["terminationGracePeriodSeconds"], 40);  // stopGraceSeconds 10 + 30
  EXPECT_EQ(spec["serviceAccountName"], "trainer");
  EXPECT_EQ(spec["priorityClassName"], "high");
  // Bound by the operator to a node it read as a100: no gpu-type selector for the kubelet
  // to refuse on a node labelled only nvidia.com/gpu.product (issue 16).
  EXPECT_FALSE(spec["nodeSelector"].contains("bulwark.dev/gpu-type"));
  EXPECT_EQ(spec["nodeSelector"]["cloud.google.com/gke-nodepool"], "a100-pool");
  EXPECT_EQ(spec["tolerations"], t.pod.tolerations);
  for (const Json& tol : spec["tolerations"]) EXPECT_NE(tol["key"], kQuarantineTaint);
  EXPECT_FALSE(spec.contains("schedulerName"));

  const Json& c = spec["containers"][0];
  EXPECT_EQ(c["name"], "agent");
  EXPECT_EQ(c["image"], "ghcr.io/acme/train:1.0");
  EXPECT_EQ(c["imagePullPolicy"], "Always");
  EXPECT_EQ(c["command"], Json({"/usr/local/bin/bulwark-agent", "--controller", "10.0.0.5:7070",
                                "--node", "node-1", "--run-dir", "/bulwark/run", "--peer-host",
                                "$(POD_IP)", "--heartbeat-interval", "2"}));
  EXPECT_FALSE(c.contains("args"));  // the user's command reaches the agent from the controller
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(c["resources"]["limits"]["cpu"], "32");
  EXPECT_EQ(c["resources"]["limits"]["memory"], "512Gi");
  EXPECT_EQ(c["resources"]["requests"], c["resources"]["limits"]);
  EXPECT_EQ(c["securityContext"]["capabilities"]["add"], Json({"SYS_PTRACE"}));
  std::map<std::string, std::string> env;
  for (const Json& e : c["env"]) {
    env[e["name"]] = e.contains("valueFrom") ? e["valueFrom"]["fieldRef"]["fieldPath"] : e["value"];
  }
  EXPECT_EQ(env["POD_NAME"], "metadata.name");
  EXPECT_EQ(env["POD_NAMESPACE"], "metadata.namespace");
  EXPECT_EQ(env["POD_IP"], "status.podIP");
  EXPECT_EQ(env["NODE_NAME"], "spec.nodeName");

  EXPECT_EQ(MountPath(pod, "bulwark-run"), "/bulwark/run");
  EXPECT_EQ(Volume(pod, "dshm")["emptyDir"], Json({{"medium", "Memory"}, {"sizeLimit", "64Gi"}}));
  EXPECT_EQ(MountPath(pod, "dshm"), "/dev/shm");
  EXPECT_EQ(Volume(pod, "data")["persistentVolumeClaim"]["claimName"], "datasets");
  EXPECT_EQ(MountPath(pod, "data"), "/data");
  EXPECT_EQ(Volume(pod, "ckpt-local")["hostPath"],
            Json({{"path", "/mnt/nvme/bulwark"}, {"type", "DirectoryOrCreate"}}));
  EXPECT_EQ(MountPath(pod, "ckpt-local"), "/bulwark/local");
  EXPECT_EQ(Volume(pod, "ckpt-shared")["persistentVolumeClaim"]["claimName"], "ckpt-rwx");
  EXPECT_EQ(MountPath(pod, "ckpt-shared"), "/bulwark/shared");
  EXPECT_EQ(Volume(pod, "config")["configMap"]["name"], "train-config");
  EXPECT_EQ(MountPath(pod, "config"), "/bulwark/config");
  for (const Json& m : c["volumeMounts"]) {
    EXPECT_EQ(m.value("readOnly", false), m["name"] == "data" || m["name"] == "config") << m;
  }
}

// pod.injectAgent (the default) with the operator's agent image: an init container of
// that image installs the agent into an emptyDir, and the pod runs the bundle, so the
// job's image needs no Bulwark file. injectAgent: false, or no agent image: the job's
// image runs its own bulwark-agent.
TEST(RenderPodTest, TheAgentIsInjectedFromTheOperatorsImageUnlessTheJobSaysItHasOne) {
  RenderOptions o;
  o.controller_addr = "10.0.0.5:7070";
  o.agent_image = "ghcr.io/bulwark-dev/bulwark:9.9.9";
  TrainJob t = Full();
  ASSERT_TRUE(t.pod.inject_agent);
  const Json pod = RenderPod(t, "node-0", 0, "gpu-1", o);
  const Json& init = pod["spec"]["initContainers"];
  ASSERT_EQ(init.size(), 1u) << pod.dump(2);
  EXPECT_EQ(init[0]["name"], kInstallAgentContainer);
  EXPECT_EQ(init[0]["image"], "ghcr.io/bulwark-dev/bulwark:9.9.9");
  EXPECT_EQ(init[0]["command"],
            Json::array({"/usr/local/bin/bulwark-agent", "install", kAgentBundleDir}));
  EXPECT_EQ(init[0]["volumeMounts"][0]["mountPath"], kAgentBundleDir);
  EXPECT_TRUE(Volume(pod, "bulwark-agent")["emptyDir"].is_object());
  EXPECT_EQ(MountPath(pod, "bulwark-agent"), kAgentBundleDir);
  const Json& cmd = pod["spec"]["containers"][0]["command"];
  EXPECT_EQ(cmd[0], "/bulwark/agent/lib/ld.so");
  EXPECT_EQ(cmd[1], "--library-path");
  EXPECT_EQ(cmd[2], "/bulwark/agent/lib");
  EXPECT_EQ(cmd[3], "/bulwark/agent/bin/bulwark-agent");
  EXPECT_EQ(cmd[4], "--controller");
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], t.pod.image);  // the job's own image

  t.pod.inject_agent = false;
  const Json own = RenderPod(t, "node-0", 0, "gpu-1", o);
  EXPECT_FALSE(own["spec"].contains("initContainers"));
  EXPECT_TRUE(Volume(own, "bulwark-agent").is_null());
  EXPECT_EQ(own["spec"]["containers"][0]["command"][0], "/usr/local/bin/bulwark-agent");
  t.pod.inject_agent = true;
  o.agent_image.clear();
  EXPECT_FALSE(RenderPod(t, "node-0", 0, "gpu-1", o)["spec"].contains("initContainers"));

  // The field in a manifest, printed back only when false; a wrong type names it.
  std::string text = testing::ReadTestFile(kTestdata + "/trainjob-full.yaml");
  const std::string image_line = "    image: ghcr.io/acme/train:1.0\n";
  ASSERT_NE(text.find(image_line), std::string::npos);
  std::string with = text;
  with.replace(with.find(image_line), image_line.size(), image_line + "    injectAgent: false\n");
  auto parsed = ParseTrainJob(with, "full.yaml", "", Target::kKubernetes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_FALSE(parsed->pod.inject_agent);
  EXPECT_EQ(ToObject(*parsed)["spec"]["pod"]["injectAgent"], false);
  EXPECT_FALSE(ToObject(Full())["spec"]["pod"].contains("injectAgent"));
  std::string bad = text;
  bad.replace(bad.find(image_line), image_line.size(), image_line + "    injectAgent: maybe\n");
  auto refused = ParseTrainJob(bad, "full.yaml", "", Target::kKubernetes);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("full.yaml:38"));
  EXPECT_THAT(refused.status().message(), HasSubstr("spec.pod.injectAgent"));
}

TEST(RenderPodTest, StandbyAndUnboundAndMinimalPods) {
  TrainJob t = Full();
  const Json standby = RenderPod(t, "node-2", -1, "", {});
  EXPECT_EQ(standby["metadata"]["labels"][kRoleLabel], "standby");
  EXPECT_FALSE(standby["metadata"].contains("annotations"));
  EXPECT_FALSE(standby["spec"].contains("nodeName"));
  EXPECT_EQ(standby["spec"]["containers"][0]["command"][2], "OPERATOR_POD_IP:PORT");

  TrainJob minimal;
  minimal.name = "m";
  minimal.pod.image = "img";
  minimal.pod.gpus_per_node = 0;
  const Json pod = RenderPod(minimal, "node-0", 0, "", {});
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("resources"));
  EXPECT_FALSE(pod["spec"].contains("tolerations"));
  EXPECT_EQ(pod["spec"]["volumes"].size(), 2u);  // run dir and /dev/shm only
  EXPECT_EQ(Volume(pod, "dshm")["emptyDir"], Json({{"medium", "Memory"}}));
}

TEST(RenderPodTest, GangModes) {
  TrainJob t = Full();
  t.scheduling.gang = GangMode::kVolcano;
  Json v = RenderPod(t, "node-0", 0, "", {});
  EXPECT_EQ(v["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(v["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gpt-char");
  // Volcano (and kube-scheduler under Kueue) place by the selector.
  EXPECT_EQ(v["spec"]["nodeSelector"]["bulwark.dev/gpu-type"], "a100");

  t.scheduling.gang = GangMode::kKueue;
  t.scheduling.kueue_queue = "team-a";
  Json k = RenderPod(t, "node-0", 0, "", {});
  EXPECT_FALSE(k["spec"].contains("schedulerName"));
  EXPECT_EQ(k["spec"]["nodeSelector"]["bulwark.dev/gpu-type"], "a100");
  EXPECT_EQ(k["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ(k["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"], "gpt-char");
  EXPECT_EQ(k["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"], "2");
  EXPECT_EQ(k["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"], "false");
  Json ks = RenderPod(t, "node-2", -1, "", {});
  EXPECT_EQ(ks["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_FALSE(ks["metadata"]["labels"].contains("kueue.x-k8s.io/pod-group-name"));
  EXPECT_FALSE(ks["metadata"]["annotations"].contains("kueue.x-k8s.io/retriable-in-group"));
  RenderOptions run;
  run.kueue_pod_group = KueuePodGroupName(t.name, "r2-0a1b");
  EXPECT_EQ(
      RenderPod(t, "node-0", 0, "", run)["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"],
      "gpt-char-r2-0a1b");
}

TEST(RenderPodTest, KueuePodGroupNameIsALabelValue) {
  EXPECT_EQ(KueuePodGroupName("gpt", "r1-00ff"), "gpt-r1-00ff");
  const std::string long_a = std::string(60, 'a') + ".x", long_b = std::string(60, 'a') + ".y";
  const std::string a = KueuePodGroupName(long_a, "r12-00ff");
  EXPECT_EQ(a.size(), 63u) << a;
  EXPECT_EQ(a.substr(a.size() - 9), "-r12-00ff") << a;
  EXPECT_NE(a, KueuePodGroupName(long_b, "r12-00ff"));  // the hash tells them apart
}

TEST(RenderTest, ServicePodGroupEventTaint) {
  const TrainJob t = Full();
  Json svc = RenderHeadlessService(t);
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(svc["metadata"]["name"], "gpt-char");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"], Json({{kJobLabel, "gpt-char"}}));
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["uid"], "uid-1");

  Json pg = RenderPodGroup(t);
  EXPECT_EQ(pg["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(pg["spec"]["minMember"], 2);
  EXPECT_EQ(pg["spec"]["queue"], "team-a");
  EXPECT_EQ(pg["spec"]["minResources"]["nvidia.com/gpu"], "16");

  const Json node = {
      {"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "gpu-7"}, {"uid", "n7"}}}};
  Json ev = RenderEvent(node, "Warning", "NodeQuarantined", "NotReady for 40s", 1700000000.25);
  EXPECT_EQ(ev["kind"], "Event");
  EXPECT_EQ(ev["metadata"]["namespace"], "default");
  EXPECT_THAT(ev["metadata"]["name"].get<std::string>(), HasSubstr("gpu-7."));
  EXPECT_EQ(ev["involvedObject"],
            Json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "gpu-7"}, {"uid", "n7"}}));
  EXPECT_EQ(ev["type"], "Warning");
  EXPECT_EQ(ev["reason"], "NodeQuarantined");
  EXPECT_EQ(ev["source"]["component"], "bulwark-operator");
  EXPECT_EQ(ev["firstTimestamp"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(ev["count"], 1);
  Json ev2 = RenderEvent(node, "Warning", "NodeQuarantined", "NotReady for 40s", 1700000000.5);
  Json ev3 = RenderEvent(ToObject(t), "Normal", "Admitted", "x", 1700000000.25);
  EXPECT_NE(ev["metadata"]["name"], ev2["metadata"]["name"]);
  EXPECT_EQ(ev3["metadata"]["namespace"], "ml");
  EXPECT_EQ(ev3["involvedObject"]["kind"], "TrainJob");
  EXPECT_EQ(RenderEvent(node, "Normal", "R", std::string(5000, 'x'), 1)["message"]
                .get<std::string>()
                .size(),
            1024u);

  EXPECT_EQ(RenderQuarantineTaint("NodeNotReady"), Json({{"key", "bulwark.dev/quarantined"},
                                                         {"value", "NodeNotReady"},
                                                         {"effect", "NoSchedule"}}));
  EXPECT_EQ(RenderQuarantineTaint(" Xid 79: GPU fell off the bus! ")["value"],
            "Xid-79--GPU-fell-off-the-bus");
  EXPECT_EQ(RenderQuarantineTaint(std::string(100, 'a'))["value"].get<std::string>().size(), 63u);
}

TEST(RenderTest, JobObjectsPerGangMode) {
  TrainJob t = Full();
  t.job.fault_policy.spare_nodes_auto = false;
  t.job.fault_policy.spare_nodes = 1;
  auto objs = RenderJobObjects(t, {"n-a", "n-b", "n-c"}, {});
  ASSERT_EQ(objs.size(), 4u);  // Service + 2 workers + 1 standby
  EXPECT_EQ(objs[0]["kind"], "Service");
  EXPECT_EQ(objs[1]["metadata"]["name"], "gpt-char-node-0");
  EXPECT_EQ(objs[1]["spec"]["nodeName"], "n-a");
  EXPECT_EQ(objs[2]["spec"]["nodeName"], "n-b");
  EXPECT_EQ(objs[3]["metadata"]["labels"][kRoleLabel], "standby");
  EXPECT_EQ(objs[3]["spec"]["nodeName"], "n-c");
  EXPECT_EQ(RenderJobObjects(t, {"a", "b", "c", "d", "e"}, {}).size(), 6u);  // extra standbys

  t.scheduling.gang = GangMode::kVolcano;
  objs = RenderJobObjects(t, {"n-a", "n-b"}, {});
  ASSERT_EQ(objs.size(), 5u);
  EXPECT_EQ(objs[1]["kind"], "PodGroup");
  EXPECT_FALSE(objs[2]["spec"].contains("nodeName"));  // Volcano binds

  t.scheduling.gang = GangMode::kKueue;
  t.scheduling.kueue_queue = "q";
  objs = RenderJobObjects(t, {}, {});
  ASSERT_EQ(objs.size(), 4u);
  for (const Json& o : objs) EXPECT_NE(o["kind"], "PodGroup");
}

}  // namespace
}  // namespace bulwark::trainjob
