// `bulwark submit` against a real kube-apiserver (the binary's shared control plane,
// k8s/testing/cluster.h) with the TrainJob CRD installed: manifests become TrainJobs on
// the cluster, through a kubeconfig with the admin client certificate; bad input and a
// missing cluster exit 2 with the reason.
#include "cli/kube_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "k8s/testing/cluster.h"
#include "trainjob/render.h"

namespace bulwark::cli {
namespace {

using ::testing::HasSubstr;

const std::string kTestdata = BW_TRAINJOB_TESTDATA_DIR;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cp_ = k8s::testing::SharedControlPlane();
    ASSERT_NE(cp_, nullptr);
    auto admin = k8s::Client::Create(cp_->AdminConfig());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    admin_ = std::move(*admin);
    // The product's CRD under its own name (SubmitRun writes trainjobs.bulwark.dev);
    // installing it again is a replace.
    Status crd = k8s::testing::InstallCrd(admin_.get(), trainjob::TrainJobCrd());
    ASSERT_TRUE(crd.ok()) << crd.ToString();
    dir_ = "/tmp/bw-submit-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    flags_.kubeconfig = dir_ + "/kubeconfig";
    ASSERT_TRUE(
        k8s::testing::ControlPlane::WriteKubeconfig(flags_.kubeconfig, cp_->AdminConfig()).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<Json> TrainJobsIn(const std::string& ns) {
    return k8s::testing::Objects(admin_.get()).List(k8s::TrainJobs(), ns);
  }

  k8s::testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<k8s::Client> admin_;
  std::string dir_;
  KubeFlags flags_;
};

TEST_F(SubmitTest, PyTorchJobBecomesATrainJobOnTheCluster) {
  // The testdata manifest, in a namespace of this test's own that does not exist yet.
  const std::string ns = "kubeflow-" + std::to_string(getpid());
  std::string manifest = ReadText(kTestdata + "/pytorchjob-mnist.yaml");
  const size_t at = manifest.find("namespace: kubeflow\n");
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, std::string("namespace: kubeflow").size(), "namespace: " + ns);
  const std::string spec = dir_ + "/pytorchjob.yaml";
  std::ofstream(spec) << manifest;

  std::ostringstream o0, e0;  // the manifest's namespace must exist
  EXPECT_EQ(SubmitRun(spec, flags_, o0, e0), 1);
  EXPECT_THAT(e0.str(), HasSubstr("404 NotFound: namespaces \"" + ns + "\" not found"));
  ASSERT_TRUE(
      admin_
          ->Create({"", "v1", "namespaces", "Namespace", false}, "",
                   {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}})
          .ok());
  std::ostringstream out, err;
  ASSERT_EQ(SubmitRun(spec, flags_, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("note: "));
  EXPECT_THAT(out.str(), HasSubstr("created in namespace " + ns));
  const std::vector<Json> jobs = TrainJobsIn(ns);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["apiVersion"], "bulwark.dev/v1alpha1");
  EXPECT_EQ(jobs[0]["metadata"]["name"], "pytorch-dist-mnist-nccl");
  EXPECT_GE(jobs[0]["spec"]["nodes"].get<int>(), 1);
  // Twice: AlreadyExists is a usage error (pick another name), not a cluster failure.
  std::ostringstream out2, err2;
  EXPECT_EQ(SubmitRun(spec, flags_, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("409 AlreadyExists"));
}

TEST_F(SubmitTest, NamespaceFlagAndBadInput) {
  auto ns = k8s::testing::UniqueNamespace(admin_.get(), "submit-flag");
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  KubeFlags f = flags_;
  f.ns = *ns;
  std::ostringstream out, err;
  ASSERT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", f, out, err), 0) << err.str();
  EXPECT_EQ(TrainJobsIn(*ns).size(), 1u);

  // Without --namespace and without one in the manifest: the kubeconfig context's, as
  // kubectl does, and the default checkpoint directory follows it.
  auto ctx_ns = k8s::testing::UniqueNamespace(admin_.get(), "submit-ctx");
  ASSERT_TRUE(ctx_ns.ok()) << ctx_ns.status().ToString();
  k8s::ClientConfig in_ctx = cp_->AdminConfig();
  in_ctx.namespace_ = *ctx_ns;
  KubeFlags c = flags_;
  c.kubeconfig = dir_ + "/kubeconfig-ns";
  ASSERT_TRUE(k8s::testing::ControlPlane::WriteKubeconfig(c.kubeconfig, in_ctx).ok());
  std::ostringstream oc, ec;
  ASSERT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", c, oc, ec), 0) << ec.str();
  const std::vector<Json> in_context = TrainJobsIn(*ctx_ns);
  ASSERT_EQ(in_context.size(), 1u);
  EXPECT_EQ(in_context[0]["spec"]["checkpoint"].value("dir", ""),
            "/bulwark/local/" + *ctx_ns + "/hello")
      << in_context[0].dump();
  // A manifest that names its namespace and a --namespace that differs: refused.
  const std::string named = dir_ + "/named.yaml";
  std::ofstream(named) << "apiVersion: bulwark.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: n, "
                          "namespace: team-a}\nspec:\n  command: [x]\n  pod: {image: i}\n";
  std::ostringstream on, en;
  EXPECT_EQ(SubmitRun(named, f, on, en), 2);
  EXPECT_THAT(en.str(), HasSubstr("the manifest's namespace team-a does not match --namespace"));

  const std::string bad = dir_ + "/bad.yaml";
  std::ofstream(bad) << "name: x\nnodes: 0\ncommand: [\"python3\"]\n";
  std::ostringstream o2, e2;
  EXPECT_EQ(SubmitRun(bad, flags_, o2, e2), 2);
  EXPECT_THAT(e2.str(), HasSubstr("nodes: must be >= 1"));

  KubeFlags none;
  none.kubeconfig = dir_ + "/missing";
  std::ostringstream o3, e3;
  EXPECT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", none, o3, e3), 2);
  EXPECT_THAT(e3.str(), HasSubstr("--kubeconfig: " + dir_ + "/missing does not exist"));
  // Nothing named anywhere: no flag, no KUBECONFIG, no ~/.kube/config, not in a pod.
  const char* home = std::getenv("HOME");
  const char* kc = std::getenv("KUBECONFIG");
  const std::string saved_home = home ? home : "", saved_kc = kc ? kc : "";
  ::setenv("HOME", dir_.c_str(), 1);
  ::unsetenv("KUBECONFIG");
  std::ostringstream o4, e4;
  EXPECT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", KubeFlags{}, o4, e4), 2);
  EXPECT_THAT(e4.str(), HasSubstr("no cluster configured: pass --kubeconfig FILE"));
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
  if (kc) ::setenv("KUBECONFIG", saved_kc.c_str(), 1);
}

}  // namespace
}  // namespace bulwark::cli
