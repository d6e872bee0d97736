// How a memcached item lives in rkv, and memcached's arithmetic on it:
// pure functions, no rkv calls (memcache_session.cc makes those).
//
// An item is stored under its key as one rkv value:
//
//   offset  size  field
//   0       2     magic "\xFFm" (0xFF never starts UTF-8 text, so a value
//                 written by another rkv client rarely looks like an item)
//   2       1     format version, 1
//   3       1     reserved, 0
//   4       4     the client's flags, little-endian uint32
//   8       8     when the gateway stored the item: Unix milliseconds,
//                 little-endian int64 (flush_all compares it)
//   16      n     the item's data
//
// Its expiry is rkv's (PutOptions::expires_at_unix_ms), its cas unique
// rkv's version. A value that is not an item (written by kvctl, the Redis
// side or an application) reads as absent to the memcached side.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rkv::gateway {

inline constexpr size_t kItemHeaderBytes = 16;

struct MemcacheItem {
  uint32_t flags = 0;
  int64_t stored_unix_ms = 0;
  std::string_view data;  // a view into the decoded value
};

// The rkv value for an item.
std::string EncodeItem(uint32_t flags, int64_t stored_unix_ms, std::string_view data);
// The same, data given in two parts (append/prepend build it so).
std::string EncodeItem(uint32_t flags, int64_t stored_unix_ms, std::string_view data_a, std::string_view data_b);
// The item in `value`; nullopt when `value` is not one.
std::optional<MemcacheItem> DecodeItem(std::string_view value);

// memcached's exptime as an rkv expiry (PutOptions::expires_at_unix_ms),
// at `now_unix_ms`:
//   0                      never (kNoExpiry)
//   negative               already expired
//   1..2592000 (30 days)   now + exptime seconds
//   larger                 an absolute Unix time in seconds (expired when
//                          past)
// An expired item gets the deadline 1 (1970), which rkv reads as absent at
// once. Far-future times are clamped so milliseconds never overflow.
int64_t ExptimeToDeadlineMs(int64_t exptime, int64_t now_unix_ms);
inline constexpr int64_t kRelativeExptimeMaxSeconds = 60 * 60 * 24 * 30;

// The number an item's data holds for incr/decr, read as memcached reads
// it: leading whitespace, an optional '+', decimal digits within 64 bits,
// then the end or whitespace (what follows the whitespace is ignored).
// nullopt: "cannot increment or decrement non-numeric value".
std::optional<uint64_t> ParseCounter(std::string_view data);

// incr wraps at 2^64; decr stops at 0.
uint64_t ApplyDelta(uint64_t value, uint64_t delta, bool incr);

// The data incr/decr stores: the decimal number, padded with spaces to the
// old data's length when it is not longer (memcached rewrites the item in
// place then, and a get shows the padding).
std::string CounterData(uint64_t value, size_t old_size);

// flush_all's times, as the reserved rkv key keeps them (decimal Unix ms,
// "APPLIED PENDING FROM"): the cutoff `applied` is in force until the
// clock reaches `pending_from`, then the cutoff `pending`. An item whose
// stamp (MemcacheItem::stored_unix_ms) is at or before the cutoff in
// force reads as absent. 0: no flush.
struct FlushTimes {
  int64_t applied = 0;
  int64_t pending = 0;
  int64_t pending_from = 0;
};
std::string FormatFlushTimes(const FlushTimes& t);
// nullopt: not three numbers.
std::optional<FlushTimes> ParseFlushTimes(std::string_view text);
// The cutoff in force at `now_ms` (0: none).
int64_t FlushCutoff(const FlushTimes& t, int64_t now_ms);
// The times after a flush_all at `now_ms`: immediate (its cutoff takes
// effect at once) when `delay_deadline_ms` is 0, else at that time (the
// items stored before it are flushed then; until then the cutoff in force
// stays). A new cutoff is always later than the one in force, so items
// stamped after that one (StampAfter) are flushed too, even in the same
// millisecond.
FlushTimes NextFlush(const FlushTimes& old, int64_t now_ms, int64_t delay_deadline_ms);
// The stamp of an item stored at `now_ms` under `cutoff`: later than the
// cutoff, so a flush_all never hides an item stored after it.
inline int64_t StampAfter(int64_t now_ms, int64_t cutoff) {
  return cutoff == 0 || now_ms > cutoff ? now_ms : cutoff + 1;
}
inline bool Flushed(int64_t stamp, int64_t cutoff) { return cutoff != 0 && stamp <= cutoff; }

}  // namespace rkv::gateway
