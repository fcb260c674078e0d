#include "operator/dashboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark::op {
namespace {

using ::testing::HasSubstr;

TEST(OperatorDashboardTest, ListsJobsAndServesEachJobsPageAndApi) {
  ControllerStatus s;
  s.phase = JobPhase::kRunning;
  s.current_step = 42;
  s.stage = "Running";
  JobStatusSource src{[] {
                        return std::vector<std::string>{"ml/gpt", "ml/<x>"};
                      },
                      [&](const std::string& key) -> std::optional<ControllerStatus> {
                        if (key == "ml/gpt") return s;
                        return std::nullopt;
                      }};
  auto index = DashboardRoute(src, "/jobs/", "", 1);
  ASSERT_TRUE(index.has_value());
  EXPECT_THAT(index->body, HasSubstr("<a href=\"/jobs/ml/gpt/\">ml/gpt</a> &mdash; Running, "
                                     "step 42, ETTR 0.000"));
  EXPECT_THAT(index->body, HasSubstr("ml/&lt;x&gt;"));  // names are escaped
  auto page = DashboardRoute(src, "/jobs/ml/gpt/", "", 1);
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  EXPECT_THAT(page->body, HasSubstr("app.js"));
  auto api = DashboardRoute(src, "/jobs/ml/gpt/api/status", "", 1);
  ASSERT_TRUE(api.has_value());
  EXPECT_THAT(api->body, HasSubstr("\"job\":\"gpt\""));
  EXPECT_THAT(api->body, HasSubstr("\"step\":42"));
  EXPECT_EQ(DashboardRoute(src, "/jobs/ml/none/api/status", "", 1)->code, 404);
  EXPECT_EQ(DashboardRoute(src, "/jobs/ml/gpt", "", 1)->code, 404);
  EXPECT_FALSE(DashboardRoute(src, "/jobs/ml/gpt/../../etc/passwd", "", 1).has_value());
  EXPECT_FALSE(DashboardRoute(src, "/other", "", 1).has_value());
}

}  // namespace
}  // namespace bulwark::op
