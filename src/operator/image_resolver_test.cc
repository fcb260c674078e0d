// ImageResolver against a real registry (Debian's docker-registry on loopback) and a
// registry that accepts connections and never answers.
#include "operator/image_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/net.h"
#include "registry/testing/test_registry.h"

namespace bulwark::op {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The jobs `done` was called for, in order.
struct Done {
  std::mutex mu;
  std::vector<std::string> jobs;
  std::function<void(const std::string&)> Callback() {
    return [this](const std::string& job) {
      std::lock_guard<std::mutex> l(mu);
      jobs.push_back(job);
    };
  }
  // Polls until `n` calls were seen (at most 60 s).
  std::vector<std::string> WaitFor(size_t n) {
    const double deadline = SystemClock::Get()->NowMono() + 60;
    while (SystemClock::Get()->NowMono() < deadline) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (jobs.size() >= n) return jobs;
      }
      PollReadable({}, 0.01);
    }
    std::lock_guard<std::mutex> l(mu);
    return jobs;
  }
};

TEST(ImageResolverTest, ReadsOffTheCallersThreadMergesRequestsAndServesTheCacheAfter) {
  auto reg = registry::testing::TestRegistry::Start({});
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const fs::path dir = fs::temp_directory_path() / ("bw-resolver-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "README") << "x";
  registry::testing::ImageSpec spec;
  spec.entrypoint = {"python3"};
  spec.cmd = {"train.py"};
  auto pushed =
      registry::testing::PushImage({(*reg)->host(), "team/trainer", "", ""}, "v1", dir, spec);
  fs::remove_all(dir);
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  const std::string image = (*reg)->host() + "/team/trainer:v1";

  registry::Client client;
  Done done;
  ImageResolver r(&client, done.Callback());
  // Two jobs of one image: neither waits for the registry, one request serves both.
  EXPECT_FALSE(r.Lookup("ns/a", image, {}).has_value());
  EXPECT_FALSE(r.Lookup("ns/b", image, {}).has_value());
  std::vector<std::string> jobs = done.WaitFor(2);
  std::sort(jobs.begin(), jobs.end());
  EXPECT_EQ(jobs, (std::vector<std::string>{"ns/a", "ns/b"}));
  EXPECT_EQ(r.requests_started(), 1);
  for (const char* job : {"ns/a", "ns/b", "ns/c"}) {  // at once now, for any job
    auto got = r.Lookup(job, image, {});
    ASSERT_TRUE(got.has_value()) << job;
    ASSERT_TRUE(got->ok()) << got->status().ToString();
    EXPECT_EQ((*got)->cmd, spec.cmd);
  }
  EXPECT_EQ(r.requests_started(), 1);
  EXPECT_EQ(client.stats().requests, 2u);  // manifest + config, once
}

TEST(ImageResolverTest, ASilentRegistryDelaysOnlyItsJobsAndItsErrorIsHandedOutOnce) {
  auto listen = TcpListen("127.0.0.1", 0);  // accepts (backlog), never answers
  ASSERT_TRUE(listen.ok()) << listen.status().ToString();
  auto port = LocalPort(listen->get());
  ASSERT_TRUE(port.ok());
  registry::ClientOptions o;
  o.connect_timeout_s = 1;
  o.request_timeout_s = 1;
  registry::Client client(o);
  Done done;
  ImageResolver r(&client, done.Callback());
  const std::string image = "127.0.0.1:" + std::to_string(*port) + "/team/trainer:v1";
  EXPECT_FALSE(r.Lookup("ns/slow", image, {}).has_value());
  // A malformed reference needs no request: answered at once, whatever is in flight.
  auto bad = r.Lookup("ns/bad", "UPPER/case:tag", {});
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status().code(), Code::kInvalidArgument);
  EXPECT_EQ(done.WaitFor(1), std::vector<std::string>{"ns/slow"});
  auto err = r.Lookup("ns/slow", image, {});
  ASSERT_TRUE(err.has_value());
  ASSERT_FALSE(err->ok());
  EXPECT_THAT(err->status().message(), HasSubstr(image));
  // Handed out once: the next reconcile asks the registry again.
  EXPECT_FALSE(r.Lookup("ns/slow", image, {}).has_value());
  const double deadline = SystemClock::Get()->NowMono() + 60;
  while (r.requests_started() < 2 && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({}, 0.01);
  }
  EXPECT_EQ(r.requests_started(), 2);
}

}  // namespace
}  // namespace bulwark::op
