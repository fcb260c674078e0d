#include "cli/stores.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

class StoresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_stores.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    registry_ = dir_ + "/state/bulwark/stores";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Touch(const std::string& rel) {
    const std::string p = dir_ + "/" + rel;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << "x";
    return p;
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> out;
    std::ifstream in(registry_);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  std::string dir_, registry_;
};

TEST_F(StoresTest, RunsAreRememberedOnceNewestLastAndGoneStoresAreDropped) {
  const std::string a = Touch("a/.bulwark/bulwark.db"), b = Touch("b/bulwark.db");
  ASSERT_TRUE(RememberStore(registry_, a).ok());  // creates the directories
  ASSERT_TRUE(RememberStore(registry_, b).ok());
  ASSERT_TRUE(RememberStore(registry_, a).ok());
  EXPECT_EQ(Lines(), (std::vector<std::string>{b, a}));
  fs::remove(b);
  const std::string c = Touch("c/bulwark.db");
  ASSERT_TRUE(RememberStore(registry_, dir_ + "/c/../c/bulwark.db").ok());  // normalised
  EXPECT_EQ(Lines(), (std::vector<std::string>{a, c}));
  EXPECT_EQ(KnownStores(registry_), (std::vector<std::string>{a, c}));
}

TEST_F(StoresTest, TheCurrentDirectorysStoreComesFirstAndNothingIsListedTwice) {
  const std::string a = Touch("a/.bulwark/bulwark.db");
  const std::string other = Touch("b/bulwark.db");
  ASSERT_TRUE(RememberStore(registry_, a).ok());
  ASSERT_TRUE(RememberStore(registry_, other).ok());
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_ + "/a");
  const std::vector<std::string> known = KnownStores(registry_);
  fs::current_path(dir_ + "/b");  // no ./.bulwark here, and no registry: nothing
  const std::vector<std::string> none = KnownStores(dir_ + "/no/registry");
  fs::current_path(cwd);
  EXPECT_EQ(known, (std::vector<std::string>{".bulwark/bulwark.db", other}));
  EXPECT_TRUE(none.empty());
}

TEST_F(StoresTest, TheRegistryFollowsXdgStateHome) {
  const char* old = getenv("XDG_STATE_HOME");
  const std::string keep = old ? old : "";
  setenv("XDG_STATE_HOME", "/somewhere/state", 1);
  EXPECT_EQ(StoreRegistryPath(), "/somewhere/state/bulwark/stores");
  setenv("XDG_STATE_HOME", "relative", 1);  // not absolute: ignored, as the spec says
  EXPECT_NE(StoreRegistryPath().find("/.local/state/bulwark/stores"), std::string::npos);
  if (old) {
    setenv("XDG_STATE_HOME", keep.c_str(), 1);
  } else {
    unsetenv("XDG_STATE_HOME");
  }
}

}  // namespace
}  // namespace bulwark::cli
