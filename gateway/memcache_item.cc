#include "gateway/memcache_item.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "gateway/memcache_parser.h"

namespace rkv::gateway {
namespace {

constexpr char kMagic0 = '\xFF';
constexpr char kMagic1 = 'm';
constexpr char kFormatVersion = 1;

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[offset + i])} << (8 * i);
  return v;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

}  // namespace

std::string EncodeItem(uint32_t flags, int64_t stored_unix_ms, std::string_view data_a, std::string_view data_b) {
  std::string out;
  out.reserve(kItemHeaderBytes + data_a.size() + data_b.size());
  out.push_back(kMagic0);
  out.push_back(kMagic1);
  out.push_back(kFormatVersion);
  out.push_back('\0');
  PutLe(&out, flags, 4);
  PutLe(&out, static_cast<uint64_t>(stored_unix_ms), 8);
  out.append(data_a);
  out.append(data_b);
  return out;
}

std::string EncodeItem(uint32_t flags, int64_t stored_unix_ms, std::string_view data) {
  return EncodeItem(flags, stored_unix_ms, data, {});
}

std::optional<MemcacheItem> DecodeItem(std::string_view value) {
  if (value.size() < kItemHeaderBytes || value[0] != kMagic0 || value[1] != kMagic1 ||
      value[2] != kFormatVersion || value[3] != '\0') {
    return std::nullopt;
  }
  MemcacheItem item;
  item.flags = static_cast<uint32_t>(GetLe(value, 4, 4));
  item.stored_unix_ms = static_cast<int64_t>(GetLe(value, 8, 8));
  item.data = value.substr(kItemHeaderBytes);
  return item;
}

int64_t ExptimeToDeadlineMs(int64_t exptime, int64_t now_unix_ms) {
  // Past the year 100,000 in ms: far enough, and no product overflows.
  constexpr int64_t kMaxSeconds = int64_t{3'000'000'000'000};
  if (exptime == 0) return 0;
  if (exptime < 0) return 1;
  if (exptime <= kRelativeExptimeMaxSeconds) return now_unix_ms + exptime * 1000;
  const int64_t ms = (exptime > kMaxSeconds ? kMaxSeconds : exptime) * 1000;
  return ms <= now_unix_ms ? 1 : ms;
}

std::optional<uint64_t> ParseCounter(std::string_view data) {
  size_t i = 0;
  while (i < data.size() && IsSpace(data[i])) ++i;
  if (i < data.size() && data[i] == '+') ++i;
  const size_t start = i;
  while (i < data.size() && data[i] >= '0' && data[i] <= '9') ++i;
  if (i == start) return std::nullopt;
  if (i < data.size() && !IsSpace(data[i])) return std::nullopt;
  uint64_t v = 0;
  if (!ParseMemcacheU64(data.substr(start, i - start), &v)) return std::nullopt;  // over 64 bits
  return v;
}

uint64_t ApplyDelta(uint64_t value, uint64_t delta, bool incr) {
  if (incr) return value + delta;  // unsigned: wraps at 2^64, as memcached's
  return delta > value ? 0 : value - delta;
}

std::string CounterData(uint64_t value, size_t old_size) {
  std::string out = std::to_string(value);
  if (out.size() < old_size) out.append(old_size - out.size(), ' ');
  return out;
}

std::string FormatFlushTimes(const FlushTimes& t) {
  return std::to_string(t.applied) + " " + std::to_string(t.pending) + " " + std::to_string(t.pending_from);
}

std::optional<FlushTimes> ParseFlushTimes(std::string_view text) {
  int64_t v[3];
  for (int i = 0; i < 3; ++i) {
    const size_t space = i < 2 ? text.find(' ') : text.size();
    if (space == std::string_view::npos || !ParseMemcacheI64(text.substr(0, space), &v[i])) return std::nullopt;
    text.remove_prefix(i < 2 ? space + 1 : space);
  }
  return FlushTimes{v[0], v[1], v[2]};
}

int64_t FlushCutoff(const FlushTimes& t, int64_t now_ms) {
  return t.pending != 0 && now_ms >= t.pending_from ? t.pending : t.applied;
}

FlushTimes NextFlush(const FlushTimes& old, int64_t now_ms, int64_t delay_deadline_ms) {
  FlushTimes next;
  next.applied = FlushCutoff(old, now_ms);
  const int64_t after = next.applied + 1;
  if (delay_deadline_ms <= now_ms) {
    next.pending = std::max(now_ms, after);
    next.pending_from = now_ms;
  } else {
    next.pending = std::max(delay_deadline_ms, after);
    next.pending_from = next.pending;
  }
  return next;
}

}  // namespace rkv::gateway
