#include "common/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace rkv {
namespace {

class Counter {
 public:
  void Add() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    AddLocked();
  }
  int Get() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return n_;
  }
  void WaitFor(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&] {
      mu_.AssertHeld();
      return n_ >= n;
    });
  }
  bool WaitForUntil(int n, std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return cv_.WaitUntil(mu_, deadline, [&] {
      mu_.AssertHeld();
      return n_ >= n;
    });
  }

 private:
  void AddLocked() REQUIRES(mu_) {
    ++n_;
    cv_.NotifyAll();
  }
  Mutex mu_;
  CondVar cv_;
  int n_ GUARDED_BY(mu_) = 0;
};

TEST(MutexTest, ExcludesConcurrentWriters) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Add();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Get(), 40000);
}

TEST(MutexTest, CondVarWakesAWaiterAndHoldsTheLockAgain) {
  Counter c;
  std::thread waiter([&] { c.WaitFor(3); });
  for (int i = 0; i < 3; ++i) c.Add();
  waiter.join();
  EXPECT_EQ(c.Get(), 3);
}

TEST(MutexTest, WaitUntilReturnsThePredicateAtTheDeadline) {
  Counter c;
  EXPECT_FALSE(c.WaitForUntil(1, std::chrono::steady_clock::now() + std::chrono::milliseconds(1)));
  c.Add();
  EXPECT_TRUE(c.WaitForUntil(1, std::chrono::steady_clock::now()));
}

TEST(MutexTest, SharedMutexAdmitsReadersTogether) {
  SharedMutex mu;
  ReaderLock a(mu);
  // A second reader gets in while the first holds the lock.
  std::thread second([&] { ReaderLock b(mu); });
  second.join();
}

}  // namespace
}  // namespace rkv
