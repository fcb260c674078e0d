#include "controller/tensorboard_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace bulwark {
namespace {

using ::testing::HasSubstr;

// An unwritable directory turns the sink off with one error; training (the callers) is
// not affected and later calls cost nothing.
TEST(TensorBoardSinkTest, AnUnwritableDirectoryIsOneErrorThenNothing) {
  char tmpl[] = "/tmp/bw_tb_sink.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/file") << "x";
  std::vector<std::string> errors;
  TensorBoardSink sink(dir + "/file/tb", [&](const std::string& e) { errors.push_back(e); });
  StepSample s;
  s.rank = 0;
  s.step = 1;
  s.t = 1000;
  s.loss = 1.5;
  for (int i = 0; i < 5; ++i) sink.OnStep(s);
  sink.OnIncident(1, 1000, "crash");
  sink.OnTick(1001, {}, {}, true);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("TensorBoard event files off: "));
  EXPECT_THAT(errors[0], HasSubstr(dir + "/file"));
  EXPECT_FALSE(sink.enabled());
  std::filesystem::remove_all(dir);
}

TEST(TensorBoardSinkTest, OffWithoutADirectory) {
  int calls = 0;
  TensorBoardSink sink("", [&](const std::string&) { ++calls; });
  StepSample s;
  sink.OnStep(s);
  EXPECT_FALSE(sink.enabled());
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace bulwark
