// End-to-end stop-diagnose of a slow link and of a full checkpoint disk (issue 17,
// docs/diagnosis.md): the real `bulwark` binary, real agents on the local backend, the
// tiny SDK trainer. Each test checks the report's diagnosis, its evidence and that the
// job finished on the standby.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "common/net.h"
#include "e2e_util.h"

namespace bulwark {
namespace {

using e2e::E2EBase;
using e2e::kFastPolicy;
using e2e::RunProcess;

class E2EDiag : public E2EBase {
 protected:
  // `bulwark run spec`; the exit code, the output and the report.
  std::tuple<int, std::string, Json> RunJob(const std::string& spec,
                                            std::map<std::string, std::string> env = {}) {
    env.insert({"XDG_STATE_HOME", dir_ + "/state"});
    auto [rc, out] =
        RunProcess({build_ + "/bin/bulwark", "run", spec, "--report", dir_ + "/report.json",
                    "--run-dir", dir_ + "/run", "--store", dir_ + "/bulwark.db"},
                   env, 240);
    EXPECT_NE(rc, -1) << "bulwark run did not finish; output:\n" << out;
    std::ifstream rf(dir_ + "/report.json");
    std::stringstream ss;
    ss << rf.rdbuf();
    Json report = ss.str().empty() ? Json() : Json::parse(ss.str(), nullptr, false);
    return {rc, out, report};
  }
  static const Json* Find(const Json& list, const std::string& kind) {
    for (const Json& x : list) {
      if (x.value("kind", "") == kind) return &x;
    }
    return nullptr;
  }
};

// Chaos slow_link on rank 1 (node-1): its link sends are throttled and its rank slowed.
// The straggler verdict tests node-1 in place against the warm standby; the link check
// names node-1 with its MiB/s, node-1 is quarantined and the job finishes on the standby.
TEST_F(E2EDiag, SlowLink) {
  const std::string spec =
      WriteSpec("slowlink", 2, 1, 700,
                std::string(kFastPolicy) + "chaos: [{kind: slow_link, atStep: 20, rank: 1}]\n", "",
                ", TINY_STEP_TIME: \"0.05\"");
  auto [rc, out, report] = RunJob(spec);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(report["last_step"], 700);
  const Json* straggler = Find(report["observations"], "straggler");
  ASSERT_NE(straggler, nullptr) << report.dump(2);
  EXPECT_EQ((*straggler)["rank"], 1);
  EXPECT_EQ((*straggler)["node_id"], "node-1");
  EXPECT_EQ((*straggler)["chaos"], "slow_link");
  EXPECT_EQ((*straggler)["decision"]["action"], "test_in_place") << straggler->dump(2);
  const Json& d = (*straggler)["diagnosis"];
  EXPECT_EQ(d["verdict"], "unhealthy") << d.dump(2);
  EXPECT_EQ(d["charged_s"], 0.0);  // the job ran meanwhile
  const Json& link = d["link"];
  ASSERT_EQ(link["run"], true) << d.dump(2);
  EXPECT_EQ(link["at_fault"], Json::array({"node-1"})) << link.dump(2);
  ASSERT_EQ(link["members"].size(), 2u);
  const std::string peer = link["members"][1];
  const std::string summary = link["summary"];
  EXPECT_NE(summary.find("link node-1->" + peer + " slow: "), std::string::npos) << summary;
  const std::string evidence = link["evidence"];
  EXPECT_NE(evidence.find(peer + "->node-1 "), std::string::npos) << evidence;
  EXPECT_NE(evidence.find(" MiB/s"), std::string::npos) << evidence;
  bool link_failed = false;
  for (const Json& c : d["checks"]) link_failed |= c["name"] == "link" && c["ok"] == false;
  EXPECT_TRUE(link_failed) << d.dump(2);
  // The job left node-1: a node loss (quarantined) the recovery policy replaced.
  const Json* lost = Find(report["incidents"], "node_lost");
  ASSERT_NE(lost, nullptr) << report.dump(2);
  EXPECT_EQ((*lost)["node_id"], "node-1");
  EXPECT_EQ((*lost)["action"], "replace_node");
  EXPECT_NE(out.find("NodeQuarantined: node-1 failed its diagnostics"), std::string::npos) << out;
  std::printf("slow link evidence: %s\n", evidence.c_str());
  ExpectNoLeftovers();
}

// node-1's agent runs in its own mount namespace where the checkpoint directory is a
// full 1 MiB tmpfs (its local disk is full). Its rank's first checkpoint write fails
// with ENOSPC (fatal log disk_full); node-1 is tested while the standby takes its slot,
// its disk check fails with "No space left on device", it is quarantined and the job
// finishes on the standby.
TEST_F(E2EDiag, FullDisk) {
  const std::string ckpt = dir_ + "/ckpt";
  std::filesystem::create_directories(ckpt);
  auto [probe_rc, probe] = RunProcess({"unshare", "-m", "--propagation", "private", "sh", "-c",
                                       "mount -t tmpfs -o size=64k tmpfs '" + ckpt + "'"},
                                      {}, 30);
  if (probe_rc != 0) {
    GTEST_SKIP() << "needs a private mount namespace and a tmpfs mount (root, unshare -m): "
                 << probe;
  }
  const std::string agent = build_ + "/bin/bulwark-agent";
  const std::string wrapper = dir_ + "/agent.sh";
  std::ofstream(wrapper)
      << "#!/bin/sh\n"
      << "# node-1's checkpoint disk is full: a private 1 MiB tmpfs, filled.\n"
      << "case \" $* \" in *\" --node node-1 \"*)\n"
      << "  exec unshare -m --propagation private sh -c 'mount -t tmpfs -o size=1m tmpfs \"" << ckpt
      << "\" && (dd if=/dev/zero of=\"" << ckpt
      << "/fill\" bs=64k 2>/dev/null; true) && exec \"$0\" \"$@\"' " << agent << " \"$@\";;\n"
      << "esac\n"
      << "exec " << agent << " \"$@\"\n";
  ::chmod(wrapper.c_str(), 0755);
  const std::string spec =
      WriteSpec("diskfull", 2, 1, 60, kFastPolicy, "", ", TINY_STEP_TIME: \"0.03\"");
  auto [rc, out, report] = RunJob(spec, {{"BULWARK_AGENT", wrapper}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(report["last_step"], 60);
  const Json* inc = Find(report["incidents"], "fatal_log");
  ASSERT_NE(inc, nullptr) << report.dump(2);
  EXPECT_EQ((*inc)["subtype"], "disk_full") << inc->dump(2);
  EXPECT_EQ((*inc)["node_id"], "node-1");
  EXPECT_EQ((*inc)["action"], "replace_node");
  const Json& d = (*inc)["diagnosis"];
  EXPECT_EQ(d["verdict"], "unhealthy") << d.dump(2);
  EXPECT_EQ(d["action"], "quarantined") << d.dump(2);
  const Json* disk = nullptr;
  for (const Json& c : d["checks"]) {
    if (c["name"] == "disk:" + ckpt) disk = &c;
  }
  ASSERT_NE(disk, nullptr) << d.dump(2);
  EXPECT_EQ((*disk)["ok"], false);
  EXPECT_NE((*disk)["evidence"].get<std::string>().find("No space left on device"),
            std::string::npos)
      << disk->dump();
  EXPECT_NE(out.find("NodeQuarantined: node-1 failed its diagnostics"), std::string::npos) << out;
  std::printf("full disk evidence: %s\n", (*disk)["evidence"].get<std::string>().c_str());
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
