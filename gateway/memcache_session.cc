// Executes the memcached text protocol's requests on rkv::Client (see
// memcache_session.h for the contract, docs/design.md for the semantics).
#include "gateway/memcache_session.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/compare_and_set.h"
#include "gateway/memcache_item.h"
#include "gateway/memcache_parser.h"
#include "rkv/client.h"
#include "rkv/status.h"

#ifndef RKV_GATEWAY_VERSION
#define RKV_GATEWAY_VERSION "unknown"
#endif

// What `version` answers: first the memcached release whose text protocol
// this follows, then the gateway's own. Clients parse the first word as a
// memcached version (libmemcached refuses one whose major number is not a
// positive integer, Node.js's memcached throws on one that is not
// N.N.N) and pick features by it.
#define RKV_MEMCACHE_VERSION_LINE "1.6.18 rkv-gateway " RKV_GATEWAY_VERSION

namespace rkv::gateway {
namespace {

// The rkv key holding the newest flush_all's times (FlushTimes, as
// FormatFlushTimes writes them). Its NUL byte is a control character, which the parser
// refuses in a memcached key, so no memcached client can name it.
constexpr std::string_view kFlushKey("\0rkv-gateway:flush_all", 22);
// How long a gateway trusts the flush times it read.
constexpr int64_t kFlushRefreshMs = 1000;
// Compare-and-set loops (replace, append, incr, touch...) give up after
// this many conflicting writes in a row.
constexpr int kMaxCasAttempts = 1000;
// The reply of a compare-and-set loop that gave up.
constexpr std::string_view kTooManyWrites = "SERVER_ERROR too many concurrent writes of the key\r\n";
// Keys of one get read with one MultiGet; back-pressure is checked
// between batches.
constexpr size_t kGetBatch = 32;

void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) { counter.fetch_add(n, std::memory_order_relaxed); }

MemcacheShared& DefaultShared() {
  static MemcacheShared shared;
  return shared;
}
// The process-wide instance counts uptime from the process's start, not
// from its first connection.
[[maybe_unused]] const bool kDefaultSharedStarted = [] {
  DefaultShared().started_unix_s.store(static_cast<int64_t>(std::time(nullptr)), std::memory_order_relaxed);
  return true;
}();

// A failed rkv call as one reply line (no CR or LF from the message).
std::string BackendError(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) return "SERVER_ERROR out of memory storing object\r\n";
  std::string line = "SERVER_ERROR " + s.ToString();
  if (line.size() > 512) line.resize(512);
  for (char& c : line) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  line += "\r\n";
  return line;
}

void AppendU64(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

// What a read of a key found, as the memcached side sees it.
struct Found {
  std::string value;  // the rkv value (header + data)
  MemcacheItem item;  // views into `value`
  uint64_t version = 0;
  int64_t expires_at_unix_ms = kNoExpiry;
};

class MemcacheSession final : public Session {
 public:
  MemcacheSession(rkv::Client* client, const MemcacheOptions& options)
      : client_(client),
        options_(options),
        shared_(options.shared != nullptr ? *options.shared : DefaultShared()),
        counters_(shared_.counters) {
    // The data block must fit in an rkv value beside the item header.
    const size_t max_value = options.limits.max_value_bytes;
    limits_.max_data_bytes = max_value > kItemHeaderBytes ? max_value - kItemHeaderBytes : 0;
    limits_.max_key_bytes = std::min(kMemcachedMaxKeyBytes, options.limits.max_key_bytes);
    int64_t zero = 0;
    shared_.started_unix_s.compare_exchange_strong(zero, Client::NowUnixMs() / 1000, std::memory_order_relaxed);
    Add(counters_.total_connections);
    Add(counters_.curr_connections);
  }
  ~MemcacheSession() override { counters_.curr_connections.fetch_sub(1, std::memory_order_relaxed); }

  ServeResult Serve(std::string_view in, std::string* out, size_t out_limit) override;

 private:
  // Executes one parsed request; false when it is not finished (a get
  // stopped by back-pressure: the same request is served again).
  bool Execute(const MemcacheRequest& req, std::string* out, size_t out_limit);

  void Retrieve(const MemcacheRequest& req, std::string* out, size_t out_limit, bool* done);
  void Store(const MemcacheRequest& req, std::string* out);
  void Cas(const MemcacheRequest& req, std::string* out);
  void Delete(const MemcacheRequest& req, std::string* out);
  void Arithmetic(const MemcacheRequest& req, std::string* out);
  void Touch(const MemcacheRequest& req, std::string* out);
  void FlushAll(const MemcacheRequest& req, std::string* out);
  void Stats(const MemcacheRequest& req, std::string* out);

  // Reads `key` as an item visible now: nullopt when absent, expired, not
  // an item or flushed; the rkv error otherwise.
  StatusOr<std::optional<Found>> Read(std::string_view key);
  // An rkv value read with `version` as the memcached side sees it.
  std::optional<Found> Visible(std::string value, uint64_t version, int64_t expires_at_unix_ms);
  // Touches `key` (gat, touch): a new expiry, same item. nullopt: absent.
  StatusOr<std::optional<Found>> TouchKey(std::string_view key, int64_t exptime);
  // A compare-and-set loop on `key` as the memcached side sees it
  // (CompareAndSet, compare_and_set.h, at most kMaxCasAttempts attempts):
  // step(found, &next_value, &next_expiry) gets the item visible now in
  // `found` (std::optional<Found>&, which it may move from), nullopt when
  // the key is absent to memcached (absent, expired, flushed or not an
  // item). A write on such a key replaces whatever rkv holds there, under
  // the version read.
  template <typename Step>
  CasOutcome UpdateItem(std::string_view key, Step&& step);

  // The flush time in force now (0: none), refreshed from rkv at most
  // every kFlushRefreshMs.
  int64_t FlushTime(int64_t now_ms);
  void CacheFlushTimes(const FlushTimes& t);
  // When an item stored now is stamped: after the flush time in force, so
  // an item stored right after a flush_all (same millisecond) survives it.
  int64_t StampNow();

  void Reply(const MemcacheRequest& req, std::string* out, std::string_view line) {
    if (!req.noreply) out->append(line);
  }
  // Answers a compare-and-set loop that gave up (`gave_up_line`) or met a
  // backend error (counted); false when it ended either way but those.
  bool ReplyIfFailed(const MemcacheRequest& req, std::string* out, const CasOutcome& outcome,
                     std::string_view gave_up_line = kTooManyWrites) {
    if (outcome.gave_up) {
      Reply(req, out, gave_up_line);
      return true;
    }
    if (!outcome.status.ok()) {
      Add(counters_.backend_errors);
      Reply(req, out, BackendError(outcome.status));
      return true;
    }
    return false;
  }

  rkv::Client* client_;
  MemcacheOptions options_;
  MemcacheShared& shared_;
  MemcacheCounters& counters_;
  ParserLimits limits_;
  // Bytes of a too-large data block still to discard.
  uint64_t swallow_ = 0;
  // A get stopped by back-pressure: its line's size and the next key.
  size_t pending_get_bytes_ = 0;
  size_t pending_get_next_ = 0;
};

ServeResult MemcacheSession::Serve(std::string_view in, std::string* out, size_t out_limit) {
  ServeResult result;
  size_t pos = 0;
  while (true) {
    if (swallow_ > 0) {
      const uint64_t take = std::min<uint64_t>(swallow_, in.size() - pos);
      pos += take;
      swallow_ -= take;
      if (swallow_ > 0) break;
      continue;
    }
    if (out->size() >= out_limit || pos == in.size()) break;
    ParseResult r = ParseMemcacheRequest(in.substr(pos), limits_);
    if (r.kind == ParseKind::kIncomplete) break;
    if (r.kind == ParseKind::kClose) {
      result.close = true;
      break;
    }
    if (r.kind == ParseKind::kError) {
      out->append(r.reply);
      pos += r.consumed;
      continue;
    }
    if (r.kind == ParseKind::kTooLarge) {
      out->append(r.reply);
      // memcached removes the item a failed set would have replaced, so a
      // reader never sees the value the client meant to overwrite.
      if (r.request.command == MemcacheCommand::kSet) client_->Delete(r.request.key).IgnoreError();
      pos += r.consumed;
      swallow_ = r.swallow;
      continue;
    }
    if (r.request.command == MemcacheCommand::kQuit) {
      pos += r.consumed;
      result.close = true;
      break;
    }
    if (pending_get_bytes_ != 0 && pending_get_bytes_ != r.consumed) {
      pending_get_bytes_ = 0;  // not the request it was: start afresh
      pending_get_next_ = 0;
    }
    if (!Execute(r.request, out, out_limit)) {
      pending_get_bytes_ = r.consumed;
      break;
    }
    pos += r.consumed;
  }
  result.consumed = pos;
  return result;
}

bool MemcacheSession::Execute(const MemcacheRequest& req, std::string* out, size_t out_limit) {
  switch (req.command) {
    case MemcacheCommand::kGet:
    case MemcacheCommand::kGets:
    case MemcacheCommand::kGat:
    case MemcacheCommand::kGats: {
      bool done = true;
      Retrieve(req, out, out_limit, &done);
      return done;
    }
    case MemcacheCommand::kSet:
    case MemcacheCommand::kAdd:
    case MemcacheCommand::kReplace:
    case MemcacheCommand::kAppend:
    case MemcacheCommand::kPrepend:
      Add(counters_.cmd_set);
      Store(req, out);
      return true;
    case MemcacheCommand::kCas:
      Add(counters_.cmd_set);
      Cas(req, out);
      return true;
    case MemcacheCommand::kDelete:
      Delete(req, out);
      return true;
    case MemcacheCommand::kIncr:
    case MemcacheCommand::kDecr:
      Arithmetic(req, out);
      return true;
    case MemcacheCommand::kTouch:
      Touch(req, out);
      return true;
    case MemcacheCommand::kVersion:
      out->append("VERSION " RKV_MEMCACHE_VERSION_LINE "\r\n");
      return true;
    case MemcacheCommand::kVerbosity:
      Reply(req, out, "OK\r\n");  // accepted; the gateway's logging is its flags'
      return true;
    case MemcacheCommand::kStats:
      Stats(req, out);
      return true;
    case MemcacheCommand::kFlushAll:
      FlushAll(req, out);
      return true;
    case MemcacheCommand::kQuit:
      return true;  // Serve closes
  }
  return true;
}

void MemcacheSession::CacheFlushTimes(const FlushTimes& t) {
  shared_.flush_applied_ms.store(t.applied, std::memory_order_relaxed);
  shared_.flush_pending_ms.store(t.pending, std::memory_order_relaxed);
  shared_.flush_pending_from_ms.store(t.pending_from, std::memory_order_relaxed);
}

int64_t MemcacheSession::FlushTime(int64_t now_ms) {
  const int64_t read_ms = shared_.flush_read_ms.load(std::memory_order_relaxed);
  if (read_ms == 0 || now_ms - read_ms >= kFlushRefreshMs || now_ms < read_ms) {
    shared_.flush_read_ms.store(now_ms, std::memory_order_relaxed);
    auto value = client_->Get(kFlushKey);
    if (value.ok()) {
      const std::optional<FlushTimes> t = ParseFlushTimes(*value);
      if (t.has_value()) CacheFlushTimes(*t);
    } else if (value.status().code() == StatusCode::kNotFound) {
      CacheFlushTimes(FlushTimes{});
    } else {
      // Keep what was read last; the next request reads again.
      shared_.flush_read_ms.store(0, std::memory_order_relaxed);
    }
  }
  FlushTimes t;
  t.applied = shared_.flush_applied_ms.load(std::memory_order_relaxed);
  t.pending = shared_.flush_pending_ms.load(std::memory_order_relaxed);
  t.pending_from = shared_.flush_pending_from_ms.load(std::memory_order_relaxed);
  return FlushCutoff(t, now_ms);
}

int64_t MemcacheSession::StampNow() {
  const int64_t now = Client::NowUnixMs();
  return StampAfter(now, FlushTime(now));
}

std::optional<Found> MemcacheSession::Visible(std::string value, uint64_t version, int64_t expires_at_unix_ms) {
  Found f;
  f.value = std::move(value);
  f.version = version;
  f.expires_at_unix_ms = expires_at_unix_ms;
  auto item = DecodeItem(f.value);
  if (!item.has_value()) return std::nullopt;
  const int64_t flush = FlushTime(Client::NowUnixMs());
  if (Flushed(item->stored_unix_ms, flush)) return std::nullopt;
  f.item = *item;
  return f;
}

StatusOr<std::optional<Found>> MemcacheSession::Read(std::string_view key) {
  auto v = client_->GetVersioned(key);
  if (!v.ok()) {
    if (v.status().code() == StatusCode::kNotFound) return std::optional<Found>();
    return v.status();
  }
  return Visible(std::move(v->value), v->version, v->expires_at_unix_ms);
}

void MemcacheSession::Retrieve(const MemcacheRequest& req, std::string* out, size_t out_limit, bool* done) {
  const bool with_cas = req.command == MemcacheCommand::kGets || req.command == MemcacheCommand::kGats;
  const bool touching = req.command == MemcacheCommand::kGat || req.command == MemcacheCommand::kGats;
  size_t next = pending_get_next_;
  pending_get_next_ = 0;
  pending_get_bytes_ = 0;
  auto append_value = [&](std::string_view key, const Found& f) {
    out->append("VALUE ");
    out->append(key);
    out->push_back(' ');
    AppendU64(out, f.item.flags);
    out->push_back(' ');
    AppendU64(out, f.item.data.size());
    if (with_cas) {
      out->push_back(' ');
      AppendU64(out, f.version);
    }
    out->append("\r\n");
    out->append(f.item.data);
    out->append("\r\n");
  };
  while (next < req.keys.size()) {
    const size_t end = std::min(req.keys.size(), next + kGetBatch);
    if (touching) {
      for (size_t i = next; i < end; ++i) {
        Add(counters_.cmd_get);
        Add(counters_.cmd_touch);
        auto f = TouchKey(req.keys[i], req.exptime);
        if (!f.ok()) {
          Add(counters_.backend_errors);
          out->append(BackendError(f.status()));
          return;
        }
        if (f->has_value()) {
          Add(counters_.get_hits);
          Add(counters_.touch_hits);
          append_value(req.keys[i], **f);
        } else {
          Add(counters_.get_misses);
          Add(counters_.touch_misses);
        }
      }
    } else {
      // Views of the request's keys, not copies.
      const std::span<const std::string_view> keys(req.keys.data() + next, end - next);
      Add(counters_.cmd_get, keys.size());
      // get reads a batch with one MultiGet; gets needs each value's
      // version (its cas unique), which only GetVersioned returns.
      std::vector<StatusOr<std::optional<Found>>> found;
      found.reserve(keys.size());
      if (with_cas) {
        for (const std::string_view key : keys) found.push_back(Read(key));
      } else {
        for (StatusOr<std::string>& v : client_->MultiGet(keys)) {
          if (v.ok()) {
            found.push_back(Visible(std::move(*v), 0, kNoExpiry));
          } else if (v.status().code() == StatusCode::kNotFound) {
            found.push_back(std::optional<Found>());
          } else {
            found.push_back(v.status());
          }
        }
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!found[i].ok()) {
          Add(counters_.backend_errors);
          out->append(BackendError(found[i].status()));
          return;
        }
        if (found[i]->has_value()) {
          Add(counters_.get_hits);
          append_value(keys[i], **found[i]);
        } else {
          Add(counters_.get_misses);
        }
      }
    }
    next = end;
    if (next < req.keys.size() && out->size() >= out_limit) {
      pending_get_next_ = next;
      *done = false;
      return;
    }
  }
  out->append("END\r\n");
}

template <typename Step>
CasOutcome MemcacheSession::UpdateItem(std::string_view key, Step&& step) {
  return CompareAndSet(*client_, key, kMaxCasAttempts, [&](KeyState& state, std::string* value, int64_t* expiry) {
    std::optional<Found> found;
    if (state.found) {
      found = Visible(std::move(state.current.value), state.current.version, state.current.expires_at_unix_ms);
    }
    return step(found, value, expiry);
  });
}

StatusOr<std::optional<Found>> MemcacheSession::TouchKey(std::string_view key, int64_t exptime) {
  std::optional<Found> touched;
  const CasOutcome outcome =
      UpdateItem(key, [&](std::optional<Found>& found, std::string* value, int64_t* expiry) {
        touched = std::move(found);
        if (!touched.has_value()) return RmwAction::kDone;
        *value = touched->value;
        *expiry = ExptimeToDeadlineMs(exptime, Client::NowUnixMs());
        touched->expires_at_unix_ms = *expiry;
        return RmwAction::kWrite;
      });
  if (outcome.gave_up) return Status(StatusCode::kAborted, "too many concurrent writes of the key");
  if (!outcome.status.ok()) return outcome.status;
  if (outcome.wrote) touched->version = outcome.version;
  return touched;
}

void MemcacheSession::Store(const MemcacheRequest& req, std::string* out) {
  const int64_t now = Client::NowUnixMs();
  PutOptions put;
  put.expires_at_unix_ms = ExptimeToDeadlineMs(req.exptime, now);
  if (req.command == MemcacheCommand::kSet) {
    auto v = client_->Put(req.key, EncodeItem(req.flags, StampNow(), req.data), put);
    if (!v.ok()) {
      Add(counters_.backend_errors);
      Reply(req, out, BackendError(v.status()));
      return;
    }
    Reply(req, out, "STORED\r\n");
    return;
  }
  // The key may hold a value the memcached side does not see (absent to
  // it: expired, flushed or not an item): add replaces it, under its
  // version, as a write on an absent key.
  const CasOutcome outcome =
      UpdateItem(req.key, [&](const std::optional<Found>& found, std::string* value, int64_t* expiry) {
        *expiry = put.expires_at_unix_ms;
        if (req.command == MemcacheCommand::kAdd) {
          if (found.has_value()) return RmwAction::kDone;
          *value = EncodeItem(req.flags, StampNow(), req.data);
          return RmwAction::kWrite;
        }
        if (!found.has_value()) return RmwAction::kDone;
        if (req.command == MemcacheCommand::kReplace) {
          *value = EncodeItem(req.flags, StampNow(), req.data);
          return RmwAction::kWrite;
        }
        // append/prepend keep the item's flags and expiry; memcached
        // answers NOT_STORED when the result would not fit.
        const std::string_view old = found->item.data;
        if (old.size() + req.data.size() > limits_.max_data_bytes) return RmwAction::kDone;
        *value = req.command == MemcacheCommand::kAppend ? EncodeItem(found->item.flags, StampNow(), old, req.data)
                                                         : EncodeItem(found->item.flags, StampNow(), req.data, old);
        *expiry = found->expires_at_unix_ms;
        return RmwAction::kWrite;
      });
  if (ReplyIfFailed(req, out, outcome)) return;
  Reply(req, out, outcome.wrote ? "STORED\r\n" : "NOT_STORED\r\n");
}

void MemcacheSession::Cas(const MemcacheRequest& req, std::string* out) {
  PutOptions put;
  put.expires_at_unix_ms = ExptimeToDeadlineMs(req.exptime, Client::NowUnixMs());
  const std::string value = EncodeItem(req.flags, StampNow(), req.data);
  auto read = Read(req.key);
  if (!read.ok()) {
    Add(counters_.backend_errors);
    Reply(req, out, BackendError(read.status()));
    return;
  }
  if (!read->has_value()) {
    Add(counters_.cas_misses);
    Reply(req, out, "NOT_FOUND\r\n");
    return;
  }
  if ((*read)->version != req.cas_unique) {
    Add(counters_.cas_badval);
    Reply(req, out, "EXISTS\r\n");
    return;
  }
  put.condition = PutCondition::VersionIs(req.cas_unique);
  auto v = client_->Put(req.key, value, put);
  if (v.ok()) {
    Add(counters_.cas_hits);
    Reply(req, out, "STORED\r\n");
    return;
  }
  if (!ConditionFailed(v.status())) {
    Add(counters_.backend_errors);
    Reply(req, out, BackendError(v.status()));
    return;
  }
  // Written (or removed) since the read: memcached's answer for a cas that
  // lost is EXISTS, NOT_FOUND when the item is gone.
  auto again = Read(req.key);
  if (again.ok() && !again->has_value()) {
    Add(counters_.cas_misses);
    Reply(req, out, "NOT_FOUND\r\n");
    return;
  }
  Add(counters_.cas_badval);
  Reply(req, out, "EXISTS\r\n");
}

void MemcacheSession::Delete(const MemcacheRequest& req, std::string* out) {
  const CasOutcome outcome = UpdateItem(req.key, [](const std::optional<Found>& found, std::string*, int64_t*) {
    return found.has_value() ? RmwAction::kDelete : RmwAction::kDone;
  });
  if (ReplyIfFailed(req, out, outcome)) return;
  if (!outcome.wrote) {
    Add(counters_.delete_misses);
    Reply(req, out, "NOT_FOUND\r\n");
    return;
  }
  Add(counters_.delete_hits);
  Reply(req, out, "DELETED\r\n");
}

void MemcacheSession::Arithmetic(const MemcacheRequest& req, std::string* out) {
  const bool incr = req.command == MemcacheCommand::kIncr;
  bool numeric = true;
  uint64_t result = 0;
  const CasOutcome outcome =
      UpdateItem(req.key, [&](const std::optional<Found>& found, std::string* value, int64_t* expiry) {
        numeric = true;
        if (!found.has_value()) return RmwAction::kDone;
        const std::optional<uint64_t> number = ParseCounter(found->item.data);
        numeric = number.has_value();
        if (!numeric) return RmwAction::kDone;
        result = ApplyDelta(*number, req.delta, incr);
        *value = EncodeItem(found->item.flags, StampNow(), CounterData(result, found->item.data.size()));
        *expiry = found->expires_at_unix_ms;
        return RmwAction::kWrite;
      });
  if (ReplyIfFailed(req, out, outcome)) return;
  if (!numeric) {
    Reply(req, out, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    return;
  }
  if (!outcome.wrote) {
    Add(incr ? counters_.incr_misses : counters_.decr_misses);
    Reply(req, out, "NOT_FOUND\r\n");
    return;
  }
  Add(incr ? counters_.incr_hits : counters_.decr_hits);
  if (!req.noreply) {
    AppendU64(out, result);
    out->append("\r\n");
  }
}

void MemcacheSession::Touch(const MemcacheRequest& req, std::string* out) {
  Add(counters_.cmd_touch);
  auto f = TouchKey(req.key, req.exptime);
  if (!f.ok()) {
    Add(counters_.backend_errors);
    Reply(req, out, BackendError(f.status()));
    return;
  }
  if (!f->has_value()) {
    Add(counters_.touch_misses);
    Reply(req, out, "NOT_FOUND\r\n");
    return;
  }
  Add(counters_.touch_hits);
  Reply(req, out, "TOUCHED\r\n");
}

void MemcacheSession::FlushAll(const MemcacheRequest& req, std::string* out) {
  if (!options_.allow_flush) {
    Reply(req, out, "SERVER_ERROR flush_all is disabled (start rkv-gateway with --allow_flush)\r\n");
    return;
  }
  Add(counters_.cmd_flush);
  int64_t now = 0;
  FlushTimes next;
  auto step = [&](const KeyState& state, std::string* value, int64_t* expiry) {
    now = Client::NowUnixMs();
    const FlushTimes old = state.found ? ParseFlushTimes(state.current.value).value_or(FlushTimes{}) : FlushTimes{};
    // With a delay (seconds, or an absolute time, as exptime) the items
    // stored before that time are flushed then.
    const int64_t deadline = req.has_delay && req.delay > 0 ? ExptimeToDeadlineMs(req.delay, now) : 0;
    next = NextFlush(old, now, deadline);
    *value = FormatFlushTimes(next);
    *expiry = kNoExpiry;
    return RmwAction::kWrite;
  };
  const CasOutcome outcome = CompareAndSet(*client_, kFlushKey, kMaxCasAttempts, step);
  if (ReplyIfFailed(req, out, outcome, "SERVER_ERROR too many concurrent flush_all\r\n")) return;
  CacheFlushTimes(next);
  shared_.flush_read_ms.store(now, std::memory_order_relaxed);
  Reply(req, out, "OK\r\n");
}

void MemcacheSession::Stats(const MemcacheRequest& req, std::string* out) {
  const std::string_view arg = req.stats_arg;
  if (arg == "reset") {
    MemcacheCounters& c = counters_;
    for (std::atomic<uint64_t>* a :
         {&c.cmd_get, &c.get_hits, &c.get_misses, &c.cmd_set, &c.cmd_touch, &c.touch_hits, &c.touch_misses,
          &c.cas_misses, &c.cas_hits, &c.cas_badval, &c.delete_hits, &c.delete_misses, &c.incr_hits,
          &c.incr_misses, &c.decr_hits, &c.decr_misses, &c.cmd_flush, &c.backend_errors}) {
      a->store(0, std::memory_order_relaxed);
    }
    out->append("RESET\r\n");
    return;
  }
  auto stat = [out](std::string_view name, std::string_view value) {
    out->append("STAT ");
    out->append(name);
    out->push_back(' ');
    out->append(value);
    out->append("\r\n");
  };
  auto num = [&stat](std::string_view name, uint64_t v) { stat(name, std::to_string(v)); };
  if (arg == "settings") {
    num("item_size_max", limits_.max_data_bytes);
    num("key_max_length", limits_.max_key_bytes);
    stat("cas_enabled", "yes");
    stat("flush_enabled", options_.allow_flush ? "yes" : "no");
    stat("evictions", "off");
    out->append("END\r\n");
    return;
  }
  if (arg == "items" || arg == "slabs" || arg == "sizes" || arg == "conns") {
    out->append("END\r\n");  // rkv has no slabs; nothing to list
    return;
  }
  if (!arg.empty()) {
    out->append(kReplyError);  // memcached's answer to a stats group it does not know
    return;
  }
  const int64_t now_s = Client::NowUnixMs() / 1000;
  const int64_t started = shared_.started_unix_s.load(std::memory_order_relaxed);
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%ld.%06ld", static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec));
    return std::string(buf);
  };
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const MemcacheCounters& c = counters_;
  num("pid", static_cast<uint64_t>(getpid()));
  num("uptime", static_cast<uint64_t>(std::max<int64_t>(0, now_s - started)));
  num("time", static_cast<uint64_t>(now_s));
  stat("version", RKV_MEMCACHE_VERSION_LINE);
  num("pointer_size", sizeof(void*) * 8);
  stat("rusage_user", seconds(usage.ru_utime));
  stat("rusage_system", seconds(usage.ru_stime));
  num("curr_connections", load(c.curr_connections));
  num("total_connections", load(c.total_connections));
  num("cmd_get", load(c.cmd_get));
  num("cmd_set", load(c.cmd_set));
  num("cmd_flush", load(c.cmd_flush));
  num("cmd_touch", load(c.cmd_touch));
  num("get_hits", load(c.get_hits));
  num("get_misses", load(c.get_misses));
  num("delete_misses", load(c.delete_misses));
  num("delete_hits", load(c.delete_hits));
  num("incr_misses", load(c.incr_misses));
  num("incr_hits", load(c.incr_hits));
  num("decr_misses", load(c.decr_misses));
  num("decr_hits", load(c.decr_hits));
  num("cas_misses", load(c.cas_misses));
  num("cas_hits", load(c.cas_hits));
  num("cas_badval", load(c.cas_badval));
  num("touch_hits", load(c.touch_hits));
  num("touch_misses", load(c.touch_misses));
  num("backend_errors", load(c.backend_errors));
  num("item_size_max", limits_.max_data_bytes);
  out->append("END\r\n");
}

}  // namespace

std::unique_ptr<Session> NewMemcacheSession(rkv::Client* client, const MemcacheOptions& options) {
  return std::make_unique<MemcacheSession>(client, options);
}

}  // namespace rkv::gateway
