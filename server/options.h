// The settings of one rkv-server, and their validation. main.cc fills them
// from flags; tests fill them directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/store.h"

namespace rkv::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7700";  // HOST:PORT; port 0 picks a free one
  std::string data_dir;                   // RocksDB directory (required)
  uint64_t memory_bytes = 256ULL << 20;   // heap region
  uint64_t max_keys = 1ULL << 20;         // the table is sized for this many keys
  Durability durability = Durability::kWal;
  uint32_t max_value_bytes = 1U << 20;
  uint32_t max_key_bytes = 1024;
  std::string token;                      // the raw token clients must present (its digest)
  uint64_t ring_bytes = 4ULL << 20;       // staging ring per connection
  uint32_t max_connections = 64;
  uint32_t grace_period_ms = 100;         // heap quarantine; clients' GET lease is half
  uint32_t request_credits = 32;          // outstanding requests per connection
};

// Bounds that ValidateOptions enforces besides the layout's own.
inline constexpr uint32_t kMaxGracePeriodMs = 60'000;
inline constexpr uint32_t kMinGracePeriodMs = 2;
inline constexpr uint64_t kMaxRingBytes = 1ULL << 30;
inline constexpr uint32_t kMaxConnectionsLimit = 4096;
inline constexpr uint32_t kMaxRequestCredits = 128;

// The block of the largest record the options allow.
uint64_t MaxBlockBytes(const ServerOptions& o);

// Checks every option; INVALID_ARGUMENT with a one-line reason naming the
// flag otherwise (e.g. "--ring_bytes 65536 is below twice the largest block
// (2 * 1049664); raise it or lower --max_value_bytes").
Status ValidateOptions(const ServerOptions& o);

// Parses a byte count: digits with an optional K, M, G or T suffix (powers
// of 1024; "KiB"/"MiB"/... and "KB"/"MB"/... are read the same way).
// INVALID_ARGUMENT for anything else or on overflow.
StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace rkv::server
