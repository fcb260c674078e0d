#include "operator/http_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>

#include "common/clock.h"
#include "common/proc.h"
#include "operator/operator.h"

namespace bulwark::op {
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

TEST(FormatMetricsTest, PrometheusTextWithJobLabels) {
  OperatorStats s;
  s.reconciles = 7;
  s.quarantined = 1;
  s.running_jobs = 2;
  s.ettr["ml/gpt"] = 0.97;
  const std::string t = FormatMetrics(s, true);
  EXPECT_THAT(t, HasSubstr("# TYPE bulwark_operator_reconciles_total counter\n"
                           "bulwark_operator_reconciles_total 7\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_operator_leader 1\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_operator_trainjobs{state=\"running\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_trainjob_ettr_ratio{namespace=\"ml\",name=\"gpt\"} 0.97\n"));
}

}  // namespace
}  // namespace bulwark::op
