#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "k8s/internal.h"

namespace bulwark::k8s::internal {
namespace {

const char kStream[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"6\"}}}"
    "\r\n\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n";

std::vector<std::string> Split(const std::vector<std::string_view>& chunks, size_t* pending) {
  LineSplitter s;
  std::vector<std::string> lines;
  for (auto c : chunks) {
    EXPECT_TRUE(s.Feed(c, [&](std::string_view l) {
      lines.emplace_back(l);
      return true;
    }));
  }
  *pending = s.pending();
  return lines;
}

TEST(LineSplitterTest, SameLinesWhateverTheChunkBoundaries) {
  const std::string_view all(kStream);
  size_t pending = 0;
  const auto want = Split({all}, &pending);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(pending, 0u);
  EXPECT_EQ(want[1].back(), '}');  // '\r' stripped
  for (size_t i = 0; i <= all.size(); ++i) {
    for (size_t j = i; j <= all.size(); j += 7) {
      auto got = Split({all.substr(0, i), all.substr(i, j - i), all.substr(j)}, &pending);
      ASSERT_EQ(got, want) << "split at " << i << ", " << j;
      EXPECT_EQ(pending, 0u);
    }
  }
  // One byte at a time.
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < all.size(); ++i) bytes.push_back(all.substr(i, 1));
  EXPECT_EQ(Split(bytes, &pending), want);
}

TEST(LineSplitterTest, PartialLastLineIsHeldBackNotDelivered) {
  const std::string_view all(kStream);
  const size_t cut = all.size() - 10;  // in the middle of the BOOKMARK line
  size_t pending = 0;
  auto got = Split({all.substr(0, cut)}, &pending);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GT(pending, 0u);
}

TEST(LineSplitterTest, StopsWhenTheConsumerSaysSo) {
  LineSplitter s;
  int calls = 0;
  EXPECT_FALSE(s.Feed(kStream, [&](std::string_view) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.pending(), 0u);
}

TEST(ParseWatchLineTest, DecodesEveryType) {
  struct Case {
    const char* type;
    EventType want;
  } cases[] = {{"ADDED", EventType::kAdded},
               {"MODIFIED", EventType::kModified},
               {"DELETED", EventType::kDeleted},
               {"BOOKMARK", EventType::kBookmark},
               {"ERROR", EventType::kError}};
  for (const auto& c : cases) {
    std::string line = std::string("{\"type\":\"") + c.type +
                       "\",\"object\":{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"3\"}}}";
    auto ev = ParseWatchLine(line, 1);
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    EXPECT_EQ(ev->type, c.want);
    EXPECT_STREQ(EventTypeName(ev->type), c.type);
    EXPECT_EQ(ResourceVersion(ev->object), "3");
  }
}

TEST(ParseWatchLineTest, BadLinesNameTheLineAndTheField) {
  auto r = ParseWatchLine("{\"type\":\"ADDED\",\"object\":{\"meta", 7);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("watch event 7"), std::string::npos);
  EXPECT_NE(r.status().message().find("not a JSON object"), std::string::npos);

  r = ParseWatchLine("{\"type\":\"CHANGED\",\"object\":{}}", 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'type' is 'CHANGED'"), std::string::npos);

  r = ParseWatchLine("{\"type\":\"ADDED\",\"object\":[1]}", 3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'object'"), std::string::npos);

  r = ParseWatchLine("[1,2]", 4);
  ASSERT_FALSE(r.ok());
}

}  // namespace
}  // namespace bulwark::k8s::internal
