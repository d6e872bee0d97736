#include "common/transport/verbs/verbs_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include <glog/logging.h>

#include "common/net_address.h"

namespace rkv::transport::verbs {
namespace {

// How long a server's Accept waits for its memory window binds (local
// work; it does not wait for the client's RTU). The client side is bounded
// by the timeout given to Connect.
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
// How long a Post waits for send queue room while the device completes
// earlier work requests (they complete without the caller's help).
constexpr auto kSendQueueWait = std::chrono::seconds(5);
constexpr int kPollBatch = 16;
// While spinning, Poll reads the clock and yields the CPU once every this
// many empty ibv_poll_cq rounds.
constexpr uint32_t kSpinRoundsPerYield = 8;

// rdma_cm private data limits on IB/RoCE (CM REQ/REP/REJ less rdma_cm's
// header); the transport interface promises exactly these.
constexpr size_t kMaxConnectData = kMaxConnectPrivateData;
constexpr size_t kMaxAcceptData = kMaxAcceptPrivateData;

// 7 is the largest value the CM carries: 7 transport retries before
// IBV_WC_RETRY_EXC_ERR, and for RNR "retry forever".
constexpr uint8_t kRetryCount = 7;
constexpr uint8_t kRnrRetryForever = 7;
constexpr uint8_t kMinRnrTimer = 12;  // IB encoding: 0.64 ms

// IB CM reject reason of a reject sent by the peer's application
// (rdma_reject); other reasons come from the CM itself, e.g. 8 (invalid
// service ID) when nothing listens on the port.
constexpr int kRejectConsumerDefined = 28;

int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 1, 1 << 30));
}

Status WcStatus(const ibv_wc& wc) {
  if (wc.status == IBV_WC_SUCCESS) return Status::Ok();
  std::string message = std::string("work request failed: ") + ibv_wc_status_str(wc.status) +
                        " (ibv_wc_status " + std::to_string(static_cast<int>(wc.status)) +
                        ", vendor_err " + std::to_string(wc.vendor_err) + ")";
  switch (wc.status) {
    case IBV_WC_REM_ACCESS_ERR:
      return PermissionDenied(std::move(message));
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Unavailable(std::move(message));
    default:
      return Internal(std::move(message));
  }
}

void RejectTransient(rdma_cm_id* id, const std::string& why) {
  const std::vector<uint8_t> reject = EncodeRejection({StatusCode::kUnavailable, why});
  rdma_reject(id, reject.data(), static_cast<uint8_t>(reject.size()));
}

std::string EventText(const rdma_cm_event* event) {
  std::string text = rdma_event_str(event->event);
  if (event->status != 0) {
    text += " (status " + std::to_string(event->status);
    if (event->status < 0) text += ": " + std::string(std::strerror(-event->status));
    text += ")";
  }
  return text;
}

std::vector<uint8_t> CopyPrivateData(const rdma_conn_param& param) {
  const auto* p = static_cast<const uint8_t*>(param.private_data);
  if (p == nullptr) return {};
  return std::vector<uint8_t>(p, p + param.private_data_len);
}

}  // namespace

int IbvAccess(uint32_t access) {
  int flags = 0;
  if ((access & kLocalWrite) != 0) flags |= IBV_ACCESS_LOCAL_WRITE;
  if ((access & kRemoteRead) != 0) flags |= IBV_ACCESS_REMOTE_READ;
  if ((access & kRemoteWrite) != 0) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  return flags;
}

VerbsConnection::VerbsConnection(const ConnectionConfig& config, CmId id)
    : config_(config), id_(std::move(id)), spin_window_(config.max_spin) {}

VerbsConnection::~VerbsConnection() {
  if (id_.get() != nullptr) {
    if (state_ == State::kPending) {
      // Neither accepted nor rejected: tell the client now rather than
      // letting its Connect time out.
      RejectTransient(id_.get(), "the server dropped the connection request");
    } else if (state_ == State::kConnected && !disconnect_sent_) {
      rdma_disconnect(id_.get());
    }
  }
  // Teardown order (verbs_resources.h): the memory windows, then the QP,
  // then the MRs, then the CQs and their completion channel, then the
  // cm_id, then its event channel. The shared_ptrs between the owners
  // enforce the rest; the windows-before-QP step is this code's job.
  pending_binds_.clear();
  windows_.clear();
  qp_ = QueuePair();
  private_regions_.clear();
  send_cq_.reset();
  recv_cq_.reset();
  comp_channel_.reset();
  id_ = CmId();
  channel_.reset();
}

// ------------------------------------------------------------------ creation

StatusOr<std::unique_ptr<VerbsConnection>> VerbsConnection::CreatePassive(
    const ConnectionConfig& config, CmId id, std::vector<uint8_t> peer_private_data,
    uint8_t peer_responder_resources, uint8_t peer_initiator_depth) {
  std::unique_ptr<VerbsConnection> conn(new VerbsConnection(config, std::move(id)));
  conn->peer_private_data_ = std::move(peer_private_data);
  conn->peer_address_ = FormatSockaddr(rdma_get_peer_addr(conn->id_.get()));
  // The request's values are already from this side's point of view: what
  // the client may have in flight towards us, and what it serves for us.
  conn->responder_resources_ = std::min(peer_responder_resources, config.responder_resources);
  conn->initiator_depth_ = std::min(peer_initiator_depth, config.initiator_depth);

  Status status = [&]() -> Status {
    const ibv_context* device = config.pd->device()->context();
    if (conn->id_->verbs != device) {
      return FailedPrecondition(
          "connection request from " + conn->peer_address_ + " arrived on device " +
          (conn->id_->verbs ? ibv_get_device_name(conn->id_->verbs->device) : "?") +
          " but this transport uses " + config.pd->device()->name() +
          " (listen on an address of that device or set Options::device)");
    }
    // Its own channel, so its events (DISCONNECTED, ...) reach this
    // connection and not the listener.
    RKV_ASSIGN_OR_RETURN(conn->channel_, EventChannel::Create());
    RKV_RETURN_IF_ERROR(conn->id_.MigrateTo(conn->channel_));
    RKV_RETURN_IF_ERROR(conn->CreateQueues());
    return conn->ModifyQp(IBV_QPS_INIT, "INIT");
  }();
  if (!status.ok()) {
    RejectTransient(conn->id_.get(), status.ToString());
    conn->state_ = State::kClosed;
    return status;
  }
  return conn;
}

StatusOr<std::unique_ptr<VerbsConnection>> VerbsConnection::Connect(
    const ConnectionConfig& config, const std::string& address,
    std::span<const uint8_t> private_data, std::chrono::milliseconds timeout) {
  if (private_data.size() > kMaxConnectData) {
    return InvalidArgument("connect private data is " + std::to_string(private_data.size()) +
                           " bytes; rdma_cm carries at most " + std::to_string(kMaxConnectData));
  }
  const auto deadline = Clock::now() + timeout;
  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  if (const int ret = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &resolved);
      ret != 0) {
    return Unavailable("connect to " + address + ": cannot resolve host: " + gai_strerror(ret));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolved_owner(resolved, &freeaddrinfo);

  RKV_ASSIGN_OR_RETURN(std::shared_ptr<EventChannel> channel, EventChannel::Create());
  RKV_ASSIGN_OR_RETURN(CmId id, CmId::Create(channel));
  std::unique_ptr<VerbsConnection> conn(new VerbsConnection(config, std::move(id)));
  conn->channel_ = std::move(channel);
  conn->state_ = State::kClosed;  // nothing to answer until connected
  conn->peer_address_ = address;
  conn->responder_resources_ = config.responder_resources;
  conn->initiator_depth_ = config.initiator_depth;
  rdma_cm_id* cm = conn->id_.get();
  const std::string where = "connect to " + address;

  // Waits for `want`; REJECTED is returned too, for the caller to read.
  auto expect = [&](rdma_cm_event_type want, const char* step) -> StatusOr<CmEvent> {
    while (true) {
      auto event = WaitCmEvent(*conn->channel_, deadline);
      if (!event.ok()) return event.status().WithContext(where + " (" + step + ")");
      if ((*event)->event == want || (*event)->event == RDMA_CM_EVENT_REJECTED) return event;
      switch ((*event)->event) {
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
          return Unavailable(where + " (" + step + "): " + EventText(event->get()));
        default:
          LOG(INFO) << where << ": ignoring rdma_cm event " << EventText(event->get());
      }
    }
  };

  if (rdma_resolve_addr(cm, nullptr, resolved->ai_addr, MsLeft(deadline)) != 0) {
    return VerbsError(where + ": rdma_resolve_addr", errno);
  }
  {
    RKV_ASSIGN_OR_RETURN(CmEvent event, expect(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving address"));
    if (event->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
      return Unavailable(where + " (resolving address): " + EventText(event.get()));
    }
  }
  if (cm->verbs != config.pd->device()->context()) {
    return FailedPrecondition(
        where + ": the route leaves through device " +
        (cm->verbs ? ibv_get_device_name(cm->verbs->device) : std::string("?")) +
        " but this transport uses " + config.pd->device()->name() +
        " (set Options::device to the device that reaches the server)");
  }
  if (rdma_resolve_route(cm, MsLeft(deadline)) != 0) {
    return VerbsError(where + ": rdma_resolve_route", errno);
  }
  {
    RKV_ASSIGN_OR_RETURN(CmEvent event, expect(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving route"));
    if (event->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
      return Unavailable(where + " (resolving route): " + EventText(event.get()));
    }
  }

  RKV_RETURN_IF_ERROR(conn->CreateQueues());
  RKV_RETURN_IF_ERROR(conn->ModifyQp(IBV_QPS_INIT, "INIT"));

  rdma_conn_param param{};
  param.private_data = private_data.empty() ? nullptr : private_data.data();
  param.private_data_len = static_cast<uint8_t>(private_data.size());
  param.responder_resources = conn->responder_resources_;
  param.initiator_depth = conn->initiator_depth_;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = kRnrRetryForever;
  param.qp_num = conn->qp_.get()->qp_num;
  if (rdma_connect(cm, &param) != 0) return VerbsError(where + ": rdma_connect", errno);

  RKV_ASSIGN_OR_RETURN(CmEvent event, expect(RDMA_CM_EVENT_CONNECT_RESPONSE, "handshake"));
  if (event->event == RDMA_CM_EVENT_REJECTED) {
    const auto& c = event->param.conn;
    if (event->status == kRejectConsumerDefined) {
      // UNAVAILABLE when the server's transport failed while setting the
      // connection up (RejectTransient): transient, so worth retrying.
      return RejectedStatus(where, DecodeRejection(std::span<const uint8_t>(
                                       static_cast<const uint8_t*>(c.private_data), c.private_data_len)));
    }
    return Unavailable(where + ": connection refused (CM reject reason " +
                       std::to_string(event->status) + "; is a server listening there?)");
  }
  conn->peer_private_data_ = CopyPrivateData(event->param.conn);
  event.Ack();

  Status status = conn->ModifyQp(IBV_QPS_RTR, "RTR");
  if (status.ok()) status = conn->ModifyQp(IBV_QPS_RTS, "RTS");
  if (!status.ok()) {
    rdma_reject(cm, nullptr, 0);
    return status.WithContext(where);
  }
  if (rdma_establish(cm) != 0) return VerbsError(where + ": rdma_establish", errno);
  conn->state_ = State::kConnected;
  return conn;
}

Status VerbsConnection::CreateQueues() {
  const std::shared_ptr<Device>& device = config_.pd->device();
  send_depth_ = config_.send_depth;
  recv_depth_ = config_.recv_depth;
  RKV_ASSIGN_OR_RETURN(comp_channel_, CompletionChannel::Create(device));
  RKV_ASSIGN_OR_RETURN(send_cq_,
                       CompletionQueue::Create(comp_channel_, static_cast<int>(send_depth_)));
  RKV_ASSIGN_OR_RETURN(recv_cq_,
                       CompletionQueue::Create(comp_channel_, static_cast<int>(recv_depth_)));
  ibv_qp_cap cap{};
  cap.max_send_wr = send_depth_;
  cap.max_recv_wr = recv_depth_;
  cap.max_send_sge = 1;
  cap.max_recv_sge = 1;
  cap.max_inline_data = config_.max_inline_wish;
  RKV_ASSIGN_OR_RETURN(qp_, QueuePair::Create(config_.pd, send_cq_, recv_cq_, cap));
  max_inline_ = qp_.cap().max_inline_data;
  signal_interval_ = send_depth_ / 2;
  // Powers of two: the rings are indexed with a mask, not a division.
  send_ring_.assign(std::bit_ceil(send_depth_), SendEntry{});
  send_wrs_.assign(send_depth_, ibv_send_wr{});
  send_sges_.assign(send_depth_, ibv_sge{});
  // Room for every completion the queues can have outstanding at once.
  pending_.assign(std::bit_ceil(size_t{send_depth_} + recv_depth_), Completion{});
  pending_head_ = 0;
  pending_count_ = 0;
  return Status::Ok();
}

Status VerbsConnection::ModifyQp(ibv_qp_state state, const char* what) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  if (rdma_init_qp_attr(id_.get(), &attr, &mask) != 0) {
    return VerbsError(std::string("rdma_init_qp_attr(") + what + ")", errno);
  }
  switch (state) {
    case IBV_QPS_INIT:
      // Remote rights are enforced per MR / memory window; the QP allows
      // both kinds of one-sided access.
      attr.qp_access_flags =
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
      mask |= IBV_QP_ACCESS_FLAGS;
      break;
    case IBV_QPS_RTR:
      // ibv_mtu values are ordered (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5).
      attr.path_mtu = std::min(attr.path_mtu, config_.active_mtu);
      if (config_.gid_index >= 0 && attr.ah_attr.is_global) {
        attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(config_.gid_index);
      }
      attr.max_dest_rd_atomic = std::min(attr.max_dest_rd_atomic, responder_resources_);
      // The RNR NAK delay this side asks a sender to wait when no receive
      // is posted. The CM leaves it 0, which encodes the longest delay
      // (655 ms); 12 encodes 0.64 ms.
      attr.min_rnr_timer = kMinRnrTimer;
      mask |= IBV_QP_MIN_RNR_TIMER;
      break;
    case IBV_QPS_RTS:
      attr.max_rd_atomic = std::min(attr.max_rd_atomic, initiator_depth_);
      break;
    default:
      break;
  }
  if (const int ret = ibv_modify_qp(qp_.get(), &attr, mask); ret != 0) {
    return VerbsError(std::string("ibv_modify_qp(") + what + ")", ret);
  }
  return Status::Ok();
}

// ------------------------------------------------------------------ handshake

StatusOr<MemoryRegion*> VerbsConnection::RegisterPrivate(void* addr, size_t length,
                                                         uint32_t access) {
  if (state_ != State::kPending) {
    return FailedPrecondition("RegisterPrivate is only allowed before Accept");
  }
  if (addr == nullptr || length == 0) return InvalidArgument("RegisterPrivate of an empty range");
  if ((access & ~uint32_t{kLocalWrite | kRemoteRead | kRemoteWrite}) != 0) {
    return InvalidArgument("unknown access bits " + std::to_string(access));
  }
  auto* data = static_cast<uint8_t*>(addr);
  const int remote = IbvAccess(access) & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  std::unique_ptr<VerbsRegion> region;
  if (config_.use_memory_windows && remote != 0) {
    // The MR itself grants no remote right; the window bound on this QP
    // does (LOCAL_WRITE is required to bind a window with REMOTE_WRITE).
    RKV_ASSIGN_OR_RETURN(
        std::shared_ptr<MemoryRegistration> mr,
        MemoryRegistration::Create(config_.pd, addr, length,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
    RKV_ASSIGN_OR_RETURN(MemoryWindow window, MemoryWindow::Create(config_.pd));
    // A type 2 window takes the rkey its bind names: same index, new key
    // byte. It is announced (Accept's reply) before the bind runs, which
    // Accept completes before it replies.
    const uint32_t rkey = ibv_inc_rkey(window.get()->rkey);
    windows_.push_back(std::move(window));
    pending_binds_.push_back(PendingBind{windows_.size() - 1, mr, data, length, remote, rkey});
    region = std::make_unique<VerbsRegion>(std::move(mr), data, length, rkey);
  } else {
    RKV_ASSIGN_OR_RETURN(std::shared_ptr<MemoryRegistration> mr,
                         MemoryRegistration::Create(config_.pd, addr, length, IbvAccess(access)));
    const uint32_t rkey = mr->get()->rkey;
    region = std::make_unique<VerbsRegion>(std::move(mr), data, length, rkey);
  }
  private_regions_.push_back(std::move(region));
  return private_regions_.back().get();
}

Status VerbsConnection::BindWindows(Clock::time_point deadline) {
  for (const PendingBind& bind : pending_binds_) {
    RKV_RETURN_IF_ERROR(ReserveSend(1));
    ibv_send_wr& wr = send_wrs_[0];
    wr = ibv_send_wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = windows_[bind.window].get();
    wr.bind_mw.rkey = bind.rkey;
    wr.bind_mw.bind_info.mr = bind.mr->get();
    wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(bind.addr);
    wr.bind_mw.bind_info.length = bind.length;
    wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(bind.access);
    SendEntry entry;
    entry.internal = true;
    AddSend(0, entry, /*want_signal=*/true, /*last=*/true);
    RKV_RETURN_IF_ERROR(PostSendChain(1, "ibv_post_send(BIND_MW)"));
    windows_[bind.window].SetBoundRegion(bind.mr);
    const uint64_t target = next_seq_;
    while (retired_seq_ < target) {
      RKV_ASSIGN_OR_RETURN(int n, DrainCqs());
      if (n > 0) continue;
      if (Clock::now() >= deadline) return DeadlineExceeded("memory window bind did not complete");
      RKV_RETURN_IF_ERROR(WaitEvents(deadline));
    }
    if (!bind_status_.ok()) return bind_status_.WithContext("binding a memory window");
  }
  pending_binds_.clear();
  return Status::Ok();
}

Status VerbsConnection::Accept(std::span<const uint8_t> reply) {
  if (state_ != State::kPending) return FailedPrecondition("Accept: the connection is not pending");
  if (reply.size() > kMaxAcceptData) {
    return InvalidArgument("accept private data is " + std::to_string(reply.size()) +
                           " bytes; rdma_cm carries at most " + std::to_string(kMaxAcceptData));
  }
  const auto deadline = Clock::now() + kHandshakeTimeout;
  const std::string where = "accept " + peer_address_;
  // RTS before the reply leaves, so the memory windows can be bound first.
  Status status = ModifyQp(IBV_QPS_RTR, "RTR");
  if (status.ok()) status = ModifyQp(IBV_QPS_RTS, "RTS");
  if (status.ok()) status = BindWindows(deadline);
  if (!status.ok()) {
    RejectTransient(id_.get(), status.ToString());
    state_ = State::kClosed;
    return status.WithContext(where);
  }

  rdma_conn_param param{};
  param.private_data = reply.empty() ? nullptr : reply.data();
  param.private_data_len = static_cast<uint8_t>(reply.size());
  param.responder_resources = responder_resources_;
  param.initiator_depth = initiator_depth_;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = kRnrRetryForever;
  param.qp_num = qp_.get()->qp_num;
  if (rdma_accept(id_.get(), &param) != 0) {
    const Status error = VerbsError(where + ": rdma_accept", errno);
    state_ = State::kClosed;
    return error;
  }
  // No wait for the client's RTU (RDMA_CM_EVENT_ESTABLISHED): the QP is in
  // RTS already, and a client that vanishes mid-handshake would otherwise
  // hold the caller (the server's accept loop) until the CM gives up. Its
  // CONNECT_ERROR / UNREACHABLE arrives later and breaks the connection on
  // a Poll (HandleCmEvents), which then reclaims it like any broken one.
  state_ = State::kConnected;
  return Status::Ok();
}

void VerbsConnection::Reject(const Rejection& why) {
  if (state_ != State::kPending) {
    LOG(WARNING) << "Reject of " << peer_address_ << ": the connection is not pending";
    return;
  }
  const std::vector<uint8_t> reply = EncodeRejection(why);
  static_assert(kMaxRejectionBytes <= 148, "rdma_reject's private data limit on IB/RoCE");
  if (rdma_reject(id_.get(), reply.data(), static_cast<uint8_t>(reply.size())) != 0) {
    LOG(WARNING) << VerbsError("rdma_reject(" + peer_address_ + ")", errno);
  }
  state_ = State::kRejected;
}

void VerbsConnection::Disconnect() {
  if (state_ == State::kPending) {
    Reject({StatusCode::kUnavailable, "the server closed the connection request"});
    return;
  }
  if (state_ != State::kConnected || local_disconnected_) return;
  local_disconnected_ = true;
  if (!disconnect_sent_) {
    disconnect_sent_ = true;
    if (rdma_disconnect(id_.get()) != 0) {
      VLOG(1) << VerbsError("rdma_disconnect(" + peer_address_ + ")", errno);
    }
  }
  MoveQpToError();
}

// ------------------------------------------------------------------ data path

inline bool VerbsConnection::Broken() const {
  return failed_ || remote_disconnected_ || local_disconnected_;
}

Status VerbsConnection::BrokenStatus() const {
  if (remote_disconnected_) return Unavailable("peer " + peer_address_ + " disconnected");
  if (local_disconnected_) return Unavailable("connection to " + peer_address_ + " was disconnected");
  return Unavailable("connection to " + peer_address_ +
                     " failed: a work request completed in error");
}

inline Status VerbsConnection::CheckSendable() const {
  if (state_ == State::kConnected && !Broken()) [[likely]] return Status::Ok();
  return NotSendable();
}

Status VerbsConnection::NotSendable() const {
  if (state_ != State::kConnected) return FailedPrecondition("the connection is not established");
  return BrokenStatus();
}

inline Status VerbsConnection::CheckLocal(const LocalBuf& buf, const char* what) const {
  if (buf.mr != nullptr && buf.offset <= buf.mr->size() && buf.length <= buf.mr->size() - buf.offset)
      [[likely]] {
    return Status::Ok();
  }
  return BadLocal(buf, what);
}

Status VerbsConnection::BadLocal(const LocalBuf& buf, const char* what) {
  if (buf.mr == nullptr) return InvalidArgument(std::string(what) + ": no memory region");
  return InvalidArgument(std::string(what) + ": [" + std::to_string(buf.offset) + ", +" +
                         std::to_string(buf.length) + ") is outside its region of " +
                         std::to_string(buf.mr->size()) + " bytes");
}

inline Status VerbsConnection::ReserveSend(uint32_t n) {
  // The common case (room) reads no clock.
  if (n <= send_depth_ && send_depth_ - SendOutstanding() >= n) [[likely]] return Status::Ok();
  return WaitForSendRoom(n);
}

Status VerbsConnection::WaitForSendRoom(uint32_t n) {
  if (n > send_depth_) {
    return InvalidArgument(std::to_string(n) + " work requests exceed the send queue depth " +
                           std::to_string(send_depth_));
  }
  Clock::time_point deadline{};
  while (send_depth_ - SendOutstanding() < n) {
    RKV_ASSIGN_OR_RETURN(int polled, DrainCqs());
    if (polled > 0) continue;
    if (Broken()) return BrokenStatus();
    if (deadline == Clock::time_point{}) deadline = Clock::now() + kSendQueueWait;
    if (Clock::now() >= deadline) {
      return ResourceExhausted("send queue full: " + std::to_string(SendOutstanding()) + " of " +
                               std::to_string(send_depth_) + " work requests outstanding");
    }
    RKV_RETURN_IF_ERROR(WaitEvents(deadline));
  }
  return Status::Ok();
}

inline void VerbsConnection::AddSend(uint32_t index, const SendEntry& entry, bool want_signal,
                                     bool last) {
  ibv_send_wr& wr = send_wrs_[index];
  // The last WR of a post is signaled when the unsignaled run would
  // otherwise reach the signal interval (see the header).
  const bool signaled = want_signal || (last && unsignaled_run_ + 1 >= signal_interval_);
  const uint64_t seq = next_seq_++;
  send_ring_[seq & (send_ring_.size() - 1)] = entry;
  wr.wr_id = seq;
  if (signaled) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_run_ = 0;
  } else {
    ++unsignaled_run_;
  }
}

inline Status VerbsConnection::PostSendChain(uint32_t count, const char* what) {
  for (uint32_t i = 0; i + 1 < count; ++i) send_wrs_[i].next = &send_wrs_[i + 1];
  send_wrs_[count - 1].next = nullptr;
  ibv_send_wr* bad = nullptr;
  if (const int ret = ibv_post_send(qp_.get(), send_wrs_.data(), &bad); ret != 0) [[unlikely]] {
    return PostFailed(count, bad, ret, what);
  }
  return Status::Ok();
}

Status VerbsConnection::PostFailed(uint32_t count, const ibv_send_wr* bad, int ret, const char* what) {
  // WRs before `bad` were posted and will complete (flushed, once the QP
  // is in error); the rest were not.
  const uint32_t posted = bad == nullptr ? 0 : static_cast<uint32_t>(bad - send_wrs_.data());
  next_seq_ -= count - posted;
  failed_ = true;
  MoveQpToError();
  return VerbsError(what, ret);
}

Status VerbsConnection::PostReads(std::span<const ReadOp> ops) { return PostReadList(ops); }

inline Status VerbsConnection::PostReadList(std::span<const ReadOp> ops) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  if (ops.empty()) return Status::Ok();
  for (const ReadOp& op : ops) RKV_RETURN_IF_ERROR(CheckLocal(op.local, "READ destination"));
  const auto n = static_cast<uint32_t>(std::min<size_t>(ops.size(), UINT32_MAX));
  if (n != ops.size()) return InvalidArgument("too many READs in one post");
  RKV_RETURN_IF_ERROR(ReserveSend(n));
  for (uint32_t i = 0; i < n; ++i) {
    const ReadOp& op = ops[i];
    ibv_sge& sge = send_sges_[i];
    sge.addr = reinterpret_cast<uint64_t>(op.local.mr->data() + op.local.offset);
    sge.length = op.local.length;
    sge.lkey = op.local.mr->lkey();
    ibv_send_wr& wr = send_wrs_[i];
    wr = ibv_send_wr{};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = op.remote.addr;
    wr.wr.rdma.rkey = op.remote.rkey;
    SendEntry entry;
    entry.user_wr_id = op.wr_id;
    entry.op = OpType::kRead;
    entry.report_success = op.signaled;
    AddSend(i, entry, op.signaled, i + 1 == n);
  }
  return PostSendChain(n, "ibv_post_send(RDMA_READ)");
}

Status VerbsConnection::PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                                         std::vector<Completion>* others) {
  RKV_RETURN_IF_ERROR(CheckReadsToWaitFor(ops));
  RKV_RETURN_IF_ERROR(PostReadList(ops));
  if (pending_count_ == 0) {
    const uint64_t last_seq = next_seq_ - 1;
    ibv_wc wc;
    const int n = ibv_poll_cq(send_cq_->get(), 1, &wc);
    if (n == 1 && wc.wr_id == last_seq && wc.status == IBV_WC_SUCCESS) {
      retired_seq_ = last_seq + 1;  // and every WR before it: in order
      return Status::Ok();
    }
    if (n == 1) OnSendCompletion(wc);
  }
  return WaitForRead(ops.back().wr_id, timeout, others);
}

Status VerbsConnection::PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send,
                                      uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  RKV_RETURN_IF_ERROR(CheckLocal(write_src, "WRITE source"));
  RKV_RETURN_IF_ERROR(CheckLocal(send, "SEND source"));
  RKV_RETURN_IF_ERROR(ReserveSend(kWrsPerWriteSend));

  ibv_sge& wsge = send_sges_[0];
  wsge.addr = reinterpret_cast<uint64_t>(write_src.mr->data() + write_src.offset);
  wsge.length = write_src.length;
  wsge.lkey = write_src.mr->lkey();
  ibv_send_wr& write = send_wrs_[0];
  write = ibv_send_wr{};
  write.opcode = IBV_WR_RDMA_WRITE;
  write.sg_list = &wsge;
  write.num_sge = 1;
  write.wr.rdma.remote_addr = write_dst.addr;
  write.wr.rdma.rkey = write_dst.rkey;
  SendEntry write_entry;
  write_entry.user_wr_id = wr_id;
  write_entry.op = OpType::kWrite;
  AddSend(0, write_entry, /*want_signal=*/false, /*last=*/false);

  AddSignaledSend(1, send, wr_id);
  return PostSendChain(kWrsPerWriteSend, "ibv_post_send(RDMA_WRITE+SEND)");
}

void VerbsConnection::AddSignaledSend(uint32_t index, LocalBuf send, uint64_t wr_id) {
  ibv_sge& sge = send_sges_[index];
  sge.addr = reinterpret_cast<uint64_t>(send.mr->data() + send.offset);
  sge.length = send.length;
  sge.lkey = send.mr->lkey();
  ibv_send_wr& wr = send_wrs_[index];
  wr = ibv_send_wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  // Inline only what the QP said it can carry (max_inline_data, read back
  // after creation); the buffer may be reused as soon as the post returns.
  if (send.length <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  SendEntry entry;
  entry.user_wr_id = wr_id;
  entry.op = OpType::kSend;
  entry.report_success = true;
  AddSend(index, entry, /*want_signal=*/true, /*last=*/true);
}

Status VerbsConnection::PostSend(LocalBuf send, uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  RKV_RETURN_IF_ERROR(CheckLocal(send, "SEND source"));
  RKV_RETURN_IF_ERROR(ReserveSend(1));
  AddSignaledSend(0, send, wr_id);
  return PostSendChain(1, "ibv_post_send(SEND)");
}

Status VerbsConnection::PostRecv(LocalBuf buf, uint64_t wr_id) {
  if (state_ != State::kPending && state_ != State::kConnected) {
    return FailedPrecondition("PostRecv on a connection that is neither pending nor established");
  }
  if (Broken()) return BrokenStatus();
  RKV_RETURN_IF_ERROR(CheckLocal(buf, "receive buffer"));
  if (recv_outstanding_ >= recv_depth_) {
    return ResourceExhausted("receive queue full: " + std::to_string(recv_outstanding_) +
                             " receives posted");
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(buf.mr->data() + buf.offset);
  sge.length = buf.length;
  sge.lkey = buf.mr->lkey();
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (const int ret = ibv_post_recv(qp_.get(), &wr, &bad); ret != 0) {
    return VerbsError("ibv_post_recv", ret);
  }
  ++recv_outstanding_;
  return Status::Ok();
}

// ------------------------------------------------------------------ completions

void VerbsConnection::OnSendCompletion(const ibv_wc& wc) {
  const uint64_t seq = wc.wr_id;
  if (seq < retired_seq_ || seq >= next_seq_) {
    LOG(ERROR) << "send completion for unknown sequence " << seq << " on " << peer_address_;
    return;
  }
  const SendEntry& entry = send_ring_[seq & (send_ring_.size() - 1)];
  Status status = WcStatus(wc);
  if (!status.ok()) {
    // The QP is in the error state now; every later WR flushes.
    failed_ = true;
    qp_in_error_ = true;
  }
  if (entry.internal) {
    if (!status.ok()) bind_status_ = status;
  } else if (!status.ok() || entry.report_success) {
    Completion c;
    c.wr_id = entry.user_wr_id;
    c.op = entry.op;
    c.status = std::move(status);
    PushPending(std::move(c));
  }
  // An RC send queue completes in order: every WR up to `seq` is done.
  retired_seq_ = seq + 1;
}

void VerbsConnection::OnRecvCompletion(const ibv_wc& wc) {
  if (recv_outstanding_ > 0) --recv_outstanding_;
  Completion c;
  c.wr_id = wc.wr_id;
  c.op = OpType::kRecv;
  c.status = WcStatus(wc);
  if (c.status.ok()) {
    c.byte_len = wc.byte_len;
  } else {
    failed_ = true;
    qp_in_error_ = true;
  }
  PushPending(std::move(c));
}

StatusOr<int> VerbsConnection::DrainCqs() {
  ibv_wc wcs[kPollBatch];
  int total = 0;
  for (const bool send : {true, false}) {
    ibv_cq* cq = send ? send_cq_->get() : recv_cq_->get();
    while (true) {
      const int n = ibv_poll_cq(cq, kPollBatch, wcs);
      if (n < 0) return Internal("ibv_poll_cq failed (" + std::to_string(n) + ")");
      for (int i = 0; i < n; ++i) {
        if (send) {
          OnSendCompletion(wcs[i]);
        } else {
          OnRecvCompletion(wcs[i]);
        }
      }
      total += n;
      if (n < kPollBatch) break;
    }
  }
  return total;
}

void VerbsConnection::MoveQpToError() {
  if (qp_in_error_ || qp_.get() == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (const int ret = ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE); ret != 0) {
    LOG(WARNING) << VerbsError("ibv_modify_qp(ERR)", ret);
    return;
  }
  qp_in_error_ = true;
}

Status VerbsConnection::HandleCmEvents() {
  while (true) {
    RKV_ASSIGN_OR_RETURN(CmEvent event, TryGetCmEvent(*channel_));
    if (!event) return Status::Ok();
    switch (event->event) {
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        remote_disconnected_ = true;
        if (!disconnect_sent_ && state_ == State::kConnected) {
          // Answer the peer's disconnect request so it need not time out.
          disconnect_sent_ = true;
          rdma_disconnect(id_.get());
        }
        // Flushes every outstanding WR, so each one completes.
        MoveQpToError();
        break;
      case RDMA_CM_EVENT_CONNECT_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_REJECTED:
        // The handshake Accept answered never completed: the peer is gone.
        LOG(INFO) << peer_address_ << ": handshake not completed: " << EventText(event.get());
        remote_disconnected_ = true;
        MoveQpToError();
        break;
      case RDMA_CM_EVENT_ESTABLISHED:
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
      default:
        LOG(INFO) << peer_address_ << ": ignoring rdma_cm event " << EventText(event.get());
    }
  }
}

Status VerbsConnection::WaitEvents(Clock::time_point deadline) {
  for (ibv_cq* cq : {send_cq_->get(), recv_cq_->get()}) {
    if (const int ret = ibv_req_notify_cq(cq, 0); ret != 0) {
      return VerbsError("ibv_req_notify_cq", ret);
    }
  }
  // A completion that arrived before the CQ was armed raises no event:
  // look once more before sleeping.
  RKV_ASSIGN_OR_RETURN(int polled, DrainCqs());
  if (polled > 0) return Status::Ok();
  const auto now = Clock::now();
  const auto left =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(deadline - now, Clock::duration::zero()));
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  pollfd fds[2] = {{comp_channel_->fd(), POLLIN, 0}, {channel_->fd(), POLLIN, 0}};
  if (ppoll(fds, 2, &ts, nullptr) < 0 && errno != EINTR) {
    return VerbsError("ppoll(completion channel)", errno);
  }
  if ((fds[0].revents & POLLIN) != 0) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    // The fd is non-blocking: read every queued event, ack each at once
    // (ibv_destroy_cq waits for unacked events).
    while (ibv_get_cq_event(comp_channel_->get(), &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
    }
  }
  if ((fds[1].revents & POLLIN) != 0) RKV_RETURN_IF_ERROR(HandleCmEvents());
  return Status::Ok();
}

void VerbsConnection::PushPending(Completion c) {
  if (pending_count_ == pending_.size()) {
    // Full: double, keeping the order (oldest first). Rare: only a caller
    // that posts without polling gets here.
    std::vector<Completion> bigger(std::max<size_t>(2 * pending_.size(), 8));
    for (size_t i = 0; i < pending_count_; ++i) {
      bigger[i] = std::move(pending_[(pending_head_ + i) & (pending_.size() - 1)]);
    }
    pending_ = std::move(bigger);
    pending_head_ = 0;
  }
  pending_[(pending_head_ + pending_count_) & (pending_.size() - 1)] = std::move(c);
  ++pending_count_;
}

size_t VerbsConnection::TakePending(std::span<Completion> out) {
  const size_t n = std::min(out.size(), pending_count_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::move(pending_[pending_head_]);
    pending_head_ = (pending_head_ + 1) & (pending_.size() - 1);
  }
  pending_count_ -= n;
  return n;
}

Status VerbsConnection::Spin(Clock::time_point until) {
  uint32_t rounds = 0;
  while (pending_count_ == 0) {
    RKV_ASSIGN_OR_RETURN(int polled, DrainCqs());
    if (polled > 0) continue;  // e.g. only internal completions: go on
    if (++rounds % kSpinRoundsPerYield == 0) {
      if (Clock::now() >= until) break;
      // Lets another runnable thread on this CPU go first (on a loopback
      // device that may be the peer whose reply this Poll waits for).
      sched_yield();
    }
  }
  return Status::Ok();
}

void VerbsConnection::AdaptSpin(Clock::duration waited) {
  const Clock::duration max = config_.max_spin;
  if (max <= Clock::duration::zero() || waited <= spin_window_) return;
  if (waited <= max) {
    // Spinning a little longer would have caught it: grow.
    spin_window_ = std::min<Clock::duration>(
        max, std::max<Clock::duration>(2 * spin_window_, kMinSpinWindow));
  } else {
    // Longer than any spin: spin less, down to not at all.
    spin_window_ /= 2;
    if (spin_window_ < kMinSpinWindow) spin_window_ = Clock::duration::zero();
  }
}

StatusOr<size_t> VerbsConnection::Poll(std::span<Completion> out,
                                       std::chrono::microseconds timeout) {
  if (out.empty()) return size_t{0};
  if (state_ == State::kRejected || state_ == State::kClosed || qp_.get() == nullptr) {
    return FailedPrecondition("Poll on a connection that was rejected or never established");
  }
  // Fast path: what is queued or already in the CQs, no clock, no syscall.
  if (pending_count_ == 0) RKV_RETURN_IF_ERROR(DrainCqs().status());
  if (pending_count_ > 0) return TakePending(out);

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  if (!Broken() && spin_window_ > Clock::duration::zero() && timeout.count() > 0) {
    RKV_RETURN_IF_ERROR(Spin(std::min(deadline, start + spin_window_)));
    // Caught while spinning: the window is right, nothing to adapt (and no
    // clock read: under emulation each costs about a microsecond).
    if (pending_count_ > 0) return TakePending(out);
  }
  while (true) {
    // Disconnects arrive as cm events; they are read here, off the fast
    // path: a connection whose peer went away stops completing, so its
    // next Poll that finds nothing ready gets here.
    RKV_RETURN_IF_ERROR(HandleCmEvents());
    RKV_RETURN_IF_ERROR(DrainCqs().status());
    if (pending_count_ > 0) break;
    if (Broken() && SendOutstanding() == 0 && recv_outstanding_ == 0) return BrokenStatus();
    if (Clock::now() >= deadline) {
      // Nothing came: that says something only when the wait outlasted
      // any spin (then spin less).
      if (timeout > config_.max_spin) AdaptSpin(Clock::now() - start);
      if (Broken()) return BrokenStatus();
      return size_t{0};
    }
    RKV_RETURN_IF_ERROR(WaitEvents(deadline));
    if (pending_count_ > 0) break;
  }
  AdaptSpin(Clock::now() - start);
  return TakePending(out);
}

}  // namespace rkv::transport::verbs
