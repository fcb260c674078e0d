#include "common/str_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace bulwark {
namespace {

TEST(StrFormatTest, FmtIsNotTruncated) {
  const std::string long_arg(5000, 'x');
  EXPECT_EQ(Fmt("%s-%d", long_arg.c_str(), 7), long_arg + "-7");
  EXPECT_EQ(Fmt("%s", ""), "");
}

TEST(StrFormatTest, ShortestDecimalReadsBackAsTheSameDouble) {
  EXPECT_EQ(ShortestDecimal(0.1), "0.1");
  EXPECT_EQ(ShortestDecimal(3600), "3600");
  EXPECT_EQ(ShortestDecimal(1099511627776.0), "1099511627776");
  EXPECT_EQ(ShortestDecimal(-1), "-1");
  EXPECT_EQ(ShortestDecimal(512.345), "512.345");
  for (double v : {1e300, -2.2250738585072014e-308, 0.30000000000000004,
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()}) {
    EXPECT_EQ(std::strtod(ShortestDecimal(v).c_str(), nullptr), v) << ShortestDecimal(v);
  }
  EXPECT_EQ(ShortestDecimal(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(ShortestDecimal(std::nan("")), "nan");
}

}  // namespace
}  // namespace bulwark
