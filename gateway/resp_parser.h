// The request side of RESP2, Redis's protocol: splits a client's bytes into
// commands (argument vectors) exactly as redis-server splits them, with its
// limits and its error texts, and nothing else: no sockets, no commands.
//
// Two request forms, told apart by the first byte:
//   - multibulk: "*<n>\r\n" then n bulk strings "$<len>\r\n<len bytes>\r\n"
//     (what every client library sends; binary-safe);
//   - inline: one line, ended by "\n" (a "\r" before it is dropped), split
//     at spaces, with "double" (escapes \n \r \t \b \a \\ \" \xHH) and
//     'single' quotes (escape \') as redis-cli and telnet users type it.
// An empty inline line and "*0" / "*-1" are no request: they are consumed
// and skipped, as Redis does.
//
// Errors are Redis's texts ("ERR Protocol error: invalid bulk length"). A
// protocol error leaves the stream unsynchronised: the caller replies with
// the error and closes the connection, as redis-server does.
//
// Thread safety: the functions are pure; a RespParser holds no state but
// its limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::gateway {

// Bounds on one request; Redis's defaults unless the gateway narrows them.
struct RespLimits {
  // Longest inline line, and longest "*<n>" / "$<len>" header line
  // (Redis's PROTO_INLINE_MAX_SIZE).
  size_t max_inline_bytes = 64 * 1024;
  // Most arguments of a multibulk request (Redis: INT_MAX; the gateway
  // keeps 1,048,576, which no command it serves needs more of).
  int64_t max_multibulk_length = 1024 * 1024;
  // Largest bulk string (Redis's proto-max-bulk-len, 512 MiB).
  int64_t max_bulk_bytes = int64_t{512} << 20;
  // Largest request in all, its framing included (Redis's
  // client-query-buffer-limit, 1 GiB): bounds the input a connection may
  // hold for one request that has not fully arrived.
  size_t max_request_bytes = size_t{1} << 30;
  // Before AUTH where authentication is required: Redis refuses a
  // multibulk of more than 10 arguments and a bulk over 16 KiB.
  int64_t unauthenticated_multibulk_length = 10;
  int64_t unauthenticated_bulk_bytes = 16 * 1024;
};

struct RespParse {
  enum class Kind : uint8_t {
    kIncomplete,  // more bytes needed; nothing consumed
    kCommand,     // args holds one command; consumed bytes taken
    kSkip,        // an empty request; consumed bytes taken, nothing to run
    kError,       // error holds Redis's text ("ERR Protocol error: ..."); close
  };
  Kind kind = Kind::kIncomplete;
  size_t consumed = 0;
  std::vector<std::string> args;
  std::string error;
  // kIncomplete: the input must hold at least this many bytes before the
  // request can be complete (a lower bound; 0 when unknown), so a caller
  // that received a few bytes of a large bulk need not parse again yet.
  size_t needed = 0;
};

class RespParser {
 public:
  explicit RespParser(const RespLimits& limits = {}) : limits_(limits) {}

  // Parses the request at the front of `in`. `authenticated`: false while
  // the connection must still AUTH (the unauthenticated bounds apply).
  RespParse Parse(std::string_view in, bool authenticated = true) const;

  const RespLimits& limits() const { return limits_; }

 private:
  RespParse ParseMultibulk(std::string_view in, bool authenticated) const;
  RespParse ParseInline(std::string_view in) const;

  RespLimits limits_;
};

// Splits an inline request line as Redis's sdssplitargs does; nullopt for
// unbalanced quotes (a quote not closed, or a closing quote followed by
// something other than a space).
std::optional<std::vector<std::string>> SplitInlineArgs(std::string_view line);

// Redis's string2ll: an optional '-', then decimal digits with no leading
// zero (but "0"), no '+', no spaces, within int64. nullopt otherwise.
std::optional<int64_t> ParseRedisInteger(std::string_view text);

}  // namespace rkv::gateway
