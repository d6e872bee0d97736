// The in-process variant of the test cluster (tests/test_cluster.h), for
// unit tests of the client and the server that need a real coordinator
// but no processes: its state on an in-memory store, served (or not) by a
// CoordinatorServer in this process, with "servers" joined straight into
// its state. Header-only: such a test links rkv_coordinator_lib beside
// its own layer's library, and nothing of the cross-process fixture.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/test_util.h"
#include "tests/wait_for.h"

namespace rkv::testing {

struct InProcessCoordinatorOptions {
  uint32_t servers = 2;  // expected_servers
  uint32_t shards = 16;
  uint32_t replicas = 0;  // 0: DefaultReplicas(servers)
  // Rare enough that no heartbeat brings a map during a test, and no
  // joined server expires.
  std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(60);
  std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(600);
  // The leases it grants (its --lease_ms).
  std::chrono::milliseconds lease = std::chrono::milliseconds(1000);
  // The store's records; null: a new, empty store. Sharing them between
  // two coordinators started one after the other restarts the first.
  std::shared_ptr<coordinator::testing::MemoryStoreData> data;
};

inline coordinator::CoordinatorConfig InProcessConfig(const InProcessCoordinatorOptions& o) {
  coordinator::CoordinatorConfig config;
  config.expected_servers = o.servers;
  config.shard_count = o.shards;
  config.replicas = o.replicas;
  config.heartbeat_interval = o.heartbeat_interval;
  config.heartbeat_timeout = o.heartbeat_timeout;
  config.lease = o.lease;
  return config;
}

// The coordinator's state alone, on its in-memory store.
inline StatusOr<std::unique_ptr<coordinator::CoordinatorState>> OpenInProcessState(
    const InProcessCoordinatorOptions& o) {
  auto data = o.data != nullptr ? o.data : std::make_shared<coordinator::testing::MemoryStoreData>();
  return coordinator::CoordinatorState::Open(InProcessConfig(o),
                                             std::make_unique<coordinator::testing::MemoryStore>(std::move(data)));
}

// That state served on `listen` (port 0: a free one) for `token`.
inline StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> StartInProcessCoordinator(
    const InProcessCoordinatorOptions& o, const std::string& token, const std::string& listen = "127.0.0.1:0") {
  auto state = OpenInProcessState(o);
  if (!state.ok()) return state.status();
  return coordinator::CoordinatorServer::Start(listen, token, std::move(state).value());
}

// Joins server `id` (valid regions and table, coordinator::testing::MakeJoin)
// announcing `data_address` and `admin_address`; by default ports where
// nothing listens, so that a call to it fails there.
inline Status JoinFakeServer(coordinator::CoordinatorState& state, const std::string& id, uint64_t epoch,
                             const std::string& data_address = "127.0.0.1:1",
                             const std::string& admin_address = "127.0.0.1:2") {
  v1::JoinRequest r = coordinator::testing::MakeJoin(id, epoch);
  r.set_data_address(data_address);
  r.set_admin_address(admin_address);
  return state.Join(r).status();
}

}  // namespace rkv::testing
