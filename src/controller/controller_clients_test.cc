// The controller's client port (docs/protocol.md: one request per connection).
#include <gtest/gtest.h>

#include "controller/controller_fixture.h"

namespace bulwark {
namespace {

const char* kClientsSpec = R"(
name: clients
nodes: 2
procsPerNode: 2
command: ["/usr/bin/python3", "train.py"]
faultPolicy: {heartbeat: {intervalSeconds: 1000, misses: 3}}
)";

using ControllerClientsTest = testing::ControllerFixture;

// Found by fuzz_controller_wire: a connection that sent three lines got three replies.
TEST_F(ControllerClientsTest, AConnectionGetsOneReplyHoweverManyRequestsItSends) {
  Begin(kClientsSpec);
  Expect(0, "start");
  const std::string addr = ctl_->Address();
  auto fd = TcpConnect("127.0.0.1", std::stoi(addr.substr(addr.rfind(':') + 1)), 5);
  ASSERT_TRUE(fd.ok());
  JsonLineConn client(std::move(*fd));
  for (const char* type : {"status_request", "no_such_request", "status_request"}) {
    ASSERT_TRUE(client.Send({{"type", type}}).ok());
  }
  ASSERT_TRUE(client.Flush(1).ok());
  std::vector<Json> replies;
  for (int i = 0; i < 200; ++i) {
    ctl_->RunOnce();
    for (const Json& m : client.Read()) replies.push_back(m);
  }
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0]["type"], "reply");
  EXPECT_EQ(replies[0]["ok"], true);
  // A second connection is answered as the first was.
  auto fd2 = TcpConnect("127.0.0.1", std::stoi(addr.substr(addr.rfind(':') + 1)), 5);
  ASSERT_TRUE(fd2.ok());
  JsonLineConn second(std::move(*fd2));
  ASSERT_TRUE(second.Send({{"type", "no_such_request"}}).ok());
  ASSERT_TRUE(second.Flush(1).ok());
  Json answer;
  for (int i = 0; i < 200 && answer.is_null(); ++i) {
    ctl_->RunOnce();
    for (const Json& m : second.Read()) answer = m;
  }
  EXPECT_EQ(answer["ok"], false);
  EXPECT_EQ(answer["message"], "unknown request type 'no_such_request'");
}

}  // namespace
}  // namespace bulwark
