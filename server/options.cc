#include "server/options.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <thread>

#include "common/layout.h"
#include "common/net_address.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/table/heap.h"
#include "server/table/table.h"

namespace rkv::server {

StatusOr<PollMode> ParsePollMode(std::string_view name) {
  if (name == "adaptive") return PollMode::kAdaptive;
  if (name == "busy") return PollMode::kBusy;
  return InvalidArgument("unknown poll mode '" + std::string(name) + "': expected adaptive or busy");
}

uint32_t ServerSendDepth(const ServerOptions& o) { return std::max<uint32_t>(16, 2 * o.request_credits); }

uint32_t ServerRecvDepth(const ServerOptions& o) { return std::max<uint32_t>(4, o.request_credits); }

uint32_t DefaultThreads() {
  // The CPUs this process may run on (taskset, cpusets), not the machine's.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int allowed = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  const uint32_t n = allowed > 0 ? static_cast<uint32_t>(allowed) : std::thread::hardware_concurrency();
  return std::clamp<uint32_t>(n, 1, kMaxThreads);
}

int PollSpinUs(PollMode mode) {
  return mode == PollMode::kBusy ? 1'000'000 : transport::Options{}.poll_spin_us;
}

const char* PollModeName(PollMode mode) {
  switch (mode) {
    case PollMode::kAdaptive: return "adaptive";
    case PollMode::kBusy: return "busy";
  }
  return "?";
}

uint64_t MaxBlockBytes(const ServerOptions& o) { return layout::BlockBytes(o.max_key_bytes, o.max_value_bytes); }

const std::string& ClusterToken(const ServerOptions& o) { return o.cluster_token.empty() ? o.token : o.cluster_token; }

ClientCredentials PeerCredentials(const ServerOptions& o) {
  if (o.server_credentials.size() > 0) return o.server_credentials;
  ClientCredentials one;
  // Add fails only for a token ReadTokenFile never returns (empty, or
  // longer than kMaxTokenFileBytes): the set then stays empty and accepts
  // no peer.
  (void)one.Add("cluster", ClusterToken(o));
  return one;
}

Status ValidateOptions(const ServerOptions& o) {
  std::string host;
  uint16_t port = 0;
  if (Status s = ParseHostPort(o.listen, &host, &port); !s.ok()) {
    return InvalidArgument("--listen: " + s.message());
  }
  if (o.data_dir.empty()) return InvalidArgument("--data_dir is required");
  if (o.token.empty()) return InvalidArgument("--token_file must name a file holding a non-empty token");
  if (o.server_credentials.size() > 0) {
    if (o.server_credential_name.empty()) {
      return InvalidArgument("--server_credentials_file needs --server_credential_name: the credential of the file "
                             "this server presents");
    }
    if (!o.server_credentials.Contains(o.server_credential_name, TokenDigest(o.cluster_token))) {
      return InvalidArgument("--server_credential_name " + o.server_credential_name +
                             " is not a credential of --server_credentials_file");
    }
    if (o.server_credentials.Holds(o.token)) {
      return InvalidArgument("--server_credentials_file holds the client token: a server's credential must be one "
                             "no client holds");
    }
  } else if (!o.server_credential_name.empty()) {
    return InvalidArgument("--server_credential_name needs --server_credentials_file");
  }
  if (o.max_key_bytes < 1 || o.max_key_bytes > layout::kMaxKeyBytesLimit) {
    return InvalidArgument("--max_key_bytes " + std::to_string(o.max_key_bytes) + " is outside [1, " +
                           std::to_string(layout::kMaxKeyBytesLimit) + "]");
  }
  if (o.max_value_bytes > layout::kMaxValueBytesLimit) {
    return InvalidArgument("--max_value_bytes " + std::to_string(o.max_value_bytes) + " is over the layout limit " +
                           std::to_string(layout::kMaxValueBytesLimit));
  }
  const uint64_t block = MaxBlockBytes(o);
  const uint64_t block_class = Heap::ClassBytes(Heap::ClassOf(block));
  if (o.memory_bytes < block_class || o.memory_bytes > layout::kMaxHeapBytes) {
    return InvalidArgument("--memory " + std::to_string(o.memory_bytes) + " is outside [" +
                           std::to_string(block_class) + " (the largest record's block), " +
                           std::to_string(layout::kMaxHeapBytes) + "]");
  }
  if (Status s = Table::BucketCountLog2ForKeys(o.max_keys).status(); !s.ok()) {
    return InvalidArgument("--max_keys: " + s.message());
  }
  if (o.ring_bytes % layout::kBlockAlign != 0 || o.ring_bytes > kMaxRingBytes) {
    return InvalidArgument("--ring_bytes " + std::to_string(o.ring_bytes) + " must be a multiple of 64 and at most " +
                           std::to_string(kMaxRingBytes));
  }
  if (o.ring_bytes < 2 * block) {
    return InvalidArgument("--ring_bytes " + std::to_string(o.ring_bytes) +
                           " is below twice the largest block (2 * " + std::to_string(block) +
                           "); raise it or lower --max_value_bytes");
  }
  if (o.max_connections < 1 || o.max_connections > kMaxConnectionsLimit) {
    return InvalidArgument("--max_connections " + std::to_string(o.max_connections) + " is outside [1, " +
                           std::to_string(kMaxConnectionsLimit) + "]");
  }
  if (o.threads < 1 || o.threads > kMaxThreads) {
    return InvalidArgument("--threads " + std::to_string(o.threads) + " is outside [1, " +
                           std::to_string(kMaxThreads) + "]");
  }
  if (o.grace_period_ms < kMinGracePeriodMs || o.grace_period_ms > kMaxGracePeriodMs) {
    return InvalidArgument("--grace_period_ms " + std::to_string(o.grace_period_ms) + " is outside [" +
                           std::to_string(kMinGracePeriodMs) + ", " + std::to_string(kMaxGracePeriodMs) + "]");
  }
  const auto check_ms = [](const char* flag, uint32_t ms) -> Status {
    if (ms >= kMinTimeoutMs && ms <= kMaxTimeoutMs) return Status::Ok();
    return InvalidArgument(std::string(flag) + " " + std::to_string(ms) + " is outside [" +
                           std::to_string(kMinTimeoutMs) + ", " + std::to_string(kMaxTimeoutMs) + "]");
  };
  RKV_RETURN_IF_ERROR(check_ms("--handshake_timeout_ms", o.handshake_timeout_ms));
  RKV_RETURN_IF_ERROR(check_ms("--frame_timeout_ms", o.frame_timeout_ms));
  if (o.idle_timeout_s > kMaxIdleTimeoutS) {
    return InvalidArgument("--idle_timeout_s " + std::to_string(o.idle_timeout_s) + " is over " +
                           std::to_string(kMaxIdleTimeoutS) + " (0 turns the idle limit off)");
  }
  if (o.idle_timeout_s != 0 && uint64_t{o.idle_timeout_s} * 1000 < o.frame_timeout_ms) {
    return InvalidArgument("--idle_timeout_s " + std::to_string(o.idle_timeout_s) +
                           " is shorter than --frame_timeout_ms " + std::to_string(o.frame_timeout_ms));
  }
  if (o.probe_idle_ms != 0) {
    RKV_RETURN_IF_ERROR(check_ms("--probe_idle_ms", o.probe_idle_ms));
    RKV_RETURN_IF_ERROR(check_ms("--probe_timeout_ms", o.probe_timeout_ms));
  }
  if (o.listen_backlog < 1 || o.listen_backlog > transport::kMaxListenBacklog) {
    return InvalidArgument("--listen_backlog " + std::to_string(o.listen_backlog) + " is outside [1, " +
                           std::to_string(transport::kMaxListenBacklog) + "]");
  }
  if (o.catchup_rate_mb_per_s > kMaxCatchupRateMbPerS) {
    return InvalidArgument("--catchup_rate_mb_per_s " + std::to_string(o.catchup_rate_mb_per_s) + " is over " +
                           std::to_string(kMaxCatchupRateMbPerS) + " (0 turns the limit off)");
  }
  if (o.request_credits < 1 || o.request_credits > kMaxRequestCredits) {
    return InvalidArgument("request credits " + std::to_string(o.request_credits) + " outside [1, " +
                           std::to_string(kMaxRequestCredits) + "]");
  }
  if (o.write_back_bytes != 0) {
    if (o.durability != Durability::kNone) {
      return InvalidArgument("--write_back_bytes applies only with --durability=none (durability " +
                             std::string(DurabilityName(o.durability)) + " writes RocksDB before it replies)");
    }
    if (o.write_back_bytes < kMinWriteBackBytes || o.write_back_bytes > kMaxWriteBackBytes) {
      return InvalidArgument("--write_back_bytes " + std::to_string(o.write_back_bytes) + " is outside [" +
                             std::to_string(kMinWriteBackBytes) + ", " + std::to_string(kMaxWriteBackBytes) + "]");
    }
  }
  if (o.replication_timeout_ms < kMinReplicationTimeoutMs || o.replication_timeout_ms > kMaxReplicationTimeoutMs) {
    return InvalidArgument("--replication_timeout_ms " + std::to_string(o.replication_timeout_ms) +
                           " is outside [" + std::to_string(kMinReplicationTimeoutMs) + ", " +
                           std::to_string(kMaxReplicationTimeoutMs) + "]");
  }
  return Status::Ok();
}

uint64_t WriteBackBytes(const ServerOptions& o) {
  return o.write_back_bytes == 0 ? kDefaultWriteBackBytes : o.write_back_bytes;
}

uint32_t WriteBackKeys(const ServerOptions& o) {
  return static_cast<uint32_t>(std::max<uint64_t>(64, WriteBackBytes(o) >> 10));
}

bool IsWildcardHost(std::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0";
}

std::string JoinHostPort(std::string_view host, uint16_t port) {
  std::string out;
  if (host.find(':') != std::string_view::npos) {
    out.append("[").append(host).append("]");
  } else {
    out.append(host);
  }
  return out + ":" + std::to_string(port);
}

Status ValidateControlOptions(const ControlOptions& c, const std::string& listen) {
  std::string host;
  uint16_t port = 0;
  if (Status s = ParseHostPort(listen, &host, &port); !s.ok()) {
    return InvalidArgument("--listen: " + s.message());
  }
  const std::string listen_host = host;
  if (!c.coordinator.empty()) {
    // A list "A,B,C" of the cluster's coordinators; each entry must name
    // one that can be reached (the list's syntax in full is
    // control::ParseCoordinatorList's, checked again by the membership).
    std::string_view rest = c.coordinator;
    for (int position = 1;; ++position) {
      const size_t comma = rest.find(',');
      std::string entry(rest.substr(0, comma));
      entry.erase(0, entry.find_first_not_of(" \t"));
      entry.erase(entry.find_last_not_of(" \t") + 1);
      const std::string which = "--coordinator entry " + std::to_string(position) + " '" + entry + "'";
      if (Status s = ParseHostPort(entry, &host, &port); !s.ok()) return InvalidArgument(which + ": " + s.message());
      if (port == 0 || IsWildcardHost(host)) {
        return InvalidArgument(which + " must name a reachable HOST:PORT (not a wildcard, not port 0)");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (!c.admin_listen.empty()) {
    if (Status s = ParseHostPort(c.admin_listen, &host, &port); !s.ok()) {
      return InvalidArgument("--admin_listen: " + s.message());
    }
    if (c.admin_listen == listen && port != 0) {
      return InvalidArgument("--admin_listen " + c.admin_listen + " is the same address as --listen");
    }
  }
  if (!c.advertise_address.empty()) {
    if (Status s = ParseHostPort(c.advertise_address, &host, &port); !s.ok()) {
      return InvalidArgument("--advertise_address: " + s.message());
    }
    if (port == 0 || IsWildcardHost(host)) {
      return InvalidArgument("--advertise_address " + c.advertise_address +
                             " must be an address clients can connect to (not a wildcard, not port 0)");
    }
  } else if (!c.coordinator.empty() && IsWildcardHost(listen_host)) {
    return InvalidArgument("--listen " + listen +
                           " binds every interface, so clients would not know where to connect: with "
                           "--coordinator, also pass --advertise_address=HOST:PORT");
  }
  if (!c.metrics_listen.empty()) {
    if (Status s = ParseHostPort(c.metrics_listen, &host, &port); !s.ok()) {
      return InvalidArgument("--metrics_listen: " + s.message());
    }
    if (port != 0 && (c.metrics_listen == listen || c.metrics_listen == c.admin_listen)) {
      return InvalidArgument("--metrics_listen " + c.metrics_listen + " is the same address as --" +
                             (c.metrics_listen == listen ? "listen" : "admin_listen"));
    }
  }
  // The rule of control::ValidateZone, which the coordinator applies to the
  // Join; checked here too so that a bad flag stops the server at once.
  if (c.zone.size() > kMaxZoneBytes) {
    return InvalidArgument("--zone is " + std::to_string(c.zone.size()) + " bytes, over " +
                           std::to_string(kMaxZoneBytes));
  }
  for (char ch : c.zone) {
    if (ch < 0x20 || ch > 0x7E) return InvalidArgument("--zone may hold only printable ASCII characters");
  }
  return Status::Ok();
}

std::string EffectiveAdminListen(const ControlOptions& c, const std::string& listen) {
  if (!c.admin_listen.empty()) return c.admin_listen;
  if (c.coordinator.empty()) return "";
  std::string host;
  uint16_t port = 0;
  if (!ParseHostPort(listen, &host, &port).ok()) return "";
  return JoinHostPort(host, 0);
}

StatusOr<std::string> AdvertisedAddress(const std::string& bound, const std::string& advertise,
                                        const std::string& fallback_host) {
  const std::string& chosen = advertise.empty() ? bound : advertise;
  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(chosen, &host, &port));
  if (port == 0) return InvalidArgument("address " + chosen + " has port 0");
  if (!IsWildcardHost(host)) return chosen;
  if (!advertise.empty() || fallback_host.empty() || IsWildcardHost(fallback_host)) {
    return InvalidArgument("address " + chosen + " binds every interface and has no host clients can use");
  }
  return JoinHostPort(fallback_host, port);
}

StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  const std::string shown(text);
  uint64_t n = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(begin, end, n);
  if (text.empty() || p == begin || ec != std::errc()) {
    return InvalidArgument("'" + shown + "' is not a byte count (e.g. 4096, 64K, 256M, 1G)");
  }
  std::string suffix(p, end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "IB") {
      return InvalidArgument("'" + shown + "' has an unknown unit (use K, M, G or T)");
    }
    switch (unit) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return InvalidArgument("'" + shown + "' has an unknown unit (use K, M, G or T)");
    }
  }
  if (shift > 0 && n > (~uint64_t{0} >> shift)) return InvalidArgument("'" + shown + "' overflows");
  return n << shift;
}

}  // namespace rkv::server
