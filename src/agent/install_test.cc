// `bulwark-agent install DIR` (install.h), run as a pod's init container runs it.
#include "agent/install.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/install_paths.h"
#include "common/run.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out;
};

Outcome RunCommand(const std::vector<std::string>& argv) {
  SpawnOptions o;
  o.argv = argv;
  o.env = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}};
  auto r = RunToEnd(o, 60);
  if (!r.ok()) return Outcome{-1, r.status().ToString()};
  return Outcome{r->exit.signal ? 128 + r->exit.signal : r->exit.code, r->output};
}

class InstallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bw-install-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(InstallTest, CopiesTheAgentItsLoaderLibrariesAndTheSdkAndChecksTheBundleRuns) {
  const fs::path bundle = dir_ / "bulwark" / "agent";
  Outcome r = RunCommand({BULWARK_AGENT_BIN, "install", bundle.string()});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("checked: bulwark-agent "), std::string::npos) << r.out;
  for (const char* f : {"bin/bulwark-agent", "lib/ld.so", "lib/libc.so.6", "lib/libstdc++.so.6",
                        "lib/libbulwark.so", "lib/bulwark/python/bulwark/__init__.py",
                        "lib/bulwark/python/bulwark/sitecustomize_dir/sitecustomize.py"}) {
    EXPECT_TRUE(fs::is_regular_file(bundle / f)) << f;
  }
  EXPECT_FALSE(fs::exists(bundle / "lib/bulwark/python/bulwark/tests"));
  // The bundle's agent is the agent: same version, and its SDK defaults are the
  // bundle's own (laid out as an installed prefix).
  std::vector<std::string> cmd = AgentBundleCommand(bundle.string());
  cmd.push_back("--version");
  Outcome v = RunCommand(cmd);
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_EQ(v.out, RunCommand({BULWARK_AGENT_BIN, "--version"}).out);
  // Installing over an earlier bundle (a restarted init container) works.
  Outcome again = RunCommand({BULWARK_AGENT_BIN, "install", bundle.string()});
  EXPECT_EQ(again.code, 0) << again.out;
}

// The bundle needs nothing of the system it runs on: in a root that holds only the
// bundle (no /lib, no /usr: an image without a single library of ours), it runs.
TEST_F(InstallTest, TheBundleRunsInARootThatHasNothingElse) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's runtime needs /proc, which the bare root lacks";
#else
  const fs::path root = dir_ / "root";
  Outcome r = RunCommand({BULWARK_AGENT_BIN, "install", (root / "agent").string()});
  ASSERT_EQ(r.code, 0) << r.out;
  Outcome probe = RunCommand({"chroot", root.string(), "/agent/lib/ld.so", "--version"});
  if (probe.code != 0 && probe.out.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "chroot is not permitted here: " << probe.out;
  }
  std::vector<std::string> cmd = {"chroot", root.string()};
  for (const std::string& part : AgentBundleCommand("/agent")) cmd.push_back(part);
  cmd.push_back("--version");
  Outcome v = RunCommand(cmd);
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_EQ(v.out.rfind("bulwark-agent ", 0), 0u) << v.out;
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(root)) entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{"agent"});
#endif
}

TEST_F(InstallTest, BadInvocationsSayWhatIsWrong) {
  Outcome none = RunCommand({BULWARK_AGENT_BIN, "install"});
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("dir is required"), std::string::npos) << none.out;
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  Outcome file = RunCommand({BULWARK_AGENT_BIN, "install", (dir_ / "file").string()});
  EXPECT_EQ(file.code, 1) << file.out;
  EXPECT_NE(file.out.find((dir_ / "file").string()), std::string::npos) << file.out;
}

}  // namespace
}  // namespace bulwark
