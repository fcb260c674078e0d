// The Kubernetes quick start, word for word (issue 16): the commands of deploy/README.md's
// block marked `quickstart` (or README.md's Kubernetes lines) run in order against the real test
// control plane, with a real kubectl from the control plane's bin dir and ~/.kube/config the
// cluster's admin kubeconfig. Nodes are labelled as a stock GPU cluster labels them (the GPU
// operator's feature discovery: nvidia.com/gpu.product, no bulwark.dev/gpu-type), and the node
// emulator runs the pods' real agents and ranks. No image can run here, so the operator
// is started as a local process the way deploy/operator.yaml (as applied) runs it: its
// command and args, the ConfigMap it mounts written to a directory standing for the
// mount, its downward-API environment, and the ServiceAccount's token in a kubeconfig
// instead of the in-cluster one. The sample must be admitted, run and succeed; a
// TrainJob naming a queue the ConfigMap lacks must fail naming the queues there are.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"
#include "k8s/testing/cluster.h"
#include "operator/testing/node_emulator.h"
#include "trainjob/render.h"

namespace bulwark::op {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const k8s::Resource kDeployments = {"apps", "v1", "deployments", "Deployment"};
const k8s::Resource kConfigMaps = {"", "v1", "configmaps", "ConfigMap"};

std::string Str(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  return cur->is_string() ? cur->get<std::string>() : cur->is_null() ? "" : cur->dump();
}

// The Kubernetes quick start of `doc`, without comments: the lines of the ```sh block
// after a `<!-- quickstart` marker (deploy/README.md), or else the kubectl and
// build/bin/bulwark lines after the `# on Kubernetes` comment of a ```sh block
// (README.md's quick start, whose other lines run on this machine).
std::vector<std::string> QuickStartLines(const std::string& doc) {
  std::ifstream in(doc);
  std::vector<std::string> marked_lines, readme_lines;
  bool marked = false, in_block = false, in_marked = false, on_k8s = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("<!-- quickstart", 0) == 0) marked = true;
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block && line.rfind("```sh", 0) == 0;
      if (in_marked && !in_block) break;
      in_marked = in_block && marked;
      on_k8s = false;
      continue;
    }
    if (!in_block) continue;
    if (line.rfind("# on Kubernetes", 0) == 0) on_k8s = true;
    std::string cmd = line.substr(0, line.find('#'));
    while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
    if (cmd.empty()) continue;
    if (in_marked) marked_lines.push_back(cmd);
    if (on_k8s && (cmd.rfind("kubectl ", 0) == 0 || cmd.rfind("build/bin/bulwark ", 0) == 0)) {
      readme_lines.push_back(cmd);
    }
  }
  return marked ? marked_lines : readme_lines;
}

// The document whose quick start this binary runs (BW_QUICKSTART_DOC, relative to the
// source dir); $BW_QUICKSTART_DOC names another file, e.g. a README with proposed lines.
std::string QuickStartDoc() {
  const char* env = std::getenv("BW_QUICKSTART_DOC");
  return env != nullptr && *env != '\0' ? std::string(env)
                                        : std::string(BW_TEST_SOURCE_DIR) + "/" + BW_QUICKSTART_DOC;
}

std::vector<std::string> Split(const std::string& line) {
  std::istringstream w(line);
  std::vector<std::string> out;
  for (std::string x; w >> x;) out.push_back(x);
  return out;
}

class QuickStartE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = BW_TEST_SOURCE_DIR;
    build_ = BW_TEST_BUILD_DIR;
    dir_ = "/tmp/bw-quickstart-" + std::to_string(getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/home/.kube");
    k8s::testing::ControlPlaneOptions cpo;
    cpo.apiserver_flags = {"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"};
    cp_ = k8s::testing::SharedControlPlane(cpo);
    ASSERT_NE(cp_, nullptr);
    auto admin = k8s::Client::Create(cp_->AdminConfig());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    admin_ = std::move(*admin);
    // The user's ~/.kube/config: this cluster's admin.
    fs::copy_file(cp_->admin_kubeconfig(), dir_ + "/home/.kube/config");
    // Two 8-GPU H100 nodes as the GPU operator labels them.
    op::testing::NodeEmulatorOptions ko;
    ko.client = admin_.get();
    for (int i = 0; i < 2; ++i) {
      ko.nodes.push_back({"qs-gpu-" + std::to_string(i),
                          {{"nvidia.com/gpu.present", "true"},
                           {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                           {"nvidia.com/gpu.count", "8"},
                           {"nvidia.com/gpu.memory", "81559"}},
                          8});
    }
    // Only the operator's image has the agent: job images get it from an init container.
    ko.image_binaries[trainjob::DefaultAgentImage()]["/usr/local/bin/bulwark-agent"] =
        build_ + "/bin/bulwark-agent";
    ko.root = dir_ + "/cluster";
    const std::string preload = BW_TEST_PRELOAD;
    if (!preload.empty()) {
      ko.extra_env = {{"LD_PRELOAD", preload},
                      {"ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0"}};
    }
    auto k = op::testing::NodeEmulator::Start(ko);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kubelet_ = std::move(*k);
  }

  void TearDown() override {
    if (op_.pid > 0) {
      TerminateGroup(op_.pid, op_.pgid, 10);
      std::printf("--- operator log ---\n%s\n", OperatorLog().c_str());
    }
    if (kubelet_ && HasFailure()) {
      for (const std::string& s : kubelet_->Summary()) std::printf("pod %s\n", s.c_str());
    }
    kubelet_.reset();
    if (admin_) {
      for (int i = 0; i < 2; ++i)
        (void)admin_->Delete(k8s::Nodes(), "", "qs-gpu-" + std::to_string(i));
    }
    if (HasFailure()) {
      std::printf("kept %s for inspection\n", dir_.c_str());
    } else {
      fs::remove_all(dir_);
    }
  }

  // Runs one documented line: kubectl (the control plane's) or build/bin/bulwark, in the
  // repository root, HOME the test's. Returns the exit and output.
  std::pair<bool, std::string> Run(const std::string& line, double timeout_s = 60) {
    std::vector<std::string> argv = Split(line);
    if (argv[0] == "kubectl") argv[0] = cp_->bin_dir() + "/kubectl";
    if (argv[0] == "build/bin/bulwark") argv[0] = build_ + "/bin/bulwark";
    for (std::string& a : argv) {
      if (a.rfind("~/", 0) == 0) a = dir_ + "/home" + a.substr(1);
    }
    SpawnOptions so;
    so.argv = argv;
    so.env = CurrentEnv();
    so.env["HOME"] = dir_ + "/home";
    so.env.erase("KUBECONFIG");
    so.env["KUBECTL_COMMAND_HEADERS"] = "false";
    so.workdir = src_;
    auto c = Spawn(so);
    if (!c.ok()) return {false, c.status().ToString()};
    std::string out;
    bool eof = false;
    const double deadline = SystemClock::Get()->NowMono() + timeout_s;
    while (!eof && SystemClock::Get()->NowMono() < deadline) {
      PollReadable({c->output.get()}, 0.1);
      out += ReadAvailable(c->output.get(), &eof);
    }
    auto exit = WaitExit(c->pid, eof ? 10 : 0.1);
    if (!exit) {
      TerminateGroup(c->pid, c->pgid, 1);
      return {false, out + "(did not finish within the deadline)"};
    }
    std::printf("$ %s\n%s", line.c_str(), out.c_str());
    return {exit->ok(), out};
  }

  // Starts `bulwark operator` as deploy/operator.yaml's Deployment (read back from the
  // API server) runs it, but as a local process.
  void StartOperatorAsDeployed() {
    auto dep = admin_->Get(kDeployments, "bulwark-system", "bulwark-operator");
    ASSERT_TRUE(dep.ok()) << dep.status().ToString();
    const Json& pod = (*dep)["spec"]["template"]["spec"];
    const Json& c = pod["containers"][0];
    // Volumes: a directory per mount; a ConfigMap's keys written as the kubelet would.
    std::map<std::string, std::string> mounts;  // mountPath -> host dir
    for (const Json& m : c["volumeMounts"]) {
      const std::string name = m["name"], host = dir_ + "/operator-volumes/" + name;
      fs::create_directories(host);
      for (const Json& v : pod["volumes"]) {
        if (v["name"] != name || !v.contains("configMap")) continue;
        auto cm = admin_->Get(kConfigMaps, "bulwark-system", Str(v, {"configMap", "name"}));
        ASSERT_TRUE(cm.ok()) << cm.status().ToString();
        for (const auto& [key, value] : (*cm)["data"].items()) {
          std::ofstream(host + "/" + key) << value.get<std::string>();
        }
      }
      mounts[m["mountPath"]] = host;
    }
    std::vector<std::string> argv;
    for (const char* part : {"command", "args"}) {
      for (const Json& a : c[part]) argv.push_back(a);
    }
    ASSERT_EQ(argv[0], "bulwark");
    argv[0] = build_ + "/bin/bulwark";
    for (std::string& a : argv) {
      for (const auto& [path, host] : mounts) {
        if (a == path || a.rfind(path + "/", 0) == 0) a = host + a.substr(path.size());
      }
      if (a == ":8080") a = "127.0.0.1:0";  // one machine, several tests: any free port
    }
    // Not in-cluster: the ServiceAccount's own token, in a kubeconfig.
    auto sa = cp_->ServiceAccountConfig("bulwark-system", pod["serviceAccountName"]);
    ASSERT_TRUE(sa.ok()) << sa.status().ToString();
    const std::string kubeconfig = dir_ + "/operator.kubeconfig";
    ASSERT_TRUE(k8s::testing::ControlPlane::WriteKubeconfig(kubeconfig, *sa).ok());
    argv.insert(argv.end(), {"--kubeconfig", kubeconfig});
    SpawnOptions so;
    so.argv = argv;
    so.env = CurrentEnv();
    for (const Json& e : c["env"]) {
      const std::string field = Str(e, {"valueFrom", "fieldRef", "fieldPath"});
      if (field == "metadata.name") so.env[e["name"]] = "bulwark-operator-local";
      if (field == "metadata.namespace") so.env[e["name"]] = "bulwark-system";
      if (field == "status.podIP") so.env[e["name"]] = "127.0.0.1";
    }
    so.capture_output = false;
    std::string cmd;
    for (const std::string& a : argv) cmd += " " + a;
    std::printf("operator:%s\n", cmd.c_str());
    const std::string log = dir_ + "/operator.log";
    so.argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" >" + log + " 2>&1"};
    so.argv.insert(so.argv.end(), argv.begin(), argv.end());
    auto child = Spawn(so);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    op_ = std::move(*child);
  }

  std::string OperatorLog() {
    std::ifstream in(dir_ + "/operator.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  Json Get(const std::string& ns, const std::string& name) {
    auto r = admin_->Get(k8s::TrainJobs(), ns, name);
    return r.ok() ? *r : Json();
  }

  std::string Condition(const Json& tj, const std::string& type, const char* field) {
    if (!tj.contains("status") || !tj["status"].contains("conditions")) return "";
    for (const Json& c : tj["status"]["conditions"]) {
      if (c.value("type", "") == type) return c.value(field, "");
    }
    return "";
  }

  std::string src_, build_, dir_;
  k8s::testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<k8s::Client> admin_;
  std::unique_ptr<op::testing::NodeEmulator> kubelet_;
  Child op_;
};

// quickstart_e2e_test runs deploy/README.md's quick start; readme_quickstart_e2e_test,
// the same test, README.md's (see src/operator/CMakeLists.txt).
TEST_F(QuickStartE2E, TheQuickStartInstallsTheOperatorAndTheSampleRuns) {
  const std::string doc = QuickStartDoc();
  const std::vector<std::string> lines = QuickStartLines(doc);
  ASSERT_GE(lines.size(), 3u) << doc << " has no quick start block";
  bool sample_applied = false;
  for (const std::string& line : lines) {
    auto [ok, out] = Run(line);
    ASSERT_TRUE(ok) << line << ":\n" << out;
    // The Deployment exists once the manifests are applied: its pod "starts".
    if (op_.pid < 0 && admin_->Get(kDeployments, "bulwark-system", "bulwark-operator").ok()) {
      ASSERT_NO_FATAL_FAILURE(StartOperatorAsDeployed());
    }
    sample_applied =
        sample_applied || line.find("deploy/sample-trainjob.yaml") != std::string::npos;
  }
  ASSERT_GT(op_.pid, 0) << "no line of the quick start created the operator's Deployment";
  ASSERT_TRUE(sample_applied) << "the quick start does not submit deploy/sample-trainjob.yaml";

  // Admitted on the H100 nodes (whose only GPU label is nvidia.com/gpu.product), Running,
  // then Succeeded.
  bool running_seen = false;
  const bool finished = k8s::testing::PollUntil(
      [&] {
        const std::string phase = Str(Get("ml", "sample"), {"status", "phase"});
        running_seen = running_seen || phase == "Running";
        return phase == "Succeeded" || phase == "Failed";
      },
      300);
  const Json tj = Get("ml", "sample");
  const std::string describe = Run("kubectl describe tj sample -n ml").second;
  ASSERT_TRUE(finished) << describe;
  EXPECT_EQ(Str(tj, {"status", "phase"}), "Succeeded") << describe;
  EXPECT_EQ(Condition(tj, "Admitted", "status"), "True") << describe;
  EXPECT_TRUE(running_seen) << describe;
  EXPECT_EQ(Str(tj, {"status", "currentStep"}), "300") << describe;
  Run("kubectl get tj -n ml");

  // A TrainJob naming a queue the stock ConfigMap lacks fails with the queues there are.
  auto [ok, out] = Run("kubectl apply -f examples/kubernetes/llama-8b-trainjob.yaml");
  ASSERT_TRUE(ok) << out;
  ASSERT_TRUE(k8s::testing::PollUntil(
      [&] {
        return Str(Get("ml", "llama-8b-pretrain"), {"status", "phase"}) == "Failed";
      },
      60))
      << Run("kubectl describe tj llama-8b-pretrain -n ml").second;
  const Json llama = Get("ml", "llama-8b-pretrain");
  EXPECT_EQ(Condition(llama, "Failed", "reason"), "Unschedulable");
  EXPECT_EQ(Condition(llama, "Admitted", "status"), "False");  // never admitted
  EXPECT_THAT(Condition(llama, "Failed", "message"),
              HasSubstr("no queue \"foundation\" is configured; the operator's queues are: "
                        "default"));
  EXPECT_THAT(Run("kubectl describe tj llama-8b-pretrain -n ml").second,
              HasSubstr("no queue \"foundation\" is configured"));
}

}  // namespace
}  // namespace bulwark::op
