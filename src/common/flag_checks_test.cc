#include "common/flag_checks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bulwark::flags {
namespace {

// Parses `args` (after the program name) into an app with one option checked by `check`;
// returns CLI11's error text, "" when the value was accepted.
template <typename T>
std::string Parse(const CLI::Validator& check, std::vector<std::string> args, T* value) {
  CLI::App app("t");
  app.add_option("--v", *value)->check(check);
  std::vector<std::string> argv = {"t"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (std::string& a : argv) ptrs.push_back(a.data());
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(FlagChecksTest, AtLeastSaysTheBoundAndTheValue) {
  int v = 7;
  EXPECT_EQ(Parse(AtLeast(0), {"--v", "-1"}, &v), "--v: must be >= 0 (got -1)");
  EXPECT_EQ(v, 7);
  EXPECT_EQ(Parse(AtLeast(0), {"--v", "0"}, &v), "");
  EXPECT_EQ(v, 0);
  EXPECT_EQ(Parse(AtLeast(-1), {"--v", "-2"}, &v), "--v: must be >= -1 (got -2)");
  EXPECT_EQ(Parse(AtLeast(0), {"--v", "abc"}, &v), "--v: must be a number >= 0 (got \"abc\")");
  EXPECT_EQ(Parse(AtLeast(0), {"--v", "nan"}, &v), "--v: must be a number >= 0 (got \"nan\")");
  EXPECT_EQ(Parse(AtLeast(0), {"--v", "1e999"}, &v), "--v: must be a number >= 0 (got \"1e999\")");
}

TEST(FlagChecksTest, PositiveRefusesZero) {
  double v = 1;
  EXPECT_EQ(Parse(Positive(), {"--v", "0"}, &v), "--v: must be > 0 (got 0)");
  EXPECT_EQ(Parse(Positive(), {"--v", "0.25"}, &v), "");
  EXPECT_EQ(v, 0.25);
}

TEST(FlagChecksTest, InRangeIsInclusiveAndPrintsShortNumbers) {
  double v = 1;
  EXPECT_EQ(Parse(InRange(0.1, 3600), {"--v", "0"}, &v),
            "--v: must be between 0.1 and 3600 (got 0)");
  EXPECT_EQ(Parse(InRange(0.1, 3600), {"--v", "3600.5"}, &v),
            "--v: must be between 0.1 and 3600 (got 3600.5)");
  EXPECT_EQ(Parse(InRange(0.1, 3600), {"--v", "0.1"}, &v), "");
  EXPECT_EQ(Parse(InRange(0.1, 3600), {"--v", "3600"}, &v), "");
  EXPECT_EQ(v, 3600);
}

TEST(FlagChecksTest, AFractionForAnIntegerFlagFailsConversion) {
  int v = 3;
  EXPECT_EQ(Parse(InRange(1, 10), {"--v", "2.5"}, &v), "Could not convert: --v = 2.5");
}

TEST(FlagChecksTest, HelpNamesTheRule) {
  CLI::App app("t");
  int a = 0, b = 0, c = 0;
  double d = 1;
  app.add_option("--a", a)->check(AtLeast(0));
  app.add_option("--b", b)->check(AtLeast(-1));
  app.add_option("--c", c)->check(InRange(1, 4096));
  app.add_option("--d", d)->check(Positive());
  const std::string help = app.help();
  EXPECT_NE(help.find("--a INT:NONNEGATIVE"), std::string::npos) << help;
  EXPECT_NE(help.find("--b INT:>= -1"), std::string::npos) << help;
  EXPECT_NE(help.find("--c INT:[1, 4096]"), std::string::npos) << help;
  EXPECT_NE(help.find("--d FLOAT:POSITIVE"), std::string::npos) << help;
}

}  // namespace
}  // namespace bulwark::flags
