#include "trainjob/manifest_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trainjob/testing/test_files.h"

namespace bulwark::trainjob {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kSpecA = "name: a\nnodes: 1\nprocsPerNode: 1\ncommand: [python3, a.py]\n";
constexpr const char* kSpecB = "name: b\nnodes: 2\nprocsPerNode: 1\ncommand: [python3, b.py]\n";

TEST(SplitYamlDocumentsTest, KeepsLineNumbersAndDropsEmptyDocuments) {
  const std::string text = std::string("# leading comment\n---\n") + kSpecA +
                           "---\n# only a comment\n--- # b follows\n" + kSpecB + "...\n";
  const auto docs = SplitYamlDocuments(text);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], "\n---\n" + std::string(kSpecA));
  // b's first line is line 10 of the stream: nine lines before it are blank.
  EXPECT_EQ(docs[1].substr(0, 8), std::string(8, '\n'));
  EXPECT_THAT(docs[1], HasSubstr("--- # b follows\nname: b\n"));
  EXPECT_EQ(docs[1].substr(docs[1].size() - 4), "...\n");
}

TEST(SplitYamlDocumentsTest, ASingleDocumentWithoutMarkersIsItself) {
  EXPECT_THAT(SplitYamlDocuments(kSpecA), ElementsAre(std::string(kSpecA)));
  EXPECT_TRUE(SplitYamlDocuments("").empty());
  EXPECT_TRUE(SplitYamlDocuments("# nothing\n---\n\n").empty());
  // "---" inside a line or indented is content, not a marker.
  EXPECT_EQ(SplitYamlDocuments("a: '---'\nb: |\n  ---\n").size(), 1u);
}

class ManifestInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_manifest_input.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  std::string dir_;
};

TEST_F(ManifestInputTest, EveryDocumentOfAFileIsParsed) {
  const std::string p = Write("two.yaml", std::string(kSpecA) + "---\n" + kSpecB);
  auto in = ReadManifestInput(p);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->path, p);
  auto ms = ParseManifestInput(*in, Target::kLocal);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ((*ms)[0].job.job.name, "a");
  EXPECT_EQ((*ms)[1].job.job.nodes, 2);
  EXPECT_EQ((*ms)[1].job.job.source_path, p);
  EXPECT_EQ((*ms)[1].job.job.workdir, dir_);
}

TEST_F(ManifestInputTest, AnErrorInTheSecondDocumentNamesItsLineInTheFile) {
  const std::string p =
      Write("bad.yaml", std::string(kSpecA) + "---\nname: b\nnodes: 0\ncommand: [x]\n");
  auto ms = ParseManifestInput(*ReadManifestInput(p), Target::kLocal);
  ASSERT_FALSE(ms.ok());
  EXPECT_THAT(ms.status().message(), HasSubstr(p + ":7: nodes"));
}

TEST_F(ManifestInputTest, EmptyInputAndMissingFileAreErrors) {
  auto empty =
      ParseManifestInput(*ReadManifestInput(Write("e.yaml", "# nothing\n")), Target::kLocal);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("no manifest in it"));
  auto missing = ReadManifestInput(dir_ + "/absent.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST_F(ManifestInputTest, StandardInputResolvesAgainstTheWorkingDirectory) {
  const std::string p = Write("in.yaml", kSpecB);
  const int saved = dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  FILE* f = std::freopen(p.c_str(), "r", stdin);
  ASSERT_NE(f, nullptr);
  auto in = ReadManifestInput("-");
  dup2(saved, STDIN_FILENO);
  close(saved);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->name, "<stdin>");
  EXPECT_EQ(in->path, "");
  EXPECT_EQ(in->base_dir, std::filesystem::current_path().string());
  auto ms = ParseManifestInput(*in, Target::kLocal);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_EQ((*ms)[0].job.job.name, "b");
}

// What a parse gave, compared whole: status or, per document, kind, notes, source path and
// the TrainJob object.
std::string Summary(const Result<std::vector<LoadedManifest>>& ms) {
  if (!ms.ok()) return "error: " + ms.status().ToString();
  std::string out;
  for (const LoadedManifest& m : *ms) {
    out += std::to_string(static_cast<int>(m.kind)) + " " + m.job.job.source_path + "\n";
    for (const std::string& n : m.notes) out += "note: " + n + "\n";
    out += ToObject(m.job).dump() + "\n";
  }
  return out;
}

// validate parses one load for both targets: each parse must be what a fresh load
// gives, whichever target went first (a parse that changed the shared YAML, e.g. by
// indexing a null node as a map, would show here).
TEST_F(ManifestInputTest, OneLoadParsesForEveryTargetAsAFreshLoadWould) {
  using testing::kTestdata;
  using testing::ReadTestFile;
  const std::string text = std::string(kSpecA) + "---\n" +
                           ReadTestFile(kTestdata + "/trainjob-full.yaml") + "---\n" +
                           ReadTestFile(kTestdata + "/pytorchjob-mnist.yaml") + "---\n" +
                           ReadTestFile(kTestdata + "/trainjob-minimal.yaml");
  auto in = ReadManifestInput(Write("all.yaml", text));
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  const std::string local = Summary(ParseManifestInput(*in, Target::kLocal));
  const std::string k8s = Summary(ParseManifestInput(*in, Target::kKubernetes));
  ASSERT_EQ(local.rfind("error", 0), std::string::npos) << local;
  ASSERT_EQ(k8s.rfind("error", 0), std::string::npos) << k8s;
  EXPECT_NE(local, k8s);
  const LoadedManifestInput loaded(*in);
  EXPECT_EQ(Summary(loaded.Parse(Target::kLocal)), local);
  EXPECT_EQ(Summary(loaded.Parse(Target::kKubernetes)), k8s);
  EXPECT_EQ(Summary(loaded.Parse(Target::kLocal)), local);
  const LoadedManifestInput k8s_first(*in);
  EXPECT_EQ(Summary(k8s_first.Parse(Target::kKubernetes)), k8s);
  EXPECT_EQ(Summary(k8s_first.Parse(Target::kLocal)), local);
}

TEST_F(ManifestInputTest, TheFirstErrorInDocumentOrderIsReportedLoadErrorsIncluded) {
  // Document 2 does not load (syntax), document 3 loads but is invalid, document 1 is
  // fine: document 2's error, for every target.
  const std::string p = Write("errs.yaml", std::string(kSpecA) + "---\nname: [b\n---\n" +
                                               "name: c\nnodes: 0\ncommand: [x]\n");
  const LoadedManifestInput loaded(*ReadManifestInput(p));
  for (Target t : {Target::kLocal, Target::kKubernetes}) {
    auto ms = loaded.Parse(t);
    ASSERT_FALSE(ms.ok());
    EXPECT_THAT(ms.status().message(), HasSubstr(p + ":7: (yaml syntax): end of sequence flow"));
    EXPECT_EQ(ms.status().ToString(),
              ParseManifestInput(*ReadManifestInput(p), t).status().ToString());
  }
  // With the syntax error mended, document 3's.
  const std::string q =
      Write("err3.yaml", std::string(kSpecA) + "---\nname: b\nnodes: 1\n" +
                             "command: [x]\n---\nname: c\nnodes: 0\ncommand: [x]\n");
  auto ms = LoadedManifestInput(*ReadManifestInput(q)).Parse(Target::kLocal);
  ASSERT_FALSE(ms.ok());
  EXPECT_THAT(ms.status().message(), HasSubstr(q + ":11: nodes"));
}

}  // namespace
}  // namespace bulwark::trainjob
