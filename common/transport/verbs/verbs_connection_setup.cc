// VerbsConnection, setup and teardown: creating both sides of a connection
// (CreatePassive, Connect), its queues and QP state changes, private memory
// and its window binds, the server's Accept / Reject, Disconnect, the
// destructor's teardown order, and the rdma_cm events of an established
// connection (HandleCmEvents). The per-operation code is in
// verbs_connection_datapath.cc; the class and its design notes are in
// verbs_connection.h.
#include "common/transport/verbs/verbs_connection.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include <glog/logging.h>

#include "common/net_address.h"
#include "common/transport/verbs/verbs_poll_group.h"

namespace rkv::transport::verbs {
namespace {

// How long a server's Accept waits for its memory window binds (local
// work; it does not wait for the client's RTU). The client side is bounded
// by the timeout given to Connect.
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
// How often a group member's Accept looks at the group's CQs for its
// memory window binds (it cannot sleep on the group's completion channel:
// the group's thread owns it).
constexpr auto kSetupPollInterval = std::chrono::microseconds(50);

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
  // A member leaves its group before anything else: from here on the group
  // neither reports it nor feeds it, and no longer watches its cm channel.
  if (group_joined_) group_->Leave(this, qp_.get()->qp_num, channel_->fd());
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
  // then (a group member) its share of the group's CQs, then the MRs, then
  // the CQs and their completion channel, then the cm_id, then its event
  // channel. The shared_ptrs between the owners enforce the rest; the
  // windows-before-QP step is this code's job.
  pending_binds_.clear();
  windows_.clear();
  qp_ = QueuePair();
  if (group_reserved_) group_->Release(send_depth_, recv_depth_);
  private_regions_.clear();
  send_cq_.reset();
  recv_cq_.reset();
  comp_channel_.reset();
  id_ = CmId();
  channel_.reset();
  group_.reset();
}

// ------------------------------------------------------------------ creation

StatusOr<std::unique_ptr<VerbsConnection>> VerbsConnection::CreatePassive(
    const ConnectionConfig& config, std::shared_ptr<PollGroupCore> group, CmId id,
    std::vector<uint8_t> peer_private_data, uint8_t peer_responder_resources,
    uint8_t peer_initiator_depth) {
  std::unique_ptr<VerbsConnection> conn(new VerbsConnection(config, std::move(id)));
  conn->group_ = std::move(group);
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
    std::span<const uint8_t> private_data, std::chrono::milliseconds timeout, Rejection* rejected) {
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
      const std::span<const uint8_t> data(static_cast<const uint8_t*>(c.private_data),
                                          c.private_data ? c.private_data_len : 0);
      if (std::all_of(data.begin(), data.end(), [](uint8_t b) { return b == 0; })) {
        // No server sent this: every reject of this transport carries an
        // encoded Rejection. The server's kernel rejects so, with no data,
        // a request whose cm_id is destroyed unanswered: the server process
        // died (or closed its listener) with the request queued. Transient,
        // as when nothing listens: its replacement may be listening soon.
        return Unavailable(where + ": connection refused (the server went away before answering)");
      }
      // UNAVAILABLE when the server's transport failed while setting the
      // connection up (RejectTransient): transient, so worth retrying.
      Rejection why = DecodeRejection(data);
      Status status = RejectedStatus(where, why);
      if (rejected != nullptr) *rejected = std::move(why);
      return status;
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
  if (group_ != nullptr) {
    // Every WR of this QP may complete into the group's CQs: room first.
    RKV_RETURN_IF_ERROR(group_->Reserve(send_depth_, recv_depth_));
    group_reserved_ = true;
    send_cq_ = group_->send_cq();
    recv_cq_ = group_->recv_cq();
  } else {
    RKV_ASSIGN_OR_RETURN(comp_channel_, CompletionChannel::Create(device));
    RKV_ASSIGN_OR_RETURN(send_cq_,
                         CompletionQueue::Create(comp_channel_, static_cast<int>(send_depth_)));
    RKV_ASSIGN_OR_RETURN(recv_cq_,
                         CompletionQueue::Create(comp_channel_, static_cast<int>(recv_depth_)));
  }
  ibv_qp_cap cap{};
  cap.max_send_wr = send_depth_;
  cap.max_recv_wr = recv_depth_;
  cap.max_send_sge = kMaxReadPieces;  // a READ's scatter list (ReadOp::more)
  cap.max_recv_sge = 1;
  cap.max_inline_data = config_.max_inline_wish;
  RKV_ASSIGN_OR_RETURN(qp_, QueuePair::Create(config_.pd, send_cq_, recv_cq_, cap));
  max_inline_ = qp_.cap().max_inline_data;
  signal_interval_ = send_depth_ / 2;
  // Powers of two: the rings are indexed with a mask, not a division.
  send_ring_.assign(std::bit_ceil(send_depth_), SendEntry{});
  send_wrs_.assign(send_depth_, ibv_send_wr{});
  send_sges_.assign(size_t{send_depth_} * kMaxReadPieces, ibv_sge{});
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
      RKV_ASSIGN_OR_RETURN(int n, DrainSetupCompletions());
      if (n > 0) continue;
      if (Clock::now() >= deadline) return DeadlineExceeded("memory window bind did not complete");
      if (group_ != nullptr) {
        std::this_thread::sleep_for(kSetupPollInterval);
      } else {
        RKV_RETURN_IF_ERROR(WaitEvents(deadline));
      }
    }
    if (!bind_status_.ok()) return bind_status_.WithContext("binding a memory window");
  }
  pending_binds_.clear();
  return Status::Ok();
}

StatusOr<int> VerbsConnection::DrainSetupCompletions() {
  if (group_ == nullptr) return DrainCqs();
  std::vector<GroupCompletion> mine;
  RKV_RETURN_IF_ERROR(group_->PollSetup(qp_.get()->qp_num, &mine));
  for (const GroupCompletion& c : mine) {
    if (c.send) {
      OnSendCompletion(c.wc);
    } else {
      OnRecvCompletion(c.wc);
    }
  }
  return static_cast<int>(mine.size());
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
  const uint32_t qp_num = qp_.get()->qp_num;
  if (group_ != nullptr) group_->BeginSetup(qp_num);
  if (status.ok()) status = BindWindows(deadline);
  if (!status.ok()) {
    if (group_ != nullptr) group_->EndSetup(qp_num);
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
  // No wait for the client's RTU (RDMA_CM_EVENT_ESTABLISHED): the QP is in
  // RTS already, and a client that vanishes mid-handshake would otherwise
  // hold the caller (the server's accept loop) until the CM gives up. Its
  // CONNECT_ERROR / UNREACHABLE arrives later and breaks the connection on
  // a Poll (HandleCmEvents), which then reclaims it like any broken one.
  //
  // Established before the reply leaves, and (a group member) in the
  // group's map: the peer's first SEND may complete as soon as it has the
  // reply, and the group's thread may then feed, report, Poll and post on
  // the member while this thread is still here. So nothing below touches
  // what those read, except on the failure path, where no reply left and
  // nothing can have completed.
  state_ = State::kConnected;
  if (group_ != nullptr) {
    group_->Join(this, qp_num);
    group_joined_ = true;
  }
  if (rdma_accept(id_.get(), &param) != 0) {
    const Status error = VerbsError(where + ": rdma_accept", errno);
    if (group_joined_) {
      group_->Leave(this, qp_num, channel_->fd());
      group_joined_ = false;
    }
    state_ = State::kClosed;
    return error;
  }
  if (group_ != nullptr) {
    // From here the group's thread reads the member's cm events. On
    // failure the caller destroys the connection (which disconnects it).
    if (const Status watch = group_->WatchCm(qp_num, channel_->fd()); !watch.ok()) {
      return watch.WithContext(where);
    }
  }
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
  CloseQp(Unavailable("connection to " + peer_address_ + " closed locally"));
}

// ------------------------------------------------------------------ cm events

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

void VerbsConnection::CloseQp(Status why) {
  // After a failed WR the flushes are that failure's; a second cause (our
  // Disconnect after the peer's) is not the first one.
  if (!failed_ && close_status_.ok()) close_status_ = std::move(why);
  MoveQpToError();
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
        CloseQp(event->event == RDMA_CM_EVENT_DISCONNECTED
                    ? Unavailable("peer " + peer_address_ + " closed the connection")
                    : Unavailable("connection to " + peer_address_ +
                                  " lost: the RDMA device was removed"));
        break;
      case RDMA_CM_EVENT_CONNECT_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_REJECTED: {
        // The handshake Accept answered never completed: the peer is gone.
        const std::string what = EventText(event.get());
        LOG(INFO) << peer_address_ << ": handshake not completed: " << what;
        remote_disconnected_ = true;
        CloseQp(Unavailable("connection to " + peer_address_ + " lost: handshake not completed: " + what));
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
      default:
        LOG(INFO) << peer_address_ << ": ignoring rdma_cm event " << EventText(event.get());
    }
  }
}

}  // namespace rkv::transport::verbs
