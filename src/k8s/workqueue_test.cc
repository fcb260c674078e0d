#include "k8s/workqueue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/clock.h"

namespace bulwark::k8s {
namespace {

TEST(WorkQueueTest, DeduplicatesAndKeepsEarlierReadyTime) {
  FakeClock clock(0);
  WorkQueue q;
  q.Add("ns/a", clock.NowMono());
  q.Add("ns/a", clock.NowMono());
  EXPECT_EQ(q.Len(), 1u);
  q.AddAfter("ns/b", 10, clock.NowMono());
  q.AddAfter("ns/b", 5, clock.NowMono());
  q.AddAfter("ns/b", 20, clock.NowMono());
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.Pop(clock.NowMono()), "ns/a");
  EXPECT_EQ(q.Pop(clock.NowMono()), std::nullopt);  // b is not ready before t=5
  ASSERT_TRUE(q.NextReady().has_value());
  EXPECT_DOUBLE_EQ(*q.NextReady(), 5);
  clock.Advance(4.999);
  EXPECT_EQ(q.Pop(clock.NowMono()), std::nullopt);
  clock.Advance(0.001);
  EXPECT_EQ(q.Pop(clock.NowMono()), "ns/b");
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.NextReady(), std::nullopt);
}

TEST(WorkQueueTest, PopsEarliestThenSmallestKey) {
  WorkQueue q;
  q.AddAfter("c", 1, 0);
  q.Add("b", 0);
  q.Add("a", 0);
  EXPECT_EQ(q.Pop(2), "a");
  EXPECT_EQ(q.Pop(2), "b");
  EXPECT_EQ(q.Pop(2), "c");
  EXPECT_EQ(q.Pop(2), std::nullopt);
}

TEST(WorkQueueTest, KeyAddedWhileProcessingWaitsForDone) {
  WorkQueue q;
  q.Add("k", 0);
  ASSERT_EQ(q.Pop(0), "k");
  q.Add("k", 1);
  q.Add("k", 0.5);  // dirty keeps the earlier time
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Pop(10), std::nullopt);  // never handed out twice concurrently
  q.Done("k", 2);
  EXPECT_EQ(q.Len(), 1u);
  ASSERT_TRUE(q.NextReady().has_value());
  EXPECT_DOUBLE_EQ(*q.NextReady(), 0.5);
  EXPECT_EQ(q.Pop(2), "k");
  q.Done("k", 2);
  EXPECT_EQ(q.Len(), 0u);
  q.Done("unknown", 2);  // harmless
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, RateLimitedDelaysDoubleUntilCappedAndForgetResets) {
  FakeClock clock(100);
  WorkQueue q({.base_delay_s = 0.05, .max_delay_s = 1});
  const double expected[] = {0.05, 0.1, 0.2, 0.4, 0.8, 1, 1};
  for (double want : expected) {
    const double now = clock.NowMono();
    EXPECT_DOUBLE_EQ(q.AddRateLimited("k", now), want);
    EXPECT_EQ(q.Pop(now + want - 1e-9), std::nullopt);
    EXPECT_EQ(q.Pop(now + want), "k");
    q.Done("k", now + want);
    clock.Set(now + want);
  }
  EXPECT_EQ(q.Failures("k"), 7);
  EXPECT_EQ(q.Failures("other"), 0);
  q.Forget("k");
  EXPECT_EQ(q.Failures("k"), 0);
  EXPECT_DOUBLE_EQ(q.AddRateLimited("k", clock.NowMono()), 0.05);
}

TEST(WorkQueueTest, HugeFailureCountsStayCapped) {
  WorkQueue q({.base_delay_s = 1, .max_delay_s = 300});
  double d = 0;
  for (int i = 0; i < 3000; ++i) d = q.AddRateLimited("k", 0);
  EXPECT_DOUBLE_EQ(d, 300);
}

TEST(WorkQueueTest, WaitWakesOnAddAndIsBounded) {
  WorkQueue q;
  EXPECT_FALSE(q.Wait(0.05));  // nothing happens: it ends at its bound
  EXPECT_FALSE(q.Wait(0));
  EXPECT_FALSE(q.Wait(-1));

  std::atomic<bool> woke{false};
  std::thread adder([&] {
    while (!woke.load()) {
      q.Add("x", 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_TRUE(q.Wait(3600));  // an Add ends it (a lost wake-up would hang: ctest's timeout)
  woke.store(true);
  adder.join();
  EXPECT_EQ(q.Pop(0), "x");
}

TEST(WorkQueueTest, ShutDownStopsPopsAndWaits) {
  WorkQueue q;
  q.Add("a", 0);
  q.ShutDown();
  EXPECT_TRUE(q.shut_down());
  EXPECT_EQ(q.Pop(1), std::nullopt);
  EXPECT_TRUE(q.Wait(3600));  // returns at once after shutdown
  q.Add("b", 0);              // ignored after shutdown
  EXPECT_EQ(q.Len(), 1u);
}

}  // namespace
}  // namespace bulwark::k8s
