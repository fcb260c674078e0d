// FakeApiServer under the operator benchmark's load: 5,000 Nodes, 500 TrainJobs and
// 4,000 Pods in 50 namespaces, full and paged LISTs over HTTPS, and the fan-out of
// 2,000 pod status updates to 150 filtered watches. Prints the timings (the figures in
// docs/kubernetes.md); the bounds are loose sanity limits that also hold under ASan.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s::testing {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Json NodeJson(int i) {
  std::string name = "node-" + std::to_string(i);
  Json conditions = Json::array();
  for (const char* t : {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}) {
    conditions.push_back({{"type", t},
                          {"status", std::string(t) == "Ready" ? "True" : "False"},
                          {"reason", "KubeletReady"},
                          {"message", "kubelet is posting ready status"},
                          {"lastHeartbeatTime", "2026-01-01T00:00:00Z"},
                          {"lastTransitionTime", "2026-01-01T00:00:00Z"}});
  }
  Json capacity = {{"cpu", "96"},
                   {"memory", "2063731468Ki"},
                   {"nvidia.com/gpu", "8"},
                   {"pods", "110"},
                   {"ephemeral-storage", "7499641860Ki"}};
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", name},
        {"labels",
         {{"kubernetes.io/hostname", name},
          {"topology.kubernetes.io/zone", "zone-" + std::to_string(i % 4)},
          {"bulwark.dev/rack", "rack-" + std::to_string(i / 32)},
          {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}}}},
      {"spec", {{"podCIDR", "10.0." + std::to_string(i % 256) + ".0/24"}}},
      {"status",
       {{"capacity", capacity},
        {"allocatable", capacity},
        {"conditions", conditions},
        {"addresses", {{{"type", "InternalIP"}, {"address", "10.1.0." + std::to_string(i % 256)}}}},
        {"nodeInfo", {{"kubeletVersion", "v1.31.0"}, {"osImage", "Debian GNU/Linux 12"}}}}}};
}

TEST(FakeApiServerLoadTest, ListsAndFansOutAtOperatorScale) {
  constexpr int kNodes = 5000, kJobs = 500, kPods = 4000, kNamespaces = 50, kUpdates = 2000;
  auto started = StartServer();
  ASSERT_TRUE(started);
  FakeApiServer& server = *started;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kNodes; ++i) ASSERT_TRUE(server.Create(NodeJson(i)).ok());
  for (int n = 0; n < kNamespaces; ++n) {
    ASSERT_TRUE(server
                    .Create({{"apiVersion", "v1"},
                             {"kind", "Namespace"},
                             {"metadata", {{"name", "team-" + std::to_string(n)}}}})
                    .ok());
  }
  Json crd = CrdJson("bulwark.dev", "trainjobs", "TrainJob", "v1alpha1",
                     {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}},
                     {{"subresources", {{"status", Json::object()}}}});
  ASSERT_TRUE(server.Create(crd).ok());
  for (int j = 0; j < kJobs; ++j) {
    std::string ns = "team-" + std::to_string(j % kNamespaces);
    ASSERT_TRUE(
        server
            .Create({{"apiVersion", "bulwark.dev/v1alpha1"},
                     {"kind", "TrainJob"},
                     {"metadata", {{"name", "job-" + std::to_string(j)}, {"namespace", ns}}},
                     {"spec", {{"nodes", 8}, {"image", "pytorch:2.3"}}}})
            .ok());
  }
  for (int p = 0; p < kPods; ++p) {
    std::string ns = "team-" + std::to_string(p % kNamespaces);
    Json pod = PodJson(ns, "pod-" + std::to_string(p), {{"job", "j" + std::to_string(p % 10)}},
                       "node-" + std::to_string(p));
    ASSERT_TRUE(server.Create(pod).ok());
  }
  double load_s = Since(t0);

  Curl curl(server);
  t0 = std::chrono::steady_clock::now();
  HttpResult nodes = curl.Get("/api/v1/nodes");
  double list_nodes_s = Since(t0);
  ASSERT_EQ(nodes.code, 200);
  ASSERT_EQ(nodes.json()["items"].size(), static_cast<size_t>(kNodes));
  t0 = std::chrono::steady_clock::now();
  size_t paged = 0;
  std::string cont;
  do {
    Json page =
        curl.Get("/api/v1/pods?limit=500" + (cont.empty() ? "" : "&continue=" + cont)).json();
    paged += page["items"].size();
    cont = page["metadata"].value("continue", "");
  } while (!cont.empty());
  double list_pods_paged_s = Since(t0);
  EXPECT_EQ(paged, static_cast<size_t>(kPods));
  t0 = std::chrono::steady_clock::now();
  HttpResult jobs = curl.Get("/apis/bulwark.dev/v1alpha1/trainjobs");
  double list_jobs_s = Since(t0);
  ASSERT_EQ(jobs.json()["items"].size(), static_cast<size_t>(kJobs));

  // 100 namespace watches, 50 label-selected all-namespace watches.
  std::string rv = server.CurrentResourceVersion();
  std::vector<std::unique_ptr<WatchStream>> watches;
  std::vector<size_t> expected;
  for (int w = 0; w < 100; ++w) {
    watches.push_back(std::make_unique<WatchStream>(
        server, "/api/v1/namespaces/team-" + std::to_string(w % kNamespaces) +
                    "/pods?watch=1&resourceVersion=" + rv));
    expected.push_back(kUpdates / kNamespaces);
  }
  for (int w = 0; w < 50; ++w) {
    watches.push_back(std::make_unique<WatchStream>(
        server, "/api/v1/pods?watch=1&labelSelector=job%3Dj" + std::to_string(w % 10) +
                    "&resourceVersion=" + rv));
    expected.push_back(kUpdates / 10);
  }
  ASSERT_TRUE(PollUntil([&] { return server.OpenWatches() == 150; }, 60));
  t0 = std::chrono::steady_clock::now();
  for (int u = 0; u < kUpdates; ++u) {
    std::string ns = "team-" + std::to_string(u % kNamespaces);
    auto pod = server.Get(PodsResource(), ns, "pod-" + std::to_string(u));
    ASSERT_TRUE(pod.ok());
    (*pod)["status"] = {{"phase", "Running"}, {"podIP", "10.2.0.1"}};
    ASSERT_TRUE(server.UpdateStatus(*pod).ok());
  }
  double updates_s = Since(t0);
  for (size_t w = 0; w < watches.size(); ++w) {
    ASSERT_TRUE(watches[w]->WaitEvents(expected[w], 120)) << "watch " << w;
  }
  double fanout_s = Since(t0);
  size_t delivered = 0;
  for (size_t w = 0; w < watches.size(); ++w) {
    std::vector<Json> ev = watches[w]->Events();
    EXPECT_EQ(ev.size(), expected[w]);
    delivered += ev.size();
  }
  std::printf(
      "fake apiserver load: %d nodes + %d trainjobs + %d pods created directly in %.2f s\n"
      "  LIST nodes (%zu bytes) %.3f s; LIST pods in pages of 500 %.3f s; LIST trainjobs %.3f s\n"
      "  %d pod status updates %.2f s; all %zu events delivered to 150 watches in %.2f s\n",
      kNodes, kJobs, kPods, load_s, nodes.body.size(), list_nodes_s, list_pods_paged_s, list_jobs_s,
      kUpdates, updates_s, delivered, fanout_s);
  EXPECT_LT(list_nodes_s, 10.0);
  EXPECT_LT(fanout_s, 120.0);
}

}  // namespace
}  // namespace bulwark::k8s::testing
