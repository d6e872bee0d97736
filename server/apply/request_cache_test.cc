#include "server/apply/request_cache.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace rkv::server {
namespace {

using Verdict = RequestCache::Verdict;

protocol::ReplyMsg Reply(uint64_t request_id, uint64_t version, int32_t code = 0, const char* message = "") {
  protocol::ReplyMsg r{};
  r.request_id = request_id;
  r.status_code = code;
  r.credits = 1;
  r.version = version;
  std::strncpy(r.message, message, sizeof(r.message) - 1);
  return r;
}

TEST(RequestCacheTest, AnsweredRequestsReplayTheirReply) {
  RequestCache cache({.max_clients = 4, .requests_per_client = 4});
  protocol::ReplyMsg got{};
  EXPECT_EQ(cache.Check(7, 1, false, &got), Verdict::kNew);
  cache.Insert(7, Reply(1, 10));
  cache.Insert(7, Reply(2, 0, 5, "key not found"));
  ASSERT_EQ(cache.Check(7, 1, false, &got), Verdict::kReplay);
  EXPECT_EQ(got.request_id, 1u);
  EXPECT_EQ(got.version, 10u);
  ASSERT_EQ(cache.Check(7, 2, false, &got), Verdict::kReplay);
  EXPECT_EQ(got.status_code, 5);
  EXPECT_STREQ(got.message, "key not found");
  EXPECT_EQ(cache.Check(7, 3, false, &got), Verdict::kNew);
  // Request ids belong to their client.
  EXPECT_EQ(cache.Check(8, 1, false, &got), Verdict::kNew);
  EXPECT_EQ(cache.clients(), 1u);
  EXPECT_EQ(cache.replies(), 2u);
}

TEST(RequestCacheTest, OutOfOrderIdsAreFoundAndGapsAreNew) {
  RequestCache cache({.max_clients = 4, .requests_per_client = 8});
  protocol::ReplyMsg got{};
  cache.Insert(1, Reply(5, 50));
  cache.Insert(1, Reply(3, 30));  // another connection's request arrived later
  EXPECT_EQ(cache.Check(1, 3, false, &got), Verdict::kReplay);
  EXPECT_EQ(got.version, 30u);
  EXPECT_EQ(cache.Check(1, 4, false, &got), Verdict::kNew);  // below the newest, never seen
}

TEST(RequestCacheTest, APerClientBoundForgetsTheOldestAndRefusesItsRetry) {
  RequestCache cache({.max_clients = 4, .requests_per_client = 3});
  protocol::ReplyMsg got{};
  for (uint64_t id = 1; id <= 5; ++id) cache.Insert(1, Reply(id, id * 10));
  EXPECT_EQ(cache.replies(), 3u);
  // 1 and 2 were forgotten: resent, they might be retries, so not new.
  EXPECT_EQ(cache.Check(1, 1, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(1, 2, /*resent=*/true, &got), Verdict::kForgotten);
  for (uint64_t id = 3; id <= 5; ++id) {
    ASSERT_EQ(cache.Check(1, id, false, &got), Verdict::kReplay) << id;
    EXPECT_EQ(got.version, id * 10);
  }
  EXPECT_EQ(cache.Check(1, 6, false, &got), Verdict::kNew);
}

// A client's first attempt overtaken by more newer requests than the bound
// (one of its calls slow on one connection while its others run on more):
// it never reached the server, so it is new, not refused as forgotten;
// once sent and then resent, the same id could have been applied.
TEST(RequestCacheTest, AFirstAttemptOvertakenByMoreThanTheBoundIsNew) {
  RequestCache cache({.max_clients = 4, .requests_per_client = 3});
  protocol::ReplyMsg got{};
  for (uint64_t id = 2; id <= 10; ++id) cache.Insert(1, Reply(id, id * 10));
  EXPECT_EQ(cache.Check(1, 1, /*resent=*/false, &got), Verdict::kNew);
  EXPECT_EQ(cache.Check(1, 1, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(1, 4, /*resent=*/false, &got), Verdict::kNew) << "4 was answered: a client never sends it "
                                                                          "again unmarked, so the cache may take it";
}

TEST(RequestCacheTest, TheLeastRecentlyActiveClientIsForgottenFirst) {
  RequestCache cache({.max_clients = 2, .requests_per_client = 4});
  protocol::ReplyMsg got{};
  cache.Insert(1, Reply(1, 10));
  cache.Insert(2, Reply(1, 20));
  // Client 1 is active again (a lookup counts), so client 2 is the least
  // recently active when client 3 arrives.
  EXPECT_EQ(cache.Check(1, 1, false, &got), Verdict::kReplay);
  cache.Insert(3, Reply(1, 30));
  EXPECT_EQ(cache.clients(), 2u);
  EXPECT_EQ(cache.replies(), 2u);
  EXPECT_EQ(cache.Check(2, 1, false, &got), Verdict::kNew);
  ASSERT_EQ(cache.Check(1, 1, false, &got), Verdict::kReplay);
  EXPECT_EQ(got.version, 10u);
  ASSERT_EQ(cache.Check(3, 1, false, &got), Verdict::kReplay);
  EXPECT_EQ(got.version, 30u);
}

TEST(RequestCacheTest, MemoryStaysWithinTheBound) {
  const RequestCacheLimits limits{.max_clients = 16, .requests_per_client = 100};
  RequestCache cache(limits);
  for (uint64_t client = 1; client <= 40; ++client) {
    for (uint64_t id = 1; id <= 250; ++id) cache.Insert(client, Reply(id, id));
  }
  EXPECT_EQ(cache.clients(), 16u);
  EXPECT_EQ(cache.replies(), 16u * 100u);
  EXPECT_LE(cache.replies() * RequestCache::kBytesPerReply, RequestCache::MaxMemoryBytes(limits));
  // The defaults, as documented: 1024 clients x 256 replies x 136 bytes
  // (a 128-byte reply and its request id).
  EXPECT_EQ(RequestCache::MaxMemoryBytes(RequestCacheLimits{}), size_t{34} << 20);
}

// A burst of fresh client ids (another client opening 1,100 clients) cannot
// evict a client with a connection open: its retry still gets its reply.
TEST(RequestCacheTest, AConnectedClientIsNeverForgottenByABurstOfOthers) {
  RequestCache cache({.max_clients = 4, .requests_per_client = 4});
  protocol::ReplyMsg got{};
  cache.Pin(7);
  cache.Insert(7, Reply(1, 10));
  for (uint64_t other = 100; other < 1200; ++other) cache.Insert(other, Reply(1, 1));
  ASSERT_EQ(cache.Check(7, 1, /*resent=*/true, &got), Verdict::kReplay);
  EXPECT_EQ(got.version, 10u);
  EXPECT_EQ(cache.clients(), 5u);  // 4 without a connection + the pinned one
  // Closed: it counts against the bound again, and is the least recently
  // active once the burst goes on.
  cache.Unpin(7);
  EXPECT_EQ(cache.clients(), 4u);
  for (uint64_t other = 2000; other < 2004; ++other) cache.Insert(other, Reply(1, 1));
  EXPECT_EQ(cache.Check(7, 1, /*resent=*/false, &got), Verdict::kNew);
  EXPECT_GT(cache.evictions(), 0u);
}

// Two connections of one client: it stays pinned until the last closes.
TEST(RequestCacheTest, AClientStaysPinnedUntilItsLastConnectionCloses) {
  RequestCache cache({.max_clients = 1, .requests_per_client = 4});
  protocol::ReplyMsg got{};
  cache.Pin(7);
  cache.Pin(7);
  cache.Insert(7, Reply(1, 10));
  cache.Unpin(7);
  cache.Insert(8, Reply(1, 1));
  cache.Insert(9, Reply(1, 1));
  EXPECT_EQ(cache.Check(7, 1, false, &got), Verdict::kReplay);
  cache.Unpin(7);
  cache.Unpin(7);  // unmatched: ignored
  cache.Insert(10, Reply(1, 1));
  EXPECT_EQ(cache.clients(), 1u);
}

// The client forgotten, its retry arrives (on a new connection): not
// applied a second time, whether or not its entry came back first.
TEST(RequestCacheTest, AForgottenClientsResentRequestIsRefusedNeverNew) {
  RequestCache cache({.max_clients = 2, .requests_per_client = 4});
  protocol::ReplyMsg got{};
  cache.Insert(7, Reply(5, 50));
  cache.Insert(8, Reply(1, 1));
  cache.Insert(9, Reply(1, 1));  // forgets 7
  ASSERT_EQ(cache.evictions(), 1u);
  EXPECT_EQ(cache.Check(7, 5, /*resent=*/true, &got), Verdict::kForgotten);
  // A request it never sent before is new.
  EXPECT_EQ(cache.Check(7, 6, /*resent=*/false, &got), Verdict::kNew);
  // A late first attempt of an older id brings the entry back (reborn);
  // the resend of 5, above everything the new entry holds, is still
  // refused, while the new entry's own replies replay.
  cache.Insert(7, Reply(3, 30));
  EXPECT_EQ(cache.Check(7, 5, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(7, 3, /*resent=*/true, &got), Verdict::kReplay);
  EXPECT_EQ(cache.Check(7, 9, /*resent=*/false, &got), Verdict::kNew);
  // A client that was never forgotten: a resend whose first attempt never
  // arrived is new. (8 was forgotten when 7 came back.)
  EXPECT_EQ(cache.Check(9, 2, /*resent=*/true, &got), Verdict::kNew);
  EXPECT_EQ(cache.Check(8, 2, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(42, 1, /*resent=*/true, &got), Verdict::kNew);
}

// Once the list of forgotten ids dropped one, every client may have been
// forgotten: unknown resends are refused, fresh requests still new.
TEST(RequestCacheTest, PastTheForgottenIdsBoundEveryUnknownResendIsRefused) {
  RequestCache cache({.max_clients = 1, .requests_per_client = 4, .max_evicted = 2});
  protocol::ReplyMsg got{};
  cache.Insert(1, Reply(1, 1));
  cache.Insert(2, Reply(1, 1));  // forgets 1
  cache.Insert(3, Reply(1, 1));  // forgets 2
  EXPECT_EQ(cache.Check(42, 1, /*resent=*/true, &got), Verdict::kNew);
  cache.Insert(4, Reply(1, 1));  // forgets 3; 1 leaves the list
  EXPECT_EQ(cache.Check(1, 1, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(42, 1, /*resent=*/true, &got), Verdict::kForgotten);
  EXPECT_EQ(cache.Check(42, 1, /*resent=*/false, &got), Verdict::kNew);
}

}  // namespace
}  // namespace rkv::server
