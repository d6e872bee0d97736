// FaultTransport: a Transport that wraps another one (tcp, verbs, or a
// FaultTransport) and injects faults into what passes through it, so that
// failures are tested without hardware and without timing luck. Its
// listeners and connections wrap the inner ones; memory regions are the
// inner transport's own (Register and RegisterPrivate pass straight
// through), so LocalBufs and RemoteBufs mean the same on both.
//
// With no rule and no hook set it changes nothing: every call goes to the
// inner transport and every completion comes back as the inner transport
// reported it (the transport conformance suite runs against it).
//
// Faults are rules (fault_spec.h) and hooks (fault_injector.h), set
// through faults() at any time or from a spec string when the transport is
// created. What each action does to each operation:
//
//   READ (each ReadOp of a posted list)
//     drop     not posted: its destination is not written and its
//              completion never comes (a wait for it runs into its
//              timeout). The other READs of the list are posted.
//     delay    its completion (or, for an unsignaled READ, that of the next
//              signaled READ, which covers it) is held back for the
//              duration after the inner transport reported it.
//     corrupt  the bytes [at, at + bytes) of its destination (clamped to
//              its length) are flipped (XOR 0xff) when its completion (or
//              the covering one) is reported.
//     fail     not posted; it completes with UNAVAILABLE ("injected"), the
//              READs after it in the list complete flushed (UNAVAILABLE),
//              and the connection enters the error state (below).
//   WRITE (the WRITE of PostWriteSend)
//     drop     not performed; its SEND is posted alone.
//     corrupt  the peer receives the data with bytes [at, at + bytes)
//              flipped (it is sent from a corrupted copy; the caller's
//              buffer is untouched).
//     fail     it completes with UNAVAILABLE, its SEND completes flushed,
//              nothing reaches the peer, and the connection enters the
//              error state.
//   SEND (PostSend, and the SEND of PostWriteSend)
//     drop     nothing reaches the peer (for PostWriteSend: neither the
//              WRITE, posted with it in one doorbell) and its completion
//              never comes.
//     delay    its completion is held back for the duration.
//     corrupt  the peer receives the payload with bytes flipped (sent from
//              a corrupted copy).
//     fail     not posted (nor its WRITE); it completes with UNAVAILABLE and
//              the connection enters the error state.
//   RECV (a received message, when the inner transport reports it)
//     drop     the message consumed its receive buffer but is never
//              reported; the next message goes to the next buffer.
//     delay    its completion is held back for the duration.
//     corrupt  bytes of the message in the receive buffer are flipped.
//     fail     it is reported with UNAVAILABLE (byte_len 0) and the
//              connection enters the error state.
//   CONNECT (Transport::Connect)
//     drop     the request is lost: Connect returns DEADLINE_EXCEEDED once
//              its timeout has passed, having contacted nobody.
//     delay    Connect starts after the duration (which counts against its
//              timeout).
//     corrupt  the server's accept data arrives with bytes flipped
//              (peer_private_data).
//     fail     Connect returns UNAVAILABLE at once, as if nobody listened.
//   ACCEPT (a connection request handed out by Listener::Next)
//     drop     Accept returns OK but its reply never leaves: the peer's
//              Connect runs into its timeout, and this side's connection
//              accepts posts and completes nothing.
//     delay    Accept waits the duration before it accepts.
//     corrupt  the request's private data reads with bytes flipped
//              (peer_private_data).
//     fail     Accept rejects the request as transient (the peer's Connect
//              fails with UNAVAILABLE) and returns UNAVAILABLE.
//
// The error state (as an RC queue pair's): the connection disconnects the
// inner one, so the peer sees it fail too, every work request still
// outstanding completes (flushed, UNAVAILABLE), later posts fail with
// UNAVAILABLE, and Poll returns UNAVAILABLE once nothing is left to report.
// Completions held back by delay are reported when due, even then.
//
// Thread safety: FaultTransport is thread-safe, as Transport; a connection
// is used by one thread at a time, as Connection; faults() may be changed
// from any thread at any time.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/transport/fault/fault_injector.h"
#include "common/transport/fault/fault_spec.h"
#include "common/transport/transport.h"

namespace rkv::transport::fault {

class FaultTransport final : public Transport {
 public:
  // Wraps `inner` (not null), with no faults set.
  explicit FaultTransport(std::unique_ptr<Transport> inner);
  ~FaultTransport() override;

  // The rules and hooks. Shared with the connections and listeners this
  // transport made, which may outlive it.
  FaultInjector& faults() const { return *faults_; }
  Transport& inner() const { return *inner_; }

  // The inner transport's kind.
  Kind kind() const override;
  bool one_sided_uses_target_cpu() const override { return inner_->one_sided_uses_target_cpu(); }
  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t length, uint32_t access) override;
  StatusOr<std::unique_ptr<PollGroup>> NewPollGroup() override;
  StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override;
  using Transport::Connect;
  // Injected connect faults fail or delay the call before the inner
  // transport's Connect; a refusal from the server reaches `rejected` as
  // the inner transport reports it.
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address, std::span<const uint8_t> private_data,
                                                std::chrono::milliseconds timeout, Rejection* rejected) override;

 private:
  // Shared: a connection keeps its transport's inner transport (it
  // registers the corrupted copies it sends with it) and the rules.
  std::shared_ptr<Transport> inner_;
  std::shared_ptr<FaultInjector> faults_;
};

// Wraps `inner` with the rules of `spec` (ParseFaultSpec); INVALID_ARGUMENT
// for a bad spec.
StatusOr<std::unique_ptr<FaultTransport>> CreateFaultTransport(std::unique_ptr<Transport> inner,
                                                               std::string_view spec);

// The connection that `connection` wraps when it is a FaultTransport's,
// else nullptr: lets a test reach a transport's own connection type.
Connection* WrappedConnection(Connection& connection);

}  // namespace rkv::transport::fault
