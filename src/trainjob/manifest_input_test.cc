#include "trainjob/manifest_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace bulwark::trainjob
