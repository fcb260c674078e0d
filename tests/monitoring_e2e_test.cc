// End-to-end monitoring (docs/monitoring.md): a real Prometheus server (Debian's
// package, on loopback) scrapes a running `bulwark run` job and its agents through the
// target list the run keeps; the ETTR Prometheus computes from the counters matches the
// run's own report; `promtool check metrics` accepts every endpoint's text.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/json_util.h"
#include "common/net.h"
#include "common/proc.h"
#include "common/testing/test_venv.h"
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

  // Starts Prometheus scraping the targets in `sd_file` (and `controller_sd`, if given)
  // every 250 ms; waits until ready.
  void StartPrometheus(const std::string& sd_file, const std::string& controller_sd = "") {
    prom_port_ = FreePort();
    ASSERT_GT(prom_port_, 0);
    std::ofstream(dir_ + "/prometheus.yml")
        << "global: {scrape_interval: 250ms, scrape_timeout: 200ms}\n"
        << "scrape_configs:\n"
        << "  - job_name: bulwark\n"
        << "    honor_labels: true\n"
        << "    file_sd_configs: [{files: ['" << sd_file << "'"
        << (controller_sd.empty() ? "" : ", '" + controller_sd + "'")
        << "], refresh_interval: 1s}]\n";
    SpawnOptions so;
    so.argv = {"prometheus", "--config.file=" + dir_ + "/prometheus.yml",
               "--storage.tsdb.path=" + dir_ + "/tsdb",
               "--web.listen-address=127.0.0.1:" + std::to_string(prom_port_), "--log.level=warn"};
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

  // `bulwark run SPEC` to the end (no TensorBoard files); its report, or a discarded
  // Json when it failed (`out` says why).
  Json RunToReport(const std::string& spec, std::string* out) {
    auto [rc, text] = RunProcess(
        {build_ + "/bin/bulwark", "run", spec, "--report", dir_ + "/report.json", "--run-dir",
         dir_ + "/run", "--store", dir_ + "/bulwark.db", "--no-tensorboard"},
        {{"XDG_STATE_HOME", dir_ + "/state"}}, 240);
    *out = text;
    if (rc != 0) return Json(Json::value_t::discarded);
    std::ifstream rf(dir_ + "/report.json");
    return Json::parse(rf, nullptr, false);
  }

  int prom_port_ = 0;
  int prom_pid_ = -1;
};

TEST_F(MonitoringE2E, PrometheusScrapesTheJobAndItsAgentsAndAgreesWithTheReport) {
  const std::string sd = dir_ + "/targets.json";
  std::ofstream(sd) << "[]\n";
  // The controller's target is known before the run starts (a fixed port), as a
  // Prometheus configured for it would have it: its first samples are the counters at
  // 0, so rate() covers the whole run. The agents come from the run's target list.
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string controller_sd = dir_ + "/controller.json";
  std::ofstream(controller_sd)
      << Json::array({{{"targets", {"127.0.0.1:" + std::to_string(port)}},
                       {"labels", {{"bulwark_job", "prom-e2e"}, {"bulwark_role", "controller"}}}}})
             .dump();
  StartPrometheus(sd, controller_sd);
  // Prometheus applies discovered targets after up to 5 s: wait until it scrapes the
  // controller's (still closed) port, so the run is seen from its first second.
  bool active = false;
  for (const double until = Now() + 30; !active && Now() < until; PollReadable({}, 0.1)) {
    active = HttpGet(prom_port_, "/api/v1/targets?state=active").find("\"lastScrape\":\"0001") ==
                 std::string::npos &&
             HttpGet(prom_port_, "/api/v1/targets?state=active")
                     .find("127.0.0.1:" + std::to_string(port)) != std::string::npos;
  }
  ASSERT_TRUE(active) << HttpGet(prom_port_, "/api/v1/targets");
  const std::string spec = WriteSpec(
      "prom-e2e", 2, 1, 320,
      std::string(e2e::kFastPolicy) + "chaos: [{kind: kill_rank, atStep: 120, rank: 1}]\n",
      ", memorySlots: 4", ", TINY_STEP_TIME: \"0.03\", TINY_SAVE_EVERY_STEP: \"1\"");
  SpawnOptions so;
  so.argv = {build_ + "/bin/bulwark",
             "run",
             spec,
             "--report",
             dir_ + "/report.json",
             "--run-dir",
             dir_ + "/run",
             "--store",
             dir_ + "/bulwark.db",
             "--metrics-addr",
             "127.0.0.1:" + std::to_string(port),
             "--metrics-sd-file",
             sd,
             "--metrics-linger",
             "20"};
  so.env = CurrentEnv();
  so.env["XDG_STATE_HOME"] = dir_ + "/state";
  so.new_process_group = true;
  auto run = Spawn(so);
  ASSERT_TRUE(run.ok()) << run.status().ToString();

  // While it runs: every endpoint's text passes `promtool check metrics`.
  std::set<std::string> checked;
  std::string top;  // `bulwark top --once` while the job trains
  std::string output;
  bool eof = false;
  const double deadline = Now() + 240;
  while (!eof && Now() < deadline) {
    PollReadable({run->output.get()}, 0.2);
    output += ReadAvailable(run->output.get(), &eof);
    std::string addr;
    if (top.find("step") == std::string::npos &&
        (std::ifstream(dir_ + "/run/controller.addr") >> addr)) {
      top = RunProcess({build_ + "/bin/bulwark", "top", "--controller", addr, "--once"}, {}, 30)
                .second;
    }
    std::ifstream f(sd);
    Json targets = Json::parse(f, nullptr, false);
    if (targets.is_discarded() || !targets.is_array()) continue;
    for (const Json& group : targets) {
      for (const Json& t : group["targets"]) {
        const std::string addr = t.get<std::string>();
        if (checked.count(addr)) continue;
        const std::string text = HttpGet(std::stoi(addr.substr(addr.rfind(':') + 1)), "/metrics");
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
  EXPECT_NE(top.find("prom-e2e  Running  step "), std::string::npos) << top;
  EXPECT_NE(top.find("/320 ("), std::string::npos) << "total steps from --steps: " << top;
  // Not a terminal: progress lines every --progress-interval (default 30 s) would not
  // show in a 10 s run; the run printed its metrics address instead.
  EXPECT_NE(output.find("[bulwark] metrics: http://127.0.0.1:"), std::string::npos);

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
  const double rate_ettr = Value(Query("sum(rate(bulwark_productive_seconds_total" + job +
                                       "[5m])) / "
                                       "(sum(rate(bulwark_productive_seconds_total" +
                                       job +
                                       "[5m])) + "
                                       "sum(rate(bulwark_lost_seconds_total" +
                                       job + "[5m])))"));
  // rate() extrapolates each counter to the window's edges on its own, so on a 15 s job
  // the ratio is not exact: 2.6% off was seen under ASan on a loaded machine. The exact
  // value is bulwark_ettr_ratio's (below).
  EXPECT_NEAR(rate_ettr, ettr, 0.05 * ettr)
      << "report ETTR " << ettr << "; samples (value, time) of wall and productive:\n"
      << Query("bulwark_wall_seconds_total" + job + "[5m]").dump() << "\n"
      << Query("bulwark_productive_seconds_total" + job + "[5m]").dump();
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

using ::bulwark::testing::TestVenv;

// `bulwark run` writes TensorBoard event files of an unchanged trainer; TensorBoard's
// own EventAccumulator reads its loss per step, the final ETTR and the incident text.
TEST_F(MonitoringE2E, TensorBoardReadsTheRunsEventFiles) {
  const std::string python = TestVenv() + "/bin/python";
  if (access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << python << " missing: run scripts/test-venv.sh (scripts/test.sh does)";
  }
  const std::string spec =
      WriteSpec("tb-e2e", 2, 1, 120,
                std::string(e2e::kFastPolicy) + "chaos: [{kind: kill_rank, atStep: 50, rank: 1}]\n",
                ", memorySlots: 4", ", TINY_SAVE_EVERY_STEP: \"1\"");
  auto [rc, out] =
      RunProcess({build_ + "/bin/bulwark", "run", spec, "--report", dir_ + "/report.json",
                  "--run-dir", dir_ + "/run", "--store", dir_ + "/bulwark.db"},
                 {{"XDG_STATE_HOME", dir_ + "/state"}}, 240);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tensorboard: tensorboard --logdir " + dir_ + "/run/tensorboard"),
            std::string::npos)
      << out;
  std::ifstream rf(dir_ + "/report.json");
  const Json report = Json::parse(rf, nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  const std::string script = dir_ + "/read.py";
  std::ofstream(script) << R"(
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
a = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
a.Reload()
loss = a.Scalars("train/loss")
ettr = a.Scalars("bulwark/ettr")
text = [t.tensor_proto.string_val[0].decode() for t in a.Tensors("bulwark/incidents")]
print(json.dumps({"tags": a.Tags()["scalars"], "loss_steps": sorted({e.step for e in loss}),
                  "loss_first": loss[0].value, "ettr_last": ettr[-1].value, "text": text}))
)";
  auto [prc, pout] = RunProcess({python, script, dir_ + "/run/tensorboard"}, {}, 120);
  ASSERT_EQ(prc, 0) << pout;
  const Json r = Json::parse(pout.substr(pout.find('{')), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << pout;
  const auto steps = r["loss_steps"].get<std::vector<long>>();
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 120);
  // Every step, the reworked ones once more at most -- except that the agent merges a
  // rank's step reports arriving faster than 200/s (a burst after a restart under ASan),
  // keeping the newest step's loss: a few steps may have no point of their own.
  EXPECT_LE(steps.size(), 120u);
  EXPECT_GE(steps.size(), 114u);
  EXPECT_FLOAT_EQ(r["loss_first"].get<float>(), 0.5f);  // tiny trainer: loss 1/(w=2)
  EXPECT_NEAR(r["ettr_last"].get<double>(), report["ettr"].get<double>(), 1e-4);
  ASSERT_EQ(r["text"].size(), 1u) << r.dump();
  EXPECT_NE(r["text"][0].get<std::string>().find("crash"), std::string::npos) << r.dump();
  EXPECT_NE(r["text"][0].get<std::string>().find("restart"), std::string::npos) << r.dump();
  ExpectNoLeftovers();
}

// Issue 15 item 8: faults found from the metrics. A rank slowed down (chaos slow_rank:
// its steps take 3 x the CPU), a rank whose data loader starves (slow_data) and a loss
// spike (loss_spike) are each found, named (rank, node, evidence) and decided on; with
// monitoring.lossSpikeRollback the spike rolls the job back like a NaN.
TEST_F(MonitoringE2E, StragglerStarvationAndLossSpikeAreFoundFromTheMetrics) {
  const std::string spec =
      WriteSpec("mf-e2e", 2, 2, 420,
                "chaos:\n"
                "  - {kind: slow_rank, atStep: 30, rank: 3, factor: 3}\n"
                "  - {kind: slow_data, atStep: 30, rank: 1, delaySeconds: 0.05}\n"
                "  - {kind: loss_spike, atStep: 150, rank: 0}\n",
                "", ", TINY_STEP_TIME: \"0.03\"");
  std::string out;
  const Json report = RunToReport(spec, &out);
  ASSERT_FALSE(report.is_discarded()) << out;
  auto find = [&](const std::string& kind) -> const Json* {
    for (const Json& o : report["observations"]) {
      if (o.value("kind", "") == kind) return &o;
    }
    return nullptr;
  };
  const Json* straggler = find("straggler");
  ASSERT_NE(straggler, nullptr) << report["observations"].dump(2);
  EXPECT_EQ((*straggler)["rank"], 3);
  EXPECT_EQ((*straggler)["node_id"], "node-1");
  EXPECT_LT((*straggler)["value"].get<double>(), 0.75);
  EXPECT_EQ((*straggler)["chaos"], "slow_rank");
  // Tested in place against node-0 (no standby): its links, compute and disks pass, so
  // the job goes on at the straggler's pace (docs/diagnosis.md).
  EXPECT_EQ((*straggler)["decision"]["action"], "test_in_place");
  EXPECT_EQ((*straggler)["diagnosis"]["verdict"], "healthy") << straggler->dump(2);
  const Json* starving = find("data_starvation");
  ASSERT_NE(starving, nullptr) << report["observations"].dump(2);
  EXPECT_EQ((*starving)["rank"], 1);
  EXPECT_EQ((*starving)["node_id"], "node-0");
  EXPECT_GT((*starving)["value"].get<double>(), 0.3);
  EXPECT_NE((*starving)["detail"].get<std::string>().find("waited for data"), std::string::npos);
  const Json* spike = find("loss_spike");
  ASSERT_NE(spike, nullptr) << report["observations"].dump(2);
  // The controller sends the injection when it sees step 150, through the agent; the rank
  // applies it to its first report after the datagram arrives: 151 when the two hops take
  // less than a step (30 ms), a step or two later under load (152 under ASan at -j2).
  EXPECT_GT((*spike)["step"].get<long>(), 150);
  EXPECT_LE((*spike)["step"].get<long>(), 170);
  EXPECT_NE((*spike)["detail"].get<std::string>().find("x the median"), std::string::npos);
  for (const Json* o : {straggler, starving, spike}) {
    EXPECT_EQ(report["restarts"], 0) << "observations restart nothing: " << o->dump();
  }
  // No other rank was named: rank 0 and 2 worked at the same pace.
  for (const Json& o : report["observations"]) {
    if (o["kind"] == "straggler") {
      EXPECT_EQ(o["rank"], 3) << o.dump();
    }
  }
  EXPECT_NE(out.find("found from the metrics (no restart)"), std::string::npos) << out;
  ExpectNoLeftovers();
}

TEST_F(MonitoringE2E, LossSpikeWithRollbackRollsBackLikeANan) {
  const std::string spec =
      WriteSpec("spike-e2e", 1, 2, 200,
                std::string(e2e::kFastPolicy) +
                    "monitoring: {lossSpikeRollback: true}\n"
                    "chaos: [{kind: loss_spike, atStep: 120, rank: 0, factor: 50}]\n");
  std::string out;
  const Json report = RunToReport(spec, &out);
  ASSERT_FALSE(report.is_discarded()) << out;
  const Json* inc = FirstIncident(report, "nan");
  ASSERT_NE(inc, nullptr) << report.dump(2);
  EXPECT_EQ((*inc)["subtype"], "loss_spike");
  EXPECT_EQ((*inc)["chaos"], "loss_spike");
  // Rolled back as a NaN is: with a standby ready, the steps run again there.
  EXPECT_EQ((*inc)["decision"]["action"], "replace_node");
  EXPECT_LE((*inc)["resumed_from_step"].get<long>(), 120);
  EXPECT_EQ(report["last_step"], 200);
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
