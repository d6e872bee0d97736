// The memcached text protocol's requests, parsed as memcached 1.6 reads
// them: pure functions of the bytes, no I/O and no rkv (the session
// executes what they return, memcache_session.cc).
//
// A request is a line ending in "\n" (a "\r" right before it is dropped),
// split on spaces (runs of spaces and leading or trailing ones count for
// nothing), then, for the storage commands, a data block of exactly the
// announced bytes followed by "\r\n". Commands are case-sensitive.
//
// What memcached answers is kept, byte for byte:
//   - an unknown command, or a known one with the wrong number of tokens:
//     "ERROR";
//   - a key over the key limit (250 bytes, or rkv's limit when smaller), a
//     malformed number: "CLIENT_ERROR bad command line format" (the data
//     block, if any, is not read: its bytes are parsed as the next
//     request, as memcached does);
//   - a data block whose last two bytes are not "\r\n": "CLIENT_ERROR bad
//     data chunk" (the announced bytes + 2 are consumed);
//   - a block over the value limit: "SERVER_ERROR object too large for
//     cache", and the block is swallowed (ParseKind::kTooLarge);
//   - a request line that has no "\n" within 2048 bytes: the connection is
//     closed without a reply (memcached's rule for a partial line over
//     2048 bytes). Retrieval lines (get, gets, gat, gats) may be longer, up
//     to kMaxRetrievalLineBytes (memcached's are unbounded; the cap bounds
//     a connection's memory); a longer one is closed likewise.
//   - noreply (the last token of a command that takes it) suppresses every
//     reply of that command, errors included, as memcached's does.
// Unlike memcached, a key holding a control character (bytes 0-31, 127)
// is refused with "CLIENT_ERROR bad command line format" (memcached's
// protocol forbids them; memcached itself does not check), and a line
// longer than 2048 bytes is closed however it arrived (memcached parses
// one that came whole within one read).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace rkv::gateway {

enum class MemcacheCommand : uint8_t {
  kSet,
  kAdd,
  kReplace,
  kAppend,
  kPrepend,
  kCas,
  kGet,
  kGets,
  kGat,
  kGats,
  kDelete,
  kIncr,
  kDecr,
  kTouch,
  kVersion,
  kStats,
  kVerbosity,
  kFlushAll,
  kQuit,
};

// The storage commands (a data block follows the line).
bool IsStorageCommand(MemcacheCommand command);

// A parsed request. Views point into the input given to
// ParseMemcacheRequest, valid while it is.
struct MemcacheRequest {
  MemcacheCommand command = MemcacheCommand::kVersion;
  // Storage, delete, incr/decr, touch: the key. Retrieval: empty.
  std::string_view key;
  // get/gets/gat/gats: the keys, in order (repeats kept); at least one for
  // get/gets, possibly none for gat/gats (memcached answers END).
  std::vector<std::string_view> keys;
  uint32_t flags = 0;        // storage
  int64_t exptime = 0;       // storage, touch, gat/gats (memcached's exptime, seconds)
  uint64_t cas_unique = 0;   // cas
  uint64_t delta = 0;        // incr/decr
  std::string_view data;     // storage: the block, without its "\r\n"
  bool noreply = false;
  // flush_all: whether a delay was given, and its value (exptime rules).
  bool has_delay = false;
  int64_t delay = 0;
  // stats: the first argument ("" for plain stats, "reset", "settings"...).
  std::string_view stats_arg;
  // verbosity: the level (accepted and ignored).
  uint32_t verbosity = 0;
};

enum class ParseKind : uint8_t {
  // No complete request at the front of the input: wait for more bytes.
  kIncomplete,
  // `request` is one complete request, `consumed` bytes long.
  kRequest,
  // A request refused by the parser: `reply` (empty when noreply
  // suppressed it) is the whole answer; `consumed` bytes are taken.
  kError,
  // A storage command whose block exceeds the value limit: the line
  // (`consumed` bytes) is taken, `reply` is SERVER_ERROR (empty under
  // noreply), and the next `swallow` bytes (the block and its "\r\n"),
  // whatever they are, must be discarded before parsing again. `request`
  // holds the command and key (memcached removes the key a failed set
  // would have replaced).
  kTooLarge,
  // Close the connection without a reply (a line too long).
  kClose,
};

struct ParseResult {
  ParseKind kind = ParseKind::kIncomplete;
  size_t consumed = 0;
  MemcacheRequest request;
  std::string_view reply;  // kError, kTooLarge: the reply, "\r\n" included
  uint64_t swallow = 0;    // kTooLarge
};

struct ParserLimits {
  // Longest key accepted (memcached's 250; smaller when rkv's is).
  size_t max_key_bytes = 250;
  // Largest data block stored; larger is kTooLarge.
  uint64_t max_data_bytes = 1 << 20;
};

// memcached's limit on a partial line before it closes the connection.
inline constexpr size_t kMaxLineBytes = 2048;
// This gateway's limit on a get/gets/gat/gats line.
inline constexpr size_t kMaxRetrievalLineBytes = size_t{1} << 20;
// memcached's KEY_MAX_LENGTH.
inline constexpr size_t kMemcachedMaxKeyBytes = 250;

// Parses the request at the front of `in`. Never reads past `in`; bounded
// work and memory for any input (the keys vector grows with the line).
ParseResult ParseMemcacheRequest(std::string_view in, const ParserLimits& limits);

// Replies shared by the parser and the session.
inline constexpr std::string_view kReplyError = "ERROR\r\n";
inline constexpr std::string_view kReplyBadFormat = "CLIENT_ERROR bad command line format\r\n";
inline constexpr std::string_view kReplyBadChunk = "CLIENT_ERROR bad data chunk\r\n";
inline constexpr std::string_view kReplyTooLarge = "SERVER_ERROR object too large for cache\r\n";
inline constexpr std::string_view kReplyBadExptime = "CLIENT_ERROR invalid exptime argument\r\n";
inline constexpr std::string_view kReplyBadDelta = "CLIENT_ERROR invalid numeric delta argument\r\n";
inline constexpr std::string_view kReplyDeleteUsage =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";

// Numbers as memcached's safe_strto* read a token: an optional '+',
// decimal digits, nothing else, within the type's range ("-0" and other
// signs refused). False on anything else.
bool ParseMemcacheU64(std::string_view token, uint64_t* out);
bool ParseMemcacheU32(std::string_view token, uint32_t* out);
// Signed: an optional '+' or '-', digits, within int64_t.
bool ParseMemcacheI64(std::string_view token, int64_t* out);

}  // namespace rkv::gateway
