// The memcached text protocol on rkv: one Session per client connection of
// rkv-gateway's --memcached_listen (gateway/session.h says how the event
// loop drives it). Requests are parsed by memcache_parser.h and executed on
// the gateway's rkv::Client; replies are memcached 1.6's, byte for byte
// where clients look at them.
//
// Items are stored in rkv as a header (the client's 32-bit flags, the time
// the item was written) followed by the data (memcache_item.h), so a key
// written through the memcached side is not meant to be read through the
// Redis side, nor the other way round: a value without the header reads as
// absent here. cas uniques are rkv versions. See docs/design.md, the
// gateway's memcached subsection, for the encoding, the exptime rules and
// what flush_all does.
//
// Thread safety: a session is used by one thread at a time (session.h);
// the Client and the MemcacheCounters are shared by all sessions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "gateway/session.h"

namespace rkv::gateway {

// Counters shared by every memcached session of a gateway (`stats`).
// Relaxed atomics: each is a count, read for reporting only.
struct MemcacheCounters {
  std::atomic<uint64_t> cmd_get{0};      // keys asked for by get/gets/gat/gats
  std::atomic<uint64_t> get_hits{0};
  std::atomic<uint64_t> get_misses{0};
  std::atomic<uint64_t> cmd_set{0};      // storage commands
  std::atomic<uint64_t> cmd_touch{0};    // touch and gat/gats keys
  std::atomic<uint64_t> touch_hits{0};
  std::atomic<uint64_t> touch_misses{0};
  std::atomic<uint64_t> cas_misses{0};
  std::atomic<uint64_t> cas_hits{0};
  std::atomic<uint64_t> cas_badval{0};
  std::atomic<uint64_t> delete_hits{0};
  std::atomic<uint64_t> delete_misses{0};
  std::atomic<uint64_t> incr_hits{0};
  std::atomic<uint64_t> incr_misses{0};
  std::atomic<uint64_t> decr_hits{0};
  std::atomic<uint64_t> decr_misses{0};
  std::atomic<uint64_t> cmd_flush{0};
  std::atomic<uint64_t> total_connections{0};  // sessions created
  std::atomic<uint64_t> curr_connections{0};   // sessions alive
  std::atomic<uint64_t> backend_errors{0};     // rkv calls that failed (SERVER_ERROR replies)
};

// What the memcached sessions of one gateway share: the counters, and the
// flush_all time the gateway last read from rkv (see docs/design.md: an
// item stamped at or before the flush_all time in force reads as absent).
//
// Thread safety: atomics, read and written by every session; the flush
// fields are a cache (a stale pair only delays seeing another gateway's
// flush_all, by at most kFlushRefreshMs).
struct MemcacheShared {
  MemcacheCounters counters;
  // The flush times (memcache_item.h's FlushTimes), Unix ms (0: none):
  // the cutoff `flush_applied_ms` is in force until the clock reaches
  // `flush_pending_from_ms`, then `flush_pending_ms`. Three relaxed
  // atomics, not one snapshot: a reader racing a refresh may mix two
  // versions for that moment, as a read racing the flush_all itself may.
  std::atomic<int64_t> flush_applied_ms{0};
  std::atomic<int64_t> flush_pending_ms{0};
  std::atomic<int64_t> flush_pending_from_ms{0};
  // When they were last read from rkv (Unix ms; 0: never).
  std::atomic<int64_t> flush_read_ms{0};
  // When the gateway started (Unix seconds), for `stats` uptime.
  std::atomic<int64_t> started_unix_s{0};
};

struct MemcacheOptions {
  Limits limits;
  // flush_all is refused unless set (it hides every item written through
  // the memcached side before it, on every gateway of the cluster).
  bool allow_flush = false;
  // Shared by the gateway's sessions; must outlive them. Null: one
  // process-wide instance (what a gateway with one memcached listener
  // wants).
  MemcacheShared* shared = nullptr;
};

// A session of the memcached text protocol executing on `client`, which
// must outlive it. Never null.
std::unique_ptr<Session> NewMemcacheSession(rkv::Client* client, const MemcacheOptions& options);

}  // namespace rkv::gateway
