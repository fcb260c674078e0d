// End-to-end monitoring (docs/monitoring.md): a real Prometheus server (Debian's
// package, on loopback) scrapes a running `bulwark run` job and its agents through the
// target list the run keeps; the ETTR Prometheus computes from the counters matches the
// run's own report; `promtool check metrics` accepts every endpoint's text.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/json_util.h"
#include "common/net.h"
#include "common/proc.h"
#include "e2e_util.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using e2e::E2EBase;
using e2e::Now;
using e2e::RunProcess;

// GET http://127.0.0.1:port/target (one request, bounded by 5 s); the body, or "".
std::string HttpGet(int port, const std::string& target) {
  auto fd = TcpConnect("127.0.0.1", port, 5);
  if (!fd.ok()) return "";
  const std::string req = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)::send(fd->get(), req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  bool eof = false;
  const double deadline = Now() + 5;
  while (!eof && Now() < deadline) {
    PollReadable({fd->get()}, 0.05);
    out += ReadAvailable(fd->get(), &eof);
  }
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

int FreePort() {
  auto l = TcpListen("127.0.0.1", 0);
  if (!l.ok()) return 0;
  auto p = LocalPort(l->get());
  return p.ok() ? *p : 0;
}

class MonitoringE2E : public E2EBase {
 protected:
  void TearDown() override {
    if (prom_pid_ > 0) TerminateGroup(prom_pid_, prom_pid_, 5);
    E2EBase::TearDown();
  }

  // Starts Prometheus scraping the targets in `sd_file` every 250 ms; waits until ready.
  void StartPrometheus(const std::string& sd_file) {
    prom_port_ = FreePort();
    ASSERT_GT(prom_port_, 0);
    std::ofstream(dir_ + "/prometheus.yml")
        << "global: {scrape_interval: 250ms, scrape_timeout: 200ms}\n"
        << "scrape_configs:\n"
        << "  - job_name: bulwark\n"
        << "    honor_labels: true\n"
        << "    file_sd_configs: [{files: ['" << sd_file << "'], refresh_interval: 1s}]\n";
    SpawnOptions so;
    so.argv = {"prometheus", "--config.file=" + dir_ + "/prometheus.yml",
               "--storage.tsdb.path=" + dir_ + "/tsdb",
               "--web.listen-address=127.0.0.1:" + std::to_string(prom_port_),
               "--log.level=warn"};
    so.env = CurrentEnv();
    so.new_process_group = true;
    auto c = Spawn(so);
    ASSERT_TRUE(c.ok()) << "prometheus (Debian's package; scripts/setup.sh installs it): "
                        << c.status().ToString();
    prom_pid_ = c->pid;
    const double deadline = Now() + 60;
    while (Now() < deadline && HttpGet(prom_port_, "/-/ready").find("Ready") == std::string::npos) {
      PollReadable({}, 0.1);
    }
    ASSERT_NE(HttpGet(prom_port_, "/-/ready").find("Ready"), std::string::npos)
        << "Prometheus did not become ready within 60 s";
  }

  // An instant query's result vector.
  Json Query(const std::string& promql) {
    const std::string body = HttpGet(prom_port_, "/api/v1/query?query=" + UrlEncode(promql));
    Json j = Json::parse(body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") {
      ADD_FAILURE() << "query " << promql << " failed: " << body;
      return Json::array();
    }
    return j["data"]["result"];
  }
  static double Value(const Json& result) {
    return result.empty() ? std::nan("") : std::stod(result[0]["value"][1].get<std::string>());
  }

  int prom_port_ = 0;
  int prom_pid_ = -1;
};

TEST_F(MonitoringE2E, PrometheusScrapesTheJobAndItsAgentsAndAgreesWithTheReport) {
  const std::string sd = dir_ + "/targets.json";
  std::ofstream(sd) << "[]\n";
  StartPrometheus(sd);
  const std::string spec = WriteSpec(
      "prom-e2e", 2, 1, 320,
      std::string(e2e::kFastPolicy) + "chaos: [{kind: kill_rank, atStep: 120, rank: 1}]\n",
      ", memorySlots: 4", ", TINY_STEP_TIME: \"0.03\", TINY_SAVE_EVERY_STEP: \"1\"");
  SpawnOptions so;
  so.argv = {build_ + "/bin/bulwark", "run",     spec,         "--report",
             dir_ + "/report.json",   "--run-dir", dir_ + "/run", "--store",
             dir_ + "/bulwark.db",    "--metrics-addr", "127.0.0.1:0",
             "--metrics-sd-file",     sd,        "--metrics-linger", "20"};
  so.env = CurrentEnv();
  so.env["XDG_STATE_HOME"] = dir_ + "/state";
  so.new_process_group = true;
  auto run = Spawn(so);
  ASSERT_TRUE(run.ok()) << run.status().ToString();

  // While it runs: every endpoint's text passes `promtool check metrics`.
  std::set<std::string> checked;
  std::string output;
  bool eof = false;
  const double deadline = Now() + 240;
  while (!eof && Now() < deadline) {
    PollReadable({run->output.get()}, 0.2);
    output += ReadAvailable(run->output.get(), &eof);
    std::ifstream f(sd);
    Json targets = Json::parse(f, nullptr, false);
    if (targets.is_discarded() || !targets.is_array()) continue;
    for (const Json& group : targets) {
      for (const Json& t : group["targets"]) {
        const std::string addr = t.get<std::string>();
        if (checked.count(addr)) continue;
        const std::string text =
            HttpGet(std::stoi(addr.substr(addr.rfind(':') + 1)), "/metrics");
        if (text.find("bulwark_") == std::string::npos) continue;
        const std::string file = dir_ + "/scrape-" + std::to_string(checked.size()) + ".txt";
        std::ofstream(file) << text;
        auto [rc, out] = RunProcess({"sh", "-c", "promtool check metrics < " + file}, {}, 30);
        EXPECT_EQ(rc, 0) << addr << ": promtool check metrics:\n" << out;
        checked.insert(addr);
      }
    }
  }
  auto exit = WaitExit(run->pid, 30);
  ASSERT_TRUE(exit.has_value()) << output;
  ASSERT_EQ(exit->code, 0) << output;
  EXPECT_GE(checked.size(), 3u) << "the controller and both agents' endpoints";

  std::ifstream rf(dir_ + "/report.json");
  Json report = Json::parse(rf, nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  const double ettr = report["ettr"].get<double>();
  ASSERT_GT(ettr, 0.3);

  // Prometheus read the final values (the run waited for that scrape, --metrics-linger);
  // they become queryable within a moment.
  const std::string job = "{job=\"prom-e2e\"}";
  double running = 1;
  for (const double until = Now() + 30; Now() < until; PollReadable({}, 0.2)) {
    running = Value(Query("last_over_time(bulwark_job_running" + job + "[5m])"));
    if (running == 0) break;
  }
  ASSERT_EQ(running, 0) << "Prometheus never saw the finished job";
  const double rate_ettr =
      Value(Query("sum(rate(bulwark_productive_seconds_total" + job + "[5m])) / "
                  "(sum(rate(bulwark_productive_seconds_total" + job + "[5m])) + "
                  "sum(rate(bulwark_lost_seconds_total" + job + "[5m])))"));
  EXPECT_NEAR(rate_ettr, ettr, 0.02 * ettr) << "report ETTR " << ettr;
  EXPECT_NEAR(Value(Query("last_over_time(bulwark_ettr_ratio" + job + "[5m])")), ettr, 1e-6);
  EXPECT_EQ(Value(Query("max_over_time(bulwark_incidents_total{job=\"prom-e2e\","
                        "kind=\"crash\"}[5m])")),
            1);
  // Every agent (two slots and the standby) was scraped through the target list.
  const Json agents =
      Query("count by (node) (max_over_time(bulwark_agent_reports_total" + job + "[5m]))");
  EXPECT_EQ(agents.size(), 3u) << agents.dump();
  EXPECT_GT(Value(Query("max_over_time(bulwark_tokens_total" + job + "[5m])")), 0);
  TerminateGroup(prom_pid_, prom_pid_, 5);  // its command line names the test's directory
  prom_pid_ = -1;
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
