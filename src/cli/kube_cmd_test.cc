// `bulwark submit` against the fake API server (src/k8s/testing): manifests become
// TrainJobs on the cluster; bad input and a missing cluster exit 2 with the reason.
#include "cli/kube_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "k8s/testing/fake_apiserver.h"
#include "trainjob/render.h"

namespace bulwark::cli {
namespace {

using ::testing::HasSubstr;

const std::string kTestdata = BW_TRAINJOB_TESTDATA_DIR;

class SubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = k8s::testing::FakeApiServer::Start({});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->Create(trainjob::TrainJobCrd()).ok());
    dir_ = "/tmp/bw-submit-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    flags_.kubeconfig = dir_ + "/kubeconfig";
    ASSERT_TRUE(server_->WriteKubeconfig(flags_.kubeconfig).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<k8s::testing::FakeApiServer> server_;
  std::string dir_;
  KubeFlags flags_;
};

TEST_F(SubmitTest, PyTorchJobBecomesATrainJobOnTheCluster) {
  std::ostringstream o0, e0;  // the manifest's namespace must exist, as on a cluster
  EXPECT_EQ(SubmitRun(kTestdata + "/pytorchjob-mnist.yaml", flags_, o0, e0), 1);
  EXPECT_THAT(e0.str(), HasSubstr("namespaces \"kubeflow\" not found"));
  ASSERT_TRUE(server_->Create({{"apiVersion", "v1"},
                               {"kind", "Namespace"},
                               {"metadata", {{"name", "kubeflow"}}}})
                  .ok());
  std::ostringstream out, err;
  ASSERT_EQ(SubmitRun(kTestdata + "/pytorchjob-mnist.yaml", flags_, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("note: "));
  EXPECT_THAT(out.str(), HasSubstr("created in namespace"));
  const std::vector<Json> jobs = server_->List(k8s::TrainJobs());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["apiVersion"], "bulwark.dev/v1alpha1");
  EXPECT_GE(jobs[0]["spec"]["nodes"].get<int>(), 1);
  // Twice: AlreadyExists is a usage error (pick another name), not a cluster failure.
  std::ostringstream out2, err2;
  EXPECT_EQ(SubmitRun(kTestdata + "/pytorchjob-mnist.yaml", flags_, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("AlreadyExists"));
}

TEST_F(SubmitTest, NamespaceFlagAndBadInput) {
  KubeFlags f = flags_;
  f.ns = "kube-public";
  std::ostringstream out, err;
  ASSERT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", f, out, err), 0) << err.str();
  EXPECT_EQ(server_->List(k8s::TrainJobs(), "kube-public").size(), 1u);

  const std::string bad = dir_ + "/bad.yaml";
  std::ofstream(bad) << "name: x\nnodes: 0\ncommand: [\"python3\"]\n";
  std::ostringstream o2, e2;
  EXPECT_EQ(SubmitRun(bad, flags_, o2, e2), 2);
  EXPECT_THAT(e2.str(), HasSubstr("nodes: must be >= 1"));

  KubeFlags none;
  none.kubeconfig = dir_ + "/missing";
  std::ostringstream o3, e3;
  EXPECT_EQ(SubmitRun(kTestdata + "/trainjob-minimal.yaml", none, o3, e3), 2);
  EXPECT_THAT(e3.str(), HasSubstr("no cluster configured"));
}

}  // namespace
}  // namespace bulwark::cli
