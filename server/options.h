// The settings of one rkv-server, and their validation. main.cc fills them
// from flags; tests fill them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/client_credentials.h"
#include "common/status.h"
#include "server/store/store.h"

namespace rkv::server {

// How a polling thread waits for its next request (`--poll`):
//   kAdaptive: its group's Wait (transport::PollGroup) spins while
//     requests keep coming and sleeps once its connections are idle
//     (docs/design.md, "Transports"): no CPU when idle, a wake-up after an
//     idle spell.
//   kBusy: it polls without ever sleeping: no wake-up on any request, one
//     CPU per polling thread, also when idle.
// Both are the transport's Wait: the mode sets its spin bound
// (transport::Options::poll_spin_us, PollSpinUs below), which the process
// gives the transport it creates for the server. Busy sets the largest
// bound, far above the poller's 50 ms Wait timeout: a wait that ends within
// the bound never shrinks the group's spin window, so it stays whole and
// every Wait spins until its timeout.
enum class PollMode { kAdaptive, kBusy };

// transport::Options::poll_spin_us for `mode`: the transport's default
// (1000 us) when adaptive, its maximum (1000000 us) when busy.
int PollSpinUs(PollMode mode);

// "adaptive" | "busy"; INVALID_ARGUMENT otherwise.
StatusOr<PollMode> ParsePollMode(std::string_view name);
const char* PollModeName(PollMode mode);

// The default of ServerOptions::threads: the CPUs this process may run on
// (its affinity mask), at most kMaxThreads.
uint32_t DefaultThreads();
inline constexpr uint32_t kMaxThreads = 256;

struct ServerOptions {
  std::string listen = "127.0.0.1:7700";  // HOST:PORT; port 0 picks a free one
  std::string data_dir;                   // RocksDB directory (required)
  uint64_t memory_bytes = 256ULL << 20;   // heap region
  uint64_t max_keys = 1ULL << 20;         // the table is sized for this many keys
  Durability durability = Durability::kWal;
  PollMode poll = PollMode::kAdaptive;
  uint32_t max_value_bytes = 1U << 20;
  uint32_t max_key_bytes = 1024;
  std::string token;                      // the raw token clients must present (its digest)
  // The cluster credential: what servers present to each other (replication
  // connections, the Replica service). Empty: `token`, one credential for
  // every role, with which any client can forge a primary's forward
  // (docs/design.md §10). ClusterToken() gives the one in force.
  std::string cluster_token;
  // Per-server credentials (--server_credentials_file; empty: none): every
  // server's, which peers are accepted with (PeerCredentials). With them,
  // `cluster_token` is this server's own credential, the file's entry for
  // `server_credential_name`: what it presents to peers and to the
  // coordinator, which binds its id to that name (docs/design.md §10).
  ClientCredentials server_credentials;
  std::string server_credential_name;
  uint64_t ring_bytes = 4ULL << 20;       // staging ring per connection
  // --durability=none only (0: unset, kDefaultWriteBackBytes): the
  // store's write-back buffer (server/store/store.h) holds at most this many
  // bytes of keys and values, and WriteBackKeys() keys, before a PUT waits
  // for room; its writer starts at half. What a crash of such a server
  // can lose.
  uint64_t write_back_bytes = 0;
  // Memory per connection (ServerStats::connection_cost): its staging ring
  // (ring_bytes, pinned on verbs), 2 * request_credits * 128 bytes of
  // messages and under 1 KiB of the poller's bookkeeping; on tcp also at
  // most ~5 MiB of responses in flight (tcp_frame.h) and one frame being
  // received. 1024 * (4 MiB + 5 MiB) = 9 GiB at worst with the defaults,
  // which a 24 GiB machine holds beside the heap. No thread per connection.
  uint32_t max_connections = 1024;
  // Polling threads (docs/design.md, "Connection scale"): 1..kMaxThreads.
  // A replicating server gives one of them to other servers' replication
  // connections (and runs two when this is 1).
  uint32_t threads = DefaultThreads();
  // tcp only (docs/design.md, "Failure model and security"): a socket
  // that has not completed its setup within handshake_timeout_ms is
  // closed; so is a connection that leaves a frame incomplete, or reads
  // none of its responses, for frame_timeout_ms, or sends nothing for
  // idle_timeout_s (0: no idle limit).
  uint32_t handshake_timeout_ms = 5000;
  uint32_t frame_timeout_ms = 30'000;
  uint32_t idle_timeout_s = 600;
  // Dead peers (docs/design.md §7.7), both transports: a connection of
  // which the server saw no completion for probe_idle_ms gets a probe
  // (transport::Connection::PostProbe); one whose probe fails, or is not
  // answered within probe_timeout_ms, is released. A peer gone without a
  // disconnect is released within probe_idle_ms + probe_timeout_ms and a
  // polling round (on tcp its kernel's reset, or idle_timeout_s, often
  // ends it first). probe_idle_ms 0: no probes.
  uint32_t probe_idle_ms = 10'000;
  uint32_t probe_timeout_ms = 10'000;
  // The listener's accept path (transport::Options): a source address's
  // refusals per second before its requests are refused unscreened for
  // the rest of the second (0: no limit), and verbs' rdma_listen backlog.
  uint32_t max_refusals_per_source = 1000;
  uint32_t listen_backlog = 128;
  uint32_t grace_period_ms = 100;         // heap quarantine; clients' GET lease is half
  uint32_t request_credits = 32;          // outstanding requests per connection
  // The longest a primary waits for its backups to acknowledge a forwarded
  // write (connecting included) before it reports the silent ones
  // (docs/design.md, "Replication"); unused when standalone.
  uint32_t replication_timeout_ms = 1000;
  // Catch-up (docs/design.md, "Catch-up"): megabytes (10^6 bytes) of keys
  // and values this server fetches per second while it catches up on
  // shards, all its streams together, so that the primaries' clients keep
  // their latency; 0: no limit. At most kMaxCatchupRateMbPerS.
  uint32_t catchup_rate_mb_per_s = 16;
};
inline constexpr uint32_t kMaxCatchupRateMbPerS = 100'000;

// The transport queue depths a server asks for (transport::Options): room
// for request_credits receives, and for as many replies with the send
// queue's accounting (verbs signals every send_depth / 2) to spare.
uint32_t ServerSendDepth(const ServerOptions& o);
uint32_t ServerRecvDepth(const ServerOptions& o);

// The control plane of one rkv-server: membership with a coordinator and
// the Admin service. All empty: standalone, no Admin service.
struct ControlOptions {
  // HOST:PORT of rkv-coordinator, or the cluster's coordinators as a
  // comma-separated list (the server finds the leader); empty = standalone.
  std::string coordinator;
  // HOST:PORT of the Admin service; port 0 picks a free one. Empty: none
  // when standalone, "<--listen host>:0" with a coordinator.
  std::string admin_listen;
  // HOST:PORT clients should use for the data plane; empty = the address
  // actually listened on. Required with a coordinator when --listen is a
  // wildcard (0.0.0.0 or ::).
  std::string advertise_address;
  // Failure domain announced in the Join (`--zone`): printable ASCII, at
  // most 64 bytes; empty = unlabelled. The coordinator puts a shard's
  // replicas in distinct zones when it can, and refuses a rejoin that
  // changes it.
  std::string zone;
  // HOST:PORT of GET /metrics (Prometheus text format); port 0 picks a
  // free one; empty = none (server/server_metrics.h). Initialized here so
  // that an initializer list of the four fields above stays complete.
  std::string metrics_listen = {};
};

// True for a host that binds every interface ("0.0.0.0", "::"), which no
// client can connect to.
bool IsWildcardHost(std::string_view host);

// "HOST:PORT", with brackets around an IPv6 host.
std::string JoinHostPort(std::string_view host, uint16_t port);

// Checks the control options against the data plane's --listen (already
// valid per ValidateOptions); INVALID_ARGUMENT naming the flag otherwise.
Status ValidateControlOptions(const ControlOptions& c, const std::string& listen);

// The address the Admin service binds: --admin_listen when given, else
// "<listen host>:0" with a coordinator, else empty (no Admin service).
std::string EffectiveAdminListen(const ControlOptions& c, const std::string& listen);

// The address to announce for a service bound at `bound` (HOST:PORT): the
// explicit `advertise` when non-empty; else `bound`, with a wildcard host
// replaced by `fallback_host` when that is non-empty. INVALID_ARGUMENT when
// the result would still be a wildcard or is malformed.
StatusOr<std::string> AdvertisedAddress(const std::string& bound, const std::string& advertise,
                                        const std::string& fallback_host);

// Bounds that ValidateOptions enforces besides the layout's own.
inline constexpr uint32_t kMaxGracePeriodMs = 60'000;
inline constexpr uint32_t kMinGracePeriodMs = 2;
inline constexpr uint64_t kMaxRingBytes = 1ULL << 30;
inline constexpr uint64_t kDefaultWriteBackBytes = 64ULL << 20;
inline constexpr uint64_t kMinWriteBackBytes = 64ULL << 10;
inline constexpr uint64_t kMaxWriteBackBytes = 1ULL << 30;
// The write-back buffer's limits for `o` (durability none): its bytes, and
// one key per KiB of them (at least 64), 65,536 keys with the default.
uint64_t WriteBackBytes(const ServerOptions& o);
uint32_t WriteBackKeys(const ServerOptions& o);
inline constexpr uint32_t kMaxConnectionsLimit = 4096;
inline constexpr uint32_t kMaxRequestCredits = 128;
inline constexpr uint32_t kMinTimeoutMs = 100;
inline constexpr uint32_t kMaxTimeoutMs = 3'600'000;
inline constexpr uint32_t kMaxIdleTimeoutS = 7 * 86'400;
inline constexpr uint32_t kMinReplicationTimeoutMs = 1;
inline constexpr uint32_t kMaxReplicationTimeoutMs = 60'000;
inline constexpr size_t kMaxZoneBytes = 64;  // == control::kMaxZoneBytes

// The block of the largest record the options allow.
uint64_t MaxBlockBytes(const ServerOptions& o);

// The cluster credential in force: `cluster_token`, or `token` when none
// was given.
const std::string& ClusterToken(const ServerOptions& o);

// The credentials a peer server may present (replication connections, the
// Replica service): the per-server credentials when there are some, else
// ClusterToken's alone, named "cluster".
ClientCredentials PeerCredentials(const ServerOptions& o);

// Checks every option; INVALID_ARGUMENT with a one-line reason naming the
// flag otherwise (e.g. "--ring_bytes 65536 is below twice the largest block
// (2 * 1049664); raise it or lower --max_value_bytes").
Status ValidateOptions(const ServerOptions& o);

// Parses a byte count: digits with an optional K, M, G or T suffix (powers
// of 1024; "KiB"/"MiB"/... and "KB"/"MB"/... are read the same way).
// INVALID_ARGUMENT for anything else or on overflow.
StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace rkv::server
