// The server's per-connection state and its polling threads' (Server's
// private parts, server/server.h), shared by server.cc (setup, the accept
// thread, shutdown) and server_poll.cc (the polling rounds). Internal to
// server/.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/apply/apply.h"
#include "server/server.h"
#include "server/table/mapped_memory.h"

namespace rkv::server {
namespace serving {

// wr_id tags: receives carry their buffer index, sends kSendTag | index.
constexpr uint64_t kSendTag = uint64_t{1} << 32;
// The wr_id of a probe (Connection::PostProbe): above every receive's and
// send's.
constexpr uint64_t kProbeTag = uint64_t{2} << 32;
constexpr auto kPollTimeout = std::chrono::milliseconds(50);
// The most connections one Wait of a poller reports.
constexpr size_t kReadyPerWait = 256;

// A connection's message buffers, kMaxMessageBytes each: `credits`
// receive buffers, then `credits` reply buffers.
inline size_t ReceiveOffset(uint32_t buf) { return size_t{buf} * protocol::kMaxMessageBytes; }
inline size_t ReplyOffset(uint32_t credits, uint32_t reply) {
  return (size_t{credits} + reply) * protocol::kMaxMessageBytes;
}
inline transport::LocalBuf ReceiveBuf(const transport::MemoryRegion* messages, uint32_t buf) {
  return transport::LocalBuf{messages, ReceiveOffset(buf), static_cast<uint32_t>(protocol::kMaxMessageBytes)};
}

}  // namespace serving


// One accepted connection, owned by its poller. Members are destroyed
// bottom-up: the connection (its registrations) before the memory those
// registrations cover.
struct Server::Served {
  // A client connection's hold on its client's entry in the request cache
  // (Applier::ClientConnected), for as long as the connection is served.
  class ClientPin {
   public:
    ClientPin(Applier* applier, uint64_t client_id) : applier_(applier), client_id_(client_id) {
      applier_->ClientConnected(client_id_);
    }
    ~ClientPin() { applier_->ClientDisconnected(client_id_); }
    ClientPin(const ClientPin&) = delete;
    ClientPin& operator=(const ClientPin&) = delete;

   private:
    Applier* const applier_;
    const uint64_t client_id_;
  };

  MappedMemory ring;
  MappedMemory messages;  // credits receive buffers, then credits reply buffers
  transport::MemoryRegion* ring_mr = nullptr;
  transport::MemoryRegion* messages_mr = nullptr;
  uint64_t client_id = 0;
  // A client's credential (its name and digest); empty for a peer.
  std::string credential;
  Sha256Digest credential_digest{};
  std::optional<ClientPin> pin;  // a client's, once accepted
  std::string peer_id;  // a replication connection: the sending server's id; empty for a client
  std::string peer;
  std::unique_ptr<transport::Connection> conn;
  // Receives not yet applied, in arrival order: a ring of `credits`
  // entries (each holds a receive buffer, so there are never more), and
  // the free reply buffers; neither allocates per request.
  struct Received {
    uint32_t buf = 0;
    uint32_t len = 0;
  };
  std::vector<Received> pending;
  size_t pending_head = 0;
  size_t pending_count = 0;
  std::vector<uint32_t> free_replies;
  // Set when posting a reply failed: closed after the round.
  Status broken;
  // Dead peers (ProbeSilent): when the poller last saw a completion of
  // this connection (or accepted it), and the probe in flight, if any.
  std::chrono::steady_clock::time_point last_heard;
  std::chrono::steady_clock::time_point probe_sent;
  bool probing = false;
  bool can_probe = true;  // false once the transport said it has no probe
};

// A reply written into its reply buffer by a round's apply and sent once
// the round is committed (Server::SendReplies).
struct Server::OwedReply {
  Served* served;
  uint32_t buf;    // the request's receive buffer, re-posted first
  uint32_t reply;  // the reply buffer
  std::chrono::steady_clock::time_point start;  // when its apply began
  bool lookup = false;  // a client's lookup (Applier::Locate), not a write
  // A lookup's found block (Applier::Located), WRITTEN from the heap to
  // the client's landing slot before the reply; bytes 0: the reply alone.
  Applier::Located write{};
};

// What one polling round owes, in arrival order per connection: a reply
// for every request taken, and the client requests answered after every
// ready connection was served: the writes applied together
// (Applier::ApplyBatch), then the lookups (Applier::Locate), so that a
// lookup sees the writes of its round. Each names the entry of `owed` its
// reply goes into.
struct Server::Round {
  struct Lookup {
    std::span<const uint8_t> msg;
    std::span<const uint8_t> ring;
    size_t owed = 0;
  };
  std::vector<OwedReply> owed;
  std::vector<Applier::BatchWrite> writes;
  std::vector<size_t> writes_owed;
  std::vector<Lookup> lookups;
};

// A polling thread and the group it serves. The accept thread hands it
// new connections through the inbox; everything else is its own.
struct Server::Poller {
  std::unique_ptr<transport::PollGroup> group;
  std::thread thread;
  // Connections handed to this poller and not closed (the accept thread's
  // measure of load when it chooses a group).
  std::atomic<uint64_t> load{0};
  Mutex inbox_mu;
  std::vector<std::unique_ptr<Served>> inbox GUARDED_BY(inbox_mu);
  // The polling thread only.
  std::unordered_map<transport::Connection*, std::unique_ptr<Served>> served;
  // The client credentials' generation its connections were last checked
  // against (CloseRevoked).
  uint64_t credentials_checked = 0;
  // The polling thread's clock, read once a round, and when ProbeSilent
  // runs next.
  std::chrono::steady_clock::time_point round_now;
  std::chrono::steady_clock::time_point next_probe_sweep;
};

}  // namespace rkv::server
