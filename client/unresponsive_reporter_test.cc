// UnresponsiveReporter: reports go out on its own thread, at most one per
// server per interval, with what the coordinator accepts as a reason.
#include "client/unresponsive_reporter.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "proto/validation.h"

namespace rkv::client {
namespace {

// Collects what the reporter sends; refuses with `answer`.
class Collector {
 public:
  UnresponsiveReporter::SendFn Fn() {
    return [this](const v1::ReportUnresponsiveRequest& r, Deadline) {
      MutexLock lock(mu_);
      sent_.push_back(r);
      return answer_;
    };
  }
  std::vector<v1::ReportUnresponsiveRequest> Sent() {
    MutexLock lock(mu_);
    return sent_;
  }
  void set_answer(Status s) {
    MutexLock lock(mu_);
    answer_ = std::move(s);
  }

 private:
  Mutex mu_;
  std::vector<v1::ReportUnresponsiveRequest> sent_ GUARDED_BY(mu_);
  Status answer_ GUARDED_BY(mu_);
};

// Waits (generously) until `n` reports have been answered.
void WaitForAnswers(const UnresponsiveReporter& r, uint64_t n) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (r.stats().sent + r.stats().failed < n && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(UnresponsiveReporterTest, OneReportPerServerPerIntervalWithAValidRequest) {
  Collector collector;
  UnresponsiveReporter reporter(collector.Fn());
  EXPECT_TRUE(reporter.Report("s1", 7, "no answer for 300 ms"));
  // The same server again at once: dropped, whatever the epoch or reason.
  EXPECT_FALSE(reporter.Report("s1", 7, "no answer for 350 ms"));
  EXPECT_FALSE(reporter.Report("s1", 8, "other"));
  // Another server is its own.
  EXPECT_TRUE(reporter.Report("s2", 3, std::string("bad\x01" "byte") + std::string(300, 'x')));
  WaitForAnswers(reporter, 2);
  const auto sent = collector.Sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].server_id(), "s1");
  EXPECT_EQ(sent[0].epoch(), 7u);
  EXPECT_EQ(sent[0].reason(), "no answer for 300 ms");
  // The reason is cut and cleaned to what the coordinator accepts.
  EXPECT_EQ(sent[1].server_id(), "s2");
  EXPECT_EQ(sent[1].reason().size(), 200u);
  EXPECT_EQ(sent[1].reason().substr(0, 8), "bad?byte");
  for (const auto& r : sent) EXPECT_TRUE(control::ValidateReportUnresponsive(r).ok());
  const UnresponsiveReporter::Stats stats = reporter.stats();
  EXPECT_EQ(stats.queued, 2u);
  EXPECT_EQ(stats.sent, 2u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST(UnresponsiveReporterTest, AReportComesAgainAfterTheIntervalAndFailuresAreCounted) {
  Collector collector;
  collector.set_answer(Unavailable("no coordinator"));
  UnresponsiveReporter reporter(collector.Fn());
  ASSERT_TRUE(reporter.Report("s1", 1, "first"));
  WaitForAnswers(reporter, 1);
  EXPECT_EQ(reporter.stats().failed, 1u);
  std::this_thread::sleep_for(UnresponsiveReporter::kMinInterval + std::chrono::milliseconds(10));
  collector.set_answer(Status::Ok());
  EXPECT_TRUE(reporter.Report("s1", 1, "second"));
  WaitForAnswers(reporter, 2);
  EXPECT_EQ(reporter.stats().sent, 1u);
  EXPECT_EQ(collector.Sent().size(), 2u);
}

TEST(UnresponsiveReporterTest, AFullQueueDropsReportsAndNothingWaitsOnTheSender) {
  Mutex gate;
  bool open = false;
  CondVar opened;
  int calls = 0;
  UnresponsiveReporter reporter([&](const v1::ReportUnresponsiveRequest&, Deadline) {
    MutexLock lock(gate);
    ++calls;
    while (!open) opened.Wait(gate);
    return Status::Ok();
  });
  // The first report is taken by the thread and held; the queue fills.
  size_t queued = 0;
  for (size_t i = 0; i < UnresponsiveReporter::kMaxQueued + 10; ++i) {
    queued += reporter.Report("s" + std::to_string(i), 1, "x") ? 1 : 0;
  }
  EXPECT_GE(queued, UnresponsiveReporter::kMaxQueued);
  EXPECT_LE(queued, UnresponsiveReporter::kMaxQueued + 1);
  {
    MutexLock lock(gate);
    open = true;
  }
  opened.NotifyAll();
  WaitForAnswers(reporter, queued);
  EXPECT_EQ(reporter.stats().sent, queued);
}

}  // namespace
}  // namespace rkv::client
