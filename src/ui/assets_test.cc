#include "ui/assets.h"

#include <gtest/gtest.h>

namespace bulwark::ui {
namespace {

TEST(UiAssets, IndexIsServedAtTheRootAsHtml) {
  for (const char* path : {"/", "/index.html"}) {
    auto r = ServeAsset(path);
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->code, 200);
    EXPECT_EQ(r->content_type.rfind("text/html", 0), 0u) << r->content_type;
    EXPECT_NE(r->content_type.find("charset=utf-8"), std::string::npos);
    EXPECT_NE(r->body.find("<!doctype html>"), std::string::npos);
  }
  EXPECT_EQ(ServeAsset("/")->body, ServeAsset("/index.html")->body);
}

TEST(UiAssets, IndexReferencesTheAppAndUPlot) {
  const std::string html = ServeAsset("/")->body;
  EXPECT_NE(html.find("src=\"app.js\""), std::string::npos);
  EXPECT_NE(html.find("href=\"style.css\""), std::string::npos);
  EXPECT_NE(html.find("src=\"uPlot.iife.min.js\""), std::string::npos);
  EXPECT_NE(html.find("href=\"uPlot.min.css\""), std::string::npos);
}

TEST(UiAssets, ScriptsAndStylesHaveTheirContentTypes) {
  for (const char* path : {"/app.js", "/uPlot.iife.min.js"}) {
    auto r = ServeAsset(path);
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->content_type.rfind("text/javascript", 0), 0u) << r->content_type;
    EXPECT_FALSE(r->body.empty());
  }
  for (const char* path : {"/style.css", "/uPlot.min.css"}) {
    auto r = ServeAsset(path);
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->content_type.rfind("text/css", 0), 0u) << r->content_type;
    EXPECT_FALSE(r->body.empty());
  }
  // The bytes are the files' own: uPlot's bundle defines its global.
  EXPECT_NE(ServeAsset("/uPlot.iife.min.js")->body.find("uPlot"), std::string::npos);
  EXPECT_NE(ServeAsset("/app.js")->body.find("api/status"), std::string::npos);
}

TEST(UiAssets, UnknownAndTraversalPathsAreNotServed) {
  for (const char* path :
       {"", "index.html", "app.js", "/nope.js", "/api/status", "/metrics", "//", "//app.js",
        "/./app.js", "/../app.js", "/../../etc/passwd", "/%2e%2e/etc/passwd",
        "/..%2fCMakeLists.txt", "/ui/app.js", "/app.js/", "/app.js?x=1", "/APP.JS",
        "/node_modules/uplot/dist/uPlot.iife.min.js", "/package.json"}) {
    EXPECT_FALSE(ServeAsset(path).has_value()) << path;
  }
  EXPECT_FALSE(ServeAsset(std::string("/app.js\0", 8)).has_value());
}

}  // namespace
}  // namespace bulwark::ui
