#include "cli/render_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "trainjob/yaml_json.h"

namespace bulwark::cli {
namespace {

using ::testing::HasSubstr;

const std::string kTestdata = BW_TRAINJOB_TESTDATA_DIR;

struct Out {
  int rc;
  std::string out, err;
};

Out Render(const RenderFlags& f) {
  std::ostringstream out, err;
  int rc = RenderRun(f, out, err);
  return {rc, out.str(), err.str()};
}

TEST(RenderCmdTest, TrainJobAsYamlDocuments) {
  RenderFlags f;
  f.spec = kTestdata + "/trainjob-full.yaml";
  f.node_names = "gpu-1,gpu-2";
  f.controller = "10.1.2.3:7070";
  Out r = Render(f);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto docs = trainjob::ParseYamlDocuments(r.out, "out");
  ASSERT_TRUE(docs.ok()) << docs.status().message();
  // Service, PodGroup (gang volcano), 2 workers, standbys (spareNodes: auto).
  ASSERT_GE(docs->size(), 4u);
  EXPECT_EQ((*docs)[0]["kind"], "Service");
  EXPECT_EQ((*docs)[1]["kind"], "PodGroup");
  const Json& cmd = (*docs)[2]["spec"]["containers"][0]["command"];
  EXPECT_EQ(cmd[0], "/bulwark/agent/lib/ld.so");  // the agent installed by the init container
  EXPECT_EQ((*docs)[2]["spec"]["initContainers"][0]["image"], trainjob::DefaultAgentImage());
  auto at = std::find(cmd.begin(), cmd.end(), "--controller");
  ASSERT_NE(at, cmd.end());
  EXPECT_EQ(*(at + 1), "10.1.2.3:7070");
  EXPECT_FALSE((*docs)[2]["spec"].contains("nodeName"));  // Volcano binds, not the names
  EXPECT_THAT(r.out, HasSubstr("---\n"));
}

TEST(RenderCmdTest, PyTorchJobPrintsNotesAndTheTrainJob) {
  RenderFlags f;
  f.spec = kTestdata + "/pytorchjob-llm.yaml";
  f.trainjob = true;
  f.output = "json";
  Out r = Render(f);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("note: "));
  EXPECT_THAT(r.err, HasSubstr("torchrun and its flags"));
  Json j = Json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["kind"], "TrainJob");
  EXPECT_EQ(j[0]["spec"]["nodes"], 4);
}

TEST(RenderCmdTest, CrdAndUsageErrors) {
  RenderFlags crd;
  crd.crd = true;
  Out r = Render(crd);
  ASSERT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("name: trainjobs.bulwark.dev"));

  RenderFlags none;
  EXPECT_EQ(Render(none).rc, 2);
  RenderFlags bad_out;
  bad_out.crd = true;
  bad_out.output = "xml";
  EXPECT_THAT(Render(bad_out).err, HasSubstr("-o must be yaml or json"));

  RenderFlags spec;  // a plain job spec has no image
  spec.spec = std::string(BW_TEST_SOURCE_DIR) + "/examples/pytorch-ddp/job.yaml";
  Out no_image = Render(spec);
  EXPECT_EQ(no_image.rc, 2);
  EXPECT_THAT(no_image.err, HasSubstr("pass --image IMAGE"));
  spec.image = "ghcr.io/acme/ddp:1";
  Out with_image = Render(spec);
  EXPECT_EQ(with_image.rc, 0) << with_image.err;
  EXPECT_THAT(with_image.out, HasSubstr("ghcr.io/acme/ddp:1"));

  RenderFlags missing;
  missing.spec = "/nonexistent.yaml";
  EXPECT_EQ(Render(missing).rc, 2);
  RenderFlags bad_ctl;
  bad_ctl.spec = kTestdata + "/trainjob-minimal.yaml";
  bad_ctl.controller = "nohost";
  EXPECT_THAT(Render(bad_ctl).err, HasSubstr("--controller must be HOST:PORT"));
}

TEST(RenderCmdTest, NodeNamesAreCheckedBeforeTheyBindPods) {
  RenderFlags f;
  f.spec = std::string(BW_TEST_SOURCE_DIR) + "/examples/pytorch-ddp/job.yaml";
  f.image = "img";
  f.node_names = "n1,n1";
  Out twice = Render(f);
  EXPECT_EQ(twice.rc, 2);
  EXPECT_THAT(twice.err, HasSubstr("--node-names: 'n1' is named twice"));
  f.node_names = "n1,Node_2";
  Out bad = Render(f);
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("'Node_2' is not a Kubernetes node name"));
  f.node_names = "n1";
  Out few = Render(f);
  EXPECT_EQ(few.rc, 0) << few.err;
  EXPECT_THAT(few.err, HasSubstr("binds 1 of 2 worker pods"));
  EXPECT_THAT(few.out, HasSubstr("nodeName: n1"));
  f.node_names = "n1,n2,n3,n4";  // more than workers and standby: extra standby pods
  Out many = Render(f);
  EXPECT_EQ(many.rc, 0) << many.err;
  EXPECT_THAT(many.out, HasSubstr("nodeName: n4"));
}

}  // namespace
}  // namespace bulwark::cli
