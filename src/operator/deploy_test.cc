// deploy/ as a new user gets it (issue 16): the stock queues admit the stock sample on
// nodes labelled as GPU clusters label them, an unknown queue is refused by name, and
// deploy/docker/Dockerfile agrees with the repository, scripts/setup.sh and
// deploy/operator.yaml (no image can be built here: no Docker daemon, no registry).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "operator/node_health.h"
#include "operator/placement.h"
#include "sched/config.h"
#include "trainjob/render.h"
#include "trainjob/testing/test_files.h"
#include "trainjob/trainjob.h"
#include "trainjob/yaml_json.h"

namespace bulwark::op {
namespace {

using ::testing::HasSubstr;

const std::string kSrc = BW_TEST_SOURCE_DIR;

std::vector<Json> Docs(const std::string& rel) {
  auto d = trainjob::ParseYamlDocuments(trainjob::testing::ReadTestFile(kSrc + "/" + rel), rel);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : std::vector<Json>{};
}

Json Find(const std::vector<Json>& docs, const std::string& kind, const std::string& name) {
  for (const Json& d : docs) {
    if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return d;
  }
  ADD_FAILURE() << "no " << kind << " " << name;
  return Json::object();
}

// The operator container of deploy/operator.yaml.
Json OperatorContainer() {
  const Json dep = Find(Docs("deploy/operator.yaml"), "Deployment", "bulwark-operator");
  return dep["spec"]["template"]["spec"]["containers"][0];
}

// Stock GPU nodes: 8 H100s each, labelled by the GPU operator's feature discovery only.
std::vector<NodeView> StockH100Nodes(int n) {
  std::vector<NodeView> out;
  for (int i = 0; i < n; ++i) {
    Json node = {{"metadata",
                  {{"name", "gpu-" + std::to_string(i)},
                   {"labels", {{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}}}},
                 {"status",
                  {{"allocatable", {{"nvidia.com/gpu", "8"}}},
                   {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
    out.push_back(ReadNode(node, "nvidia.com/gpu"));
  }
  return out;
}

// The placement `bulwark operator --queues` builds from deploy/operator.yaml's ConfigMap
// (the file the Deployment mounts at the path its args name).
std::unique_ptr<ClusterPlacement> StockPlacement() {
  const Json cm = Find(Docs("deploy/operator.yaml"), "ConfigMap", "bulwark-queues");
  const Json c = OperatorContainer();
  const std::vector<std::string> args = c["args"].get<std::vector<std::string>>();
  auto q = std::find(args.begin(), args.end(), "--queues");
  EXPECT_NE(q, args.end()) << "deploy/operator.yaml passes no --queues";
  if (q == args.end() || q + 1 == args.end()) return nullptr;
  const std::string path = *(q + 1);
  std::string mounted;
  for (const Json& m : c["volumeMounts"]) {
    const std::string dir = m["mountPath"];
    if (path.rfind(dir + "/", 0) == 0) mounted = path.substr(dir.size() + 1);
  }
  EXPECT_EQ(mounted, "queues.yaml") << path << " is not the ConfigMap's key";
  auto cfg = sched::ParseSchedulingConfig(cm["data"].value(mounted, ""), "bulwark-queues");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return nullptr;
  return std::make_unique<ClusterPlacement>(cfg->scheduler, cfg->queues);
}

TEST(DeployTest, TheStockQueuesAdmitTheSampleOnNodesLabelledByFeatureDiscovery) {
  auto p = StockPlacement();
  ASSERT_NE(p, nullptr);
  auto sample =
      trainjob::LoadManifest(kSrc + "/deploy/sample-trainjob.yaml", trainjob::Target::kKubernetes);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  ASSERT_TRUE(p->SyncNodes(StockH100Nodes(2), 0).ok());
  const sched::JobRequest req =
      trainjob::SchedRequest(sample->job, trainjob::StandbyCount(sample->job.job));
  ASSERT_TRUE(p->Submit(req, 0).ok()) << p->Submit(req, 0).ToString();
  PlacementCycle c = p->Schedule(0);
  ASSERT_EQ(c.admitted.size(), 1u) << p->Reason(req.id);
  EXPECT_EQ(c.admitted[0].second.gang.size(), static_cast<size_t>(sample->job.job.nodes));
  // The sample fits the nodes it is admitted to.
  EXPECT_EQ(sample->job.pod.gpus_per_node, 8);
}

TEST(DeployTest, AnUnknownQueueIsRefusedNamingTheConfiguredOnes) {
  auto p = StockPlacement();
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->SyncNodes(StockH100Nodes(2), 0).ok());
  sched::JobRequest req;
  req.id = "ml/llama";
  req.queue = "foundation";
  req.nodes = 2;
  Status st = p->Submit(req, 0);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("no queue \"foundation\" is configured"));
  EXPECT_THAT(st.message(), HasSubstr("the operator's queues are: default"));
  // A GPU type the cluster lacks names the types it has.
  req.queue = "default";
  req.gpu_type = "a100";
  st = p->Submit(req, 0);
  EXPECT_THAT(st.message(), HasSubstr("the cluster's nodes by GPU type: h100 2"));
}

// --- deploy/docker/Dockerfile -------------------------------------------------------------

struct Stage {
  std::string name;
  std::vector<std::string> lines;  // instructions, continuation lines joined
};

std::vector<Stage> Stages() {
  std::istringstream in(trainjob::testing::ReadTestFile(kSrc + "/deploy/docker/Dockerfile"));
  std::vector<Stage> out;
  std::string cur;
  for (std::string line; std::getline(in, line);) {
    if (cur.empty() && (line.empty() || line[0] == '#')) continue;
    const bool more = !line.empty() && line.back() == '\\';
    cur += (more ? line.substr(0, line.size() - 1) : line) + " ";
    if (more) continue;
    std::istringstream w(cur);
    std::string op;
    w >> op;
    if (op == "FROM") {
      std::string image, as, name;
      w >> image >> as >> name;
      out.push_back({name, {}});
    }
    if (!out.empty()) out.back().lines.push_back(cur);
    cur.clear();
  }
  return out;
}

const Stage& StageNamed(const std::vector<Stage>& stages, const std::string& name) {
  static const Stage kNone;
  for (const Stage& s : stages) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no stage " << name;
  return kNone;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream w(s);
  std::vector<std::string> out;
  for (std::string x; w >> x;) out.push_back(x);
  return out;
}

// The packages an `apt-get install` in the stage names.
std::set<std::string> AptPackages(const Stage& s) {
  std::set<std::string> out;
  for (const std::string& l : s.lines) {
    const std::vector<std::string> w = Words(l);
    auto it = std::find(w.begin(), w.end(), "install");
    for (; it != w.end() && *it != "&&"; ++it) {
      if (it->find_first_of("-") != 0 && *it != "install") out.insert(*it);
    }
  }
  return out;
}

// Where the COPY lines of the Dockerfile's stage `name` put files.
std::set<std::string> CopyDestinations(const std::string& name) {
  const std::vector<Stage> stages = Stages();
  std::set<std::string> dests;
  for (const std::string& l : StageNamed(stages, name).lines) {
    const std::vector<std::string> w = Words(l);
    if (w[0] == "COPY") dests.insert(w.back());
  }
  return dests;
}

TEST(DockerfileTest, EveryCopySourceExistsInTheRepository) {
  for (const Stage& s : Stages()) {
    for (const std::string& l : s.lines) {
      std::vector<std::string> w = Words(l);
      if (w.empty() || w[0] != "COPY" || l.find("--from=") != std::string::npos) continue;
      for (size_t i = 1; i + 1 < w.size(); ++i) {
        EXPECT_TRUE(std::filesystem::exists(kSrc + "/" + w[i]))
            << "stage " << s.name << ": COPY " << w[i] << " is not in the repository";
      }
    }
  }
}

TEST(DockerfileTest, TheBuildStageInstallsSetupShsCppBuildDependencies) {
  // scripts/setup.sh's PKGS: the C++ build's are the compilers and tools and the -dev
  // libraries (the rest is for the demo and the tests: torch, Prometheus, Chromium, ...,
  // and for the fuzz build: clang).
  std::istringstream in(trainjob::testing::ReadTestFile(kSrc + "/scripts/setup.sh"));
  std::set<std::string> want;
  bool in_pkgs = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PKGS=(", 0) == 0) {
      in_pkgs = true;
      line = line.substr(6);
    }
    if (!in_pkgs) continue;
    if (line.rfind(")", 0) == 0) break;
    // The fuzz build (BULWARK_FUZZ: clang, libFuzzer) is not the image's.
    const size_t hash = line.find('#');
    if (hash != std::string::npos && line.find("fuzz", hash) != std::string::npos) continue;
    for (const std::string& p : Words(line.substr(0, hash))) {
      const bool dev = p.size() > 4 && p.compare(p.size() - 4, 4, "-dev") == 0;
      if (dev || p == "build-essential" || p == "cmake" || p == "ninja-build" ||
          p == "pkg-config") {
        want.insert(p);
      }
    }
  }
  ASSERT_GE(want.size(), 12u);
  const std::set<std::string> have = AptPackages(StageNamed(Stages(), "build"));
  for (const std::string& p : want) {
    EXPECT_TRUE(have.count(p)) << "the build stage lacks setup.sh's " << p;
  }
  for (const std::string& p : have) {
    const bool extra = p == "git" || p == "nodejs" || p == "npm" || p == "ca-certificates";
    EXPECT_TRUE(want.count(p) || extra)
        << "the build stage installs " << p << ", which scripts/setup.sh does not name";
  }
}

TEST(DockerfileTest, TheOperatorImageIsWhatDeployOperatorYamlRuns) {
  const std::vector<Stage> stages = Stages();
  const Stage& op = StageNamed(stages, "operator");
  std::string entrypoint, user, expose, copied;
  for (const std::string& l : op.lines) {
    const std::vector<std::string> w = Words(l);
    if (w[0] == "ENTRYPOINT") entrypoint = l.substr(l.find('['));
    if (w[0] == "USER") user = w[1];
    if (w[0] == "EXPOSE") expose = w[1];
    if (w[0] == "COPY" && w.back() == "/usr/local/bin/bulwark") copied = w.back();
  }
  const Json c = OperatorContainer();
  const Json dep = Find(Docs("deploy/operator.yaml"), "Deployment", "bulwark-operator");
  const Json& sc = dep["spec"]["template"]["spec"]["securityContext"];
  EXPECT_EQ(Json::parse(entrypoint), c["command"]);
  EXPECT_EQ(copied, "/usr/local/bin/bulwark");  // on the image's PATH
  EXPECT_EQ(user, std::to_string(sc["runAsUser"].get<int>()) + ":" +
                      std::to_string(sc["runAsGroup"].get<int>()));
  EXPECT_EQ(c["args"][0], "operator");
  EXPECT_EQ(expose, std::to_string(c["ports"][0]["containerPort"].get<int>()));
  const std::vector<std::string> args = c["args"].get<std::vector<std::string>>();
  auto m = std::find(args.begin(), args.end(), "--metrics-addr");
  ASSERT_NE(m, args.end());
  EXPECT_EQ(*(m + 1), ":" + expose);  // the probes' port serves /healthz
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["port"], c["ports"][0]["name"]);
  // The image tags of the documented build commands are the ones deploy/ uses.
  const std::string dockerfile =
      trainjob::testing::ReadTestFile(kSrc + "/deploy/docker/Dockerfile");
  const std::string docs = trainjob::testing::ReadTestFile(kSrc + "/docs/kubernetes.md");
  const std::string image = c["image"];
  const std::string trainer =
      Find(Docs("deploy/sample-trainjob.yaml"), "TrainJob", "sample")["spec"]["pod"]["image"];
  for (const auto& [name, text] : {std::pair{"deploy/docker/Dockerfile", &dockerfile},
                                   std::pair{"docs/kubernetes.md", &docs}}) {
    EXPECT_NE(text->find("-t " + image + " ."), std::string::npos)
        << name << " does not build " << image << ", the image deploy/operator.yaml runs";
    EXPECT_NE(text->find("-t " + trainer + " ."), std::string::npos)
        << name << " does not build " << trainer << ", the sample's image";
  }
}

// The operator's image is the pods' --agent-image: it has bulwark-agent where the init
// container runs it, and the SDK where an installed agent (install_paths.h) finds it.
TEST(DockerfileTest, TheOperatorImageIsTheAgentImageThePodsInstallFrom) {
  const std::set<std::string> dests = CopyDestinations("operator");
  EXPECT_TRUE(dests.count(trainjob::RenderOptions{}.agent_path));
  EXPECT_TRUE(dests.count("/usr/local/lib/libbulwark.so"));
  EXPECT_TRUE(dests.count("/usr/local/lib/bulwark/python/bulwark"));
  const Json c = OperatorContainer();
  const std::vector<std::string> args = c["args"].get<std::vector<std::string>>();
  auto a = std::find(args.begin(), args.end(), "--agent-image");
  ASSERT_NE(a, args.end()) << "deploy/operator.yaml passes no --agent-image";
  EXPECT_EQ(*(a + 1), c["image"].get<std::string>());
  EXPECT_EQ(trainjob::DefaultAgentImage(), c["image"].get<std::string>())
      << "the built-in --agent-image is not the image deploy/operator.yaml runs";
}

TEST(DockerfileTest, TheTrainerImageHasTheAgentWhereThePodsRunIt) {
  const std::set<std::string> dests = CopyDestinations("trainer");
  EXPECT_TRUE(dests.count(trainjob::RenderOptions{}.agent_path));
  // The agent's built-in --python-dir and --lib (src/agent/CMakeLists.txt) with the build
  // stage's source at /opt/bulwark and build at /opt/bulwark/build.
  EXPECT_TRUE(dests.count("/opt/bulwark/python"));
  EXPECT_TRUE(dests.count("/opt/bulwark/build/lib/libbulwark.so"));
}

}  // namespace
}  // namespace bulwark::op
