#include "cli/cli_main.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

TEST(CommandFilterTest, TheFirstWordNotAnOptionIsTheOnlyFullSubcommand) {
  const CommandFilter all;
  EXPECT_TRUE(all.Full("run"));
  EXPECT_TRUE(all.Full("get"));
  char bulwark[] = "bulwark", get[] = "get", help[] = "--help";
  char* named[] = {bulwark, get, help};
  const CommandFilter only_get = CommandFilter::FromArgv(3, named);
  EXPECT_TRUE(only_get.Full("get"));
  EXPECT_FALSE(only_get.Full("run"));
  EXPECT_FALSE(only_get.Full("ge"));
  char* option_first[] = {bulwark, help, get};  // CLI11 prints get's help
  EXPECT_TRUE(CommandFilter::FromArgv(3, option_first).Full("get"));
  EXPECT_FALSE(CommandFilter::FromArgv(3, option_first).Full("run"));
  char dashes[] = "--";
  char* after_dashes[] = {bulwark, dashes, get};  // a positional, not a subcommand
  EXPECT_FALSE(CommandFilter::FromArgv(3, after_dashes).Full("get"));
  EXPECT_FALSE(CommandFilter::FromArgv(1, named).Full("run"));
}

struct Outcome {
  int rc = -1;
  std::string out, err;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs a command line in process with stdout and stderr (file descriptors 1 and 2, so
// both iostreams and stdio) redirected to files.
Outcome RunCaptured(const std::vector<std::string>& words, const CommandFilter* filter,
                    const fs::path& dir) {
  std::vector<std::string> store = {"bulwark"};
  store.insert(store.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& w : store) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(store.size());
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const int saved_out = dup(1), saved_err = dup(2);
  const fs::path out_path = dir / "out.txt", err_path = dir / "err.txt";
  const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(out_fd, 0);
  EXPECT_GE(err_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  Outcome o;
  o.rc = filter == nullptr ? Main(argc, argv.data()) : MainWithFilter(argc, argv.data(), *filter);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  for (int fd : {saved_out, saved_err, out_fd, err_fd}) close(fd);
  o.out = ReadFile(out_path);
  o.err = ReadFile(err_path);
  return o;
}

class CliMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cli-main-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "work");
    fs::create_directories(dir_ / "state");
    old_cwd_ = fs::current_path();
    fs::current_path(dir_ / "work");
    setenv("XDG_STATE_HOME", (dir_ / "state").c_str(), 1);
    std::ofstream(dir_ / "work" / "job.yaml") << "name: a\nnodes: 1\ncommand: [python3, t.py]\n";
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    unsetenv("XDG_STATE_HOME");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_, old_cwd_;
};

// Main builds in full only the subcommand argv[1] names. Every command line here (help,
// usage errors, typos, and commands that only read) gives the same exit status, stdout
// and stderr as with every subcommand built.
TEST_F(CliMainTest, BuildingOnlyTheNamedSubcommandChangesNoOutput) {
  const std::vector<std::vector<std::string>> lines = {
      {},
      {"--help"},
      {"-h"},
      {"--version"},
      {"--no-such-flag"},
      {"--help", "get"},
      {"--version", "get"},
      {"-h", "ckpt", "ls"},
      {"--", "get"},
      {"--bogus", "get"},
      {"", "get"},
      {"rn", "job.yaml"},
      {"gett"},
      {"run", "--help"},
      {"run"},
      {"run", "missing.yaml"},
      {"run", "--nproc-per-node", "0", "t.py"},
      {"run", "--bogus"},
      {"validate"},
      {"validate", "--help"},
      {"validate", "job.yaml"},
      {"validate", "job.yaml", "--target", "kubernetes"},
      {"validate", "--target", "mars", "job.yaml"},
      {"render", "--help"},
      {"render", "job.yaml", "--trainjob", "--image", "r/t:1"},
      {"sim", "--help"},
      {"sim", "--nope"},
      {"ckpt"},
      {"ckpt", "--help"},
      {"ckpt", "ls", "--help"},
      {"ckpt", "bogus"},
      {"ckpt", "ls", "nowhere"},
      {"get", "--help"},
      {"get"},
      {"get", "-o", "bad"},
      {"describe"},
      {"describe", "x"},
      {"logs", "x", "--tail", "-5"},
      {"cancel", "x", "--wait", "soon"},
      {"chaos", "--help"},
      {"chaos", "kill_rank", "--rank", "-1", "--job", "x"},
      {"chaos", "kill_rank"},
      {"top", "x", "--interval", "0"},
      {"top"},
      {"update", "missing.yaml"},
      {"replay"},
      {"replay", "--help"},
      {"replay", "x", "0", "--kubeconfig", "k"},
      {"diagnose", "--bogus"},
      {"slurm"},
      {"slurm", "script", "--help"},
      {"operator", "--help"},
      {"operator", "--bogus"},
      {"submit"},
      {"submit", "--help"},
  };
  const CommandFilter all;
  for (const std::vector<std::string>& words : lines) {
    std::string line;
    for (const std::string& w : words) line += " " + w;
    SCOPED_TRACE("bulwark" + line);
    const Outcome filtered = RunCaptured(words, nullptr, dir_);
    const Outcome full = RunCaptured(words, &all, dir_);
    EXPECT_EQ(filtered.rc, full.rc);
    EXPECT_EQ(filtered.out, full.out);
    EXPECT_EQ(filtered.err, full.err);
    EXPECT_FALSE(full.out.empty() && full.err.empty()) << "nothing printed";
  }
  // The comparison is of real output: a subcommand's help lists its flags, the top
  // level's lists every subcommand.
  EXPECT_NE(RunCaptured({"run", "--help"}, nullptr, dir_).out.find("--nproc-per-node"),
            std::string::npos);
  const Outcome top = RunCaptured({"--help"}, nullptr, dir_);
  for (const char* name : {"run", "validate", "ckpt", "get", "operator", "slurm", "replay"}) {
    EXPECT_NE(top.out.find(std::string("  ") + name), std::string::npos) << name;
  }
  EXPECT_NE(RunCaptured({"gett"}, nullptr, dir_).err.find("did you mean 'get'?"),
            std::string::npos);
}

}  // namespace
}  // namespace bulwark::cli
