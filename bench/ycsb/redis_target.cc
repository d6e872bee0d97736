// The Redis baseline: hiredis, synchronous GET and SET (binary-safe %b
// arguments), one redisContext per benchmark thread; with
// --redis_wait_replicas=N each SET is followed by WAIT N (a synchronously
// replicated write). A read-modify-write is an optimistic transaction:
// WATCH and GET, then MULTI, SET, EXEC. With rkv-ycsb --batch, the
// commands of a batch are pipelined.
#include <hiredis.h>

#include <string>
#include <sys/time.h>

#include "bench/ycsb/kv_target.h"

namespace rkv::bench {
namespace {

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// The context's I/O error. After one, hiredis refuses further commands on
// the context, so every later call fails too and is counted.
Status ContextError(const char* call, const redisContext* c) {
  return Unavailable(std::string(call) + ": " + (c->errstr[0] != '\0' ? c->errstr : "I/O error"));
}

Status UnexpectedReply(const char* call, const redisReply* r) {
  if (r->type == REDIS_REPLY_ERROR) {
    return Internal(std::string(call) + ": server error: " + std::string(r->str, r->len));
  }
  return Internal(std::string(call) + ": unexpected reply type " + std::to_string(r->type));
}

class RedisTarget final : public KvTarget {
 public:
  RedisTarget(ContextPtr context, int wait_replicas, int timeout_ms)
      : c_(std::move(context)), wait_replicas_(wait_replicas), timeout_ms_(timeout_ms) {}

  Status Put(std::string_view key, std::string_view value) override {
    ReplyPtr reply(static_cast<redisReply*>(
        redisCommand(c_.get(), "SET %b %b", key.data(), key.size(), value.data(), value.size())));
    if (reply == nullptr) return ContextError("SET", c_.get());
    if (!IsStatus(reply.get(), "OK")) return UnexpectedReply("SET", reply.get());
    return WaitReplicas();
  }

  StatusOr<size_t> Get(std::string_view key) override {
    ReplyPtr reply(
        static_cast<redisReply*>(redisCommand(c_.get(), "GET %b", key.data(), key.size())));
    if (reply == nullptr) return ContextError("GET", c_.get());
    if (reply->type == REDIS_REPLY_NIL) return NotFound("GET: key not found");
    if (reply->type != REDIS_REPLY_STRING) return UnexpectedReply("GET", reply.get());
    return static_cast<size_t>(reply->len);
  }

  // WATCH and GET, pipelined (one round trip); then MULTI, SET and EXEC,
  // pipelined likewise. EXEC answers nil when another client wrote the key
  // after the WATCH (a conflict: the SET was not applied). A successful
  // EXEC is followed by WAIT with --redis_wait_replicas, as Put's SET.
  ReadModifyWriteResult ReadModifyWrite(std::string_view key, std::string_view value) override {
    return RetryConflicts(key, [&]() -> ReadModifyWriteTry {
      ReadModifyWriteTry t;
      t.read = WatchAndGet(key);
      if (!t.read.ok()) return t;
      redisAppendCommand(c_.get(), "MULTI");
      redisAppendCommand(c_.get(), "SET %b %b", key.data(), key.size(), value.data(), value.size());
      redisAppendCommand(c_.get(), "EXEC");
      ReplyPtr multi;
      ReplyPtr queued;
      ReplyPtr exec;
      if (Status s = ReadReply("MULTI", &multi); !s.ok()) {
        t.write = std::move(s);
        return t;
      }
      if (Status s = ReadReply("SET", &queued); !s.ok()) {
        t.write = std::move(s);
        return t;
      }
      if (Status s = ReadReply("EXEC", &exec); !s.ok()) {
        t.write = std::move(s);
        return t;
      }
      // A refused MULTI or SET makes EXEC fail (EXECABORT): report the
      // first refusal.
      if (!IsStatus(multi.get(), "OK")) {
        t.write = UnexpectedReply("MULTI", multi.get());
      } else if (!IsStatus(queued.get(), "QUEUED")) {
        t.write = UnexpectedReply("SET in MULTI", queued.get());
      } else if (exec->type == REDIS_REPLY_NIL) {
        t.conflict = true;
        t.write = FailedPrecondition("EXEC: the watched key changed since the GET");
      } else if (exec->type != REDIS_REPLY_ARRAY || exec->elements != 1) {
        t.write = UnexpectedReply("EXEC", exec.get());
      } else if (!IsStatus(exec->element[0], "OK")) {
        t.write = UnexpectedReply("SET in EXEC", exec->element[0]);
      } else {
        t.write = WaitReplicas();
      }
      return t;
    });
  }

  // Pipelining: every command of the batch is written before the first
  // reply is read (one round trip), as a Redis client batches; with
  // --redis_wait_replicas one WAIT after the SETs covers them all.
  bool SupportsBatch() const override { return true; }

  std::vector<StatusOr<size_t>> MultiGet(std::span<const std::string> keys) override {
    std::vector<StatusOr<size_t>> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) redisAppendCommand(c_.get(), "GET %b", key.data(), key.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(c_.get(), &raw) != REDIS_OK || raw == nullptr) {
        out.emplace_back(ContextError("GET", c_.get()));
        continue;
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type == REDIS_REPLY_NIL) {
        out.emplace_back(NotFound("GET: key not found"));
      } else if (reply->type != REDIS_REPLY_STRING) {
        out.emplace_back(UnexpectedReply("GET", reply.get()));
      } else {
        out.emplace_back(static_cast<size_t>(reply->len));
      }
    }
    return out;
  }

  std::vector<Status> MultiPut(std::span<const std::string> keys, std::span<const std::string_view> values) override {
    std::vector<Status> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      redisAppendCommand(c_.get(), "SET %b %b", keys[i].data(), keys[i].size(), values[i].data(), values[i].size());
    }
    if (wait_replicas_ > 0) redisAppendCommand(c_.get(), "WAIT %d %d", wait_replicas_, timeout_ms_);
    for (size_t i = 0; i < keys.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(c_.get(), &raw) != REDIS_OK || raw == nullptr) {
        out.push_back(ContextError("SET", c_.get()));
        continue;
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type != REDIS_REPLY_STATUS || std::string_view(reply->str, reply->len) != "OK") {
        out.push_back(UnexpectedReply("SET", reply.get()));
      } else {
        out.push_back(Status::Ok());
      }
    }
    if (wait_replicas_ == 0) return out;
    void* raw = nullptr;
    Status waited;
    if (redisGetReply(c_.get(), &raw) != REDIS_OK || raw == nullptr) {
      waited = ContextError("WAIT", c_.get());
    } else {
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type != REDIS_REPLY_INTEGER) {
        waited = UnexpectedReply("WAIT", reply.get());
      } else if (reply->integer < wait_replicas_) {
        waited = DeadlineExceeded("WAIT: " + std::to_string(reply->integer) + " of " + std::to_string(wait_replicas_) +
                                  " replicas acknowledged the SETs within " + std::to_string(timeout_ms_) + " ms");
      }
    }
    // The SETs count only once the replicas acknowledged them.
    for (Status& s : out) {
      if (s.ok()) s = waited;
    }
    return out;
  }

 private:
  static bool IsStatus(const redisReply* r, std::string_view want) {
    return r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == want;
  }

  // The next reply of a pipeline into *reply.
  Status ReadReply(const char* call, ReplyPtr* reply) {
    void* raw = nullptr;
    if (redisGetReply(c_.get(), &raw) != REDIS_OK || raw == nullptr) return ContextError(call, c_.get());
    reply->reset(static_cast<redisReply*>(raw));
    return Status::Ok();
  }

  // With --redis_wait_replicas, a synchronously replicated write: the SET
  // just applied counts only once wait_replicas_ replicas acknowledged it.
  Status WaitReplicas() {
    if (wait_replicas_ == 0) return Status::Ok();
    ReplyPtr waited(static_cast<redisReply*>(redisCommand(c_.get(), "WAIT %d %d", wait_replicas_, timeout_ms_)));
    if (waited == nullptr) return ContextError("WAIT", c_.get());
    if (waited->type != REDIS_REPLY_INTEGER) return UnexpectedReply("WAIT", waited.get());
    if (waited->integer < wait_replicas_) {
      return DeadlineExceeded("WAIT: " + std::to_string(waited->integer) + " of " + std::to_string(wait_replicas_) +
                              " replicas acknowledged the SET within " + std::to_string(timeout_ms_) + " ms");
    }
    return Status::Ok();
  }

  // WATCH key and GET key in one round trip: the value's length. When the
  // GET fails, UNWATCH, so that no watch outlives this read-modify-write.
  StatusOr<size_t> WatchAndGet(std::string_view key) {
    redisAppendCommand(c_.get(), "WATCH %b", key.data(), key.size());
    redisAppendCommand(c_.get(), "GET %b", key.data(), key.size());
    ReplyPtr watched;
    ReplyPtr got;
    if (Status s = ReadReply("WATCH", &watched); !s.ok()) return s;
    if (Status s = ReadReply("GET", &got); !s.ok()) return s;
    Status failed;
    if (!IsStatus(watched.get(), "OK")) {
      failed = UnexpectedReply("WATCH", watched.get());
    } else if (got->type == REDIS_REPLY_NIL) {
      failed = NotFound("GET: key not found");
    } else if (got->type != REDIS_REPLY_STRING) {
      failed = UnexpectedReply("GET", got.get());
    } else {
      return static_cast<size_t>(got->len);
    }
    ReplyPtr unwatched(static_cast<redisReply*>(redisCommand(c_.get(), "UNWATCH")));
    if (unwatched == nullptr) return ContextError("UNWATCH", c_.get());
    return failed;
  }

  ContextPtr c_;
  const int wait_replicas_;
  const int timeout_ms_;
};

}  // namespace

StatusOr<std::unique_ptr<KvTarget>> OpenRedisTarget(const TargetOptions& options) {
  std::string host;
  int port = 0;
  if (Status s = SplitHostPort(options.server, &host, &port); !s.ok()) return s;
  timeval timeout{};
  timeout.tv_sec = options.timeout_ms / 1000;
  timeout.tv_usec = (options.timeout_ms % 1000) * 1000;
  ContextPtr context(redisConnectWithTimeout(host.c_str(), port, timeout));
  if (context == nullptr) return ResourceExhausted("redis connect: cannot allocate a context");
  if (context->err != 0) return Unavailable("redis connect to " + options.server + ": " + context->errstr);
  // Later commands wait at most the same time for a reply.
  if (redisSetTimeout(context.get(), timeout) != REDIS_OK) {
    return Internal("redis connect to " + options.server + ": setting the timeout failed");
  }
  // A PING proves the server answers before the timed phase starts.
  ReplyPtr pong(static_cast<redisReply*>(redisCommand(context.get(), "PING")));
  if (pong == nullptr) return ContextError("PING", context.get());
  if (pong->type != REDIS_REPLY_STATUS) return UnexpectedReply("PING", pong.get());
  return std::unique_ptr<KvTarget>(std::make_unique<RedisTarget>(std::move(context), options.redis_wait_replicas, options.timeout_ms));
}

}  // namespace rkv::bench
