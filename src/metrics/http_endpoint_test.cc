#include "metrics/http_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>

#include "common/clock.h"
#include "common/proc.h"

namespace bulwark::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` and reads until the server closes (bounded by 5 s).
std::string Ask(int port, const std::string& request) {
  auto fd = TcpConnect("127.0.0.1", port, 5);
  if (!fd.ok()) return "connect: " + fd.status().ToString();
  (void)::send(fd->get(), request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  bool eof = false;
  const double deadline = SystemClock::Get()->NowMono() + 5;
  while (!eof && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({fd->get()}, 0.05);
    out += ReadAvailable(fd->get(), &eof);
  }
  return out;
}

TEST(HttpEndpointTest, HealthReadinessMetricsAndErrors) {
  std::atomic<bool> ready{false};
  auto e = HttpEndpoint::Start(":0", {[] { return true; }, [&] { return ready.load(); },
                                      [] { return std::string("bulwark_x 1\n"); }});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const int port = (*e)->port();
  EXPECT_THAT(Ask(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(Ask(port, "GET /readyz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 503"));
  ready.store(true);
  EXPECT_THAT(Ask(port, "GET /readyz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200"));
  const std::string m = Ask(port, "GET /metrics?x=1 HTTP/1.1\r\n\r\n");
  EXPECT_THAT(m, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(m, HasSubstr("\r\n\r\nbulwark_x 1\n"));
  EXPECT_THAT(Ask(port, "GET /nope HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Ask(port, "POST /healthz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(Ask(port, "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  // A client that sends nothing does not delay a probe (served on its own thread);
  // it is dropped after its 2 s budget.
  auto idle = TcpConnect("127.0.0.1", port, 5);
  ASSERT_TRUE(idle.ok());
  const double t0 = SystemClock::Get()->NowMono();
  EXPECT_THAT(Ask(port, "GET /healthz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200"));
  EXPECT_LT(SystemClock::Get()->NowMono() - t0, 1.0);
  (*e)->Stop();
  EXPECT_FALSE(HttpEndpoint::Start("nonsense", {}).ok());
  EXPECT_FALSE(HttpEndpoint::Start(":99999", {}).ok());
}

TEST(HttpEndpointTest, OtherPathsGoToTheRoute) {
  HttpEndpointHandlers h;
  h.route = [](const std::string& path, const std::string& query) -> std::optional<HttpResponse> {
    if (path != "/api/x") return std::nullopt;
    return HttpResponse{200, "application/json", "{\"q\":\"" + query + "\"}"};
  };
  auto e = HttpEndpoint::Start("127.0.0.1:0", h);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string r = Ask((*e)->port(), "GET /api/x?since=3 HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(r, HasSubstr("Content-Type: application/json"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\n{\"q\":\"since=3\"}"));
  EXPECT_THAT(Ask((*e)->port(), "GET /api/y HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404"));
}

}  // namespace
}  // namespace bulwark::metrics
