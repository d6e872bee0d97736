// The verbs Transport and Listener. Connections live in verbs_connection.h
// (setup in verbs_connection_setup.cc, the data path in
// verbs_connection_datapath.cc), poll groups in verbs_poll_group.h, the
// RAII owners in verbs_resources.cc.
//
// One transport = one device and one PD. A server registers its regions
// before it listens, so the device is chosen when the transport is created:
// Options::device, or the first device with an active port. The device is
// opened through librdmacm (rdma_get_devices), whose context is the very one
// rdma_cm later puts in cm_id->verbs; every listener and connection checks
// that its cm_id landed on that context and fails with FAILED_PRECONDITION
// (a request on another device is rejected) instead of mixing devices.
#include "common/transport/verbs/verbs_transport.h"

#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "common/net_address.h"
#include "common/transport/rejection.h"
#include "common/transport/source_refusals.h"
#include "common/transport/verbs/verbs_connection.h"
#include "common/transport/verbs/verbs_poll_group.h"
#include "common/transport/verbs/verbs_resources.h"

namespace rkv::transport {
namespace verbs {
namespace {

// Inline data the QP is asked for (enough for a request or reply message);
// what it grants is read back per QP.
constexpr uint32_t kInlineWish = 128;

class VerbsListener final : public Listener {
 public:
  VerbsListener(ConnectionConfig config, std::shared_ptr<EventChannel> channel, CmId id,
                int wake_fd, std::string address)
      : config_(std::move(config)),
        channel_(std::move(channel)),
        id_(std::move(id)),
        wake_fd_(wake_fd),
        address_(std::move(address)),
        source_refusals_(config_.max_refusals_per_source) {}

  ~VerbsListener() override {
    id_ = CmId();  // before its channel
    channel_.reset();
    close(wake_fd_);
  }

  std::string address() const override { return address_; }

  ListenerCounters counters() const override {
    ListenerCounters c;
    c.screened_out = screened_out_.load(std::memory_order_relaxed);
    c.source_limited = source_limited_.load(std::memory_order_relaxed);
    c.created = created_.load(std::memory_order_relaxed);
    return c;
  }

  using Listener::Next;
  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout, const Screen& screen,
                                             const GroupChooser& choose) override {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      if (shutdown_.load(std::memory_order_acquire)) {
        return Status(StatusCode::kCancelled, "listener on " + address_ + " was shut down");
      }
      auto event = WaitCmEvent(*channel_, deadline, wake_fd_);
      if (!event.ok()) {
        if (event.status().code() == StatusCode::kDeadlineExceeded) {
          return std::unique_ptr<Connection>();
        }
        if (event.status().code() == StatusCode::kCancelled) continue;  // re-checks shutdown_
        return event.status();
      }
      if ((*event)->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        VLOG(1) << "listener " << address_ << ": ignoring rdma_cm event "
                << rdma_event_str((*event)->event);
        continue;
      }
      // The request's id is new and ours from here on. Its private data
      // lives in the event: copy it (IB/RoCE pad it to 56 bytes; the
      // consumer's format tells the real length) and ack before the id
      // may migrate or be destroyed.
      const rdma_conn_param& param = (*event)->param.conn;
      const auto* data = static_cast<const uint8_t*>(param.private_data);
      std::vector<uint8_t> private_data;
      if (data != nullptr) private_data.assign(data, data + param.private_data_len);
      const uint8_t responder_resources = param.responder_resources;
      const uint8_t initiator_depth = param.initiator_depth;
      CmId child((*event)->id, channel_);
      event->Ack();
      // Screened before anything is created for the request: a refused one
      // costs the listener an rdma_reject and the id rdma_cm made, no QP,
      // CQ, channel or buffer.
      const std::string peer = FormatSockaddr(rdma_get_peer_addr(child.get()));
      const std::string source = peer.substr(0, peer.rfind(':'));
      const auto now = Clock::now();
      if (source_refusals_.OverLimit(source, now)) {
        source_limited_.fetch_add(1, std::memory_order_relaxed);
        RejectRequest(child, {StatusCode::kUnavailable, "too many refused connection requests from " + source +
                                                            " within a second; retry later"});
        continue;
      }
      if (screen) {
        if (std::optional<Rejection> why = screen(private_data, peer)) {
          screened_out_.fetch_add(1, std::memory_order_relaxed);
          source_refusals_.Refused(source, now);
          RejectRequest(child, *why);
          continue;
        }
        source_refusals_.Admitted(source, now);
      }
      // The group is chosen before the QP exists: it is created on the
      // group's CQs.
      std::shared_ptr<PollGroupCore> core;
      if (PollGroup* chosen = choose ? choose(private_data) : nullptr; chosen != nullptr) {
        auto* verbs_group = dynamic_cast<VerbsPollGroup*>(chosen);
        if (verbs_group == nullptr) {
          const std::vector<uint8_t> reject =
              EncodeRejection({StatusCode::kUnavailable, "the server chose a poll group of another transport"});
          rdma_reject(child.get(), reject.data(), static_cast<uint8_t>(reject.size()));
          return InvalidArgument("Next: the chosen poll group is not one of a verbs transport");
        }
        core = verbs_group->core();
      }
      auto conn = VerbsConnection::CreatePassive(config_, core, std::move(child), std::move(private_data),
                                                 responder_resources, initiator_depth);
      if (!conn.ok() && conn.status().code() == StatusCode::kResourceExhausted) {
        // The group is full (the request was refused as transient): the
        // caller learns it, to use another group or refuse for a while.
        return conn.status().WithContext("listener " + address_);
      }
      if (!conn.ok()) {
        // One bad request must not stop the listener: it was rejected.
        LOG(WARNING) << "listener " << address_ << ": rejected a connection request: "
                     << conn.status();
        continue;
      }
      created_.fetch_add(1, std::memory_order_relaxed);
      return std::unique_ptr<Connection>(std::move(conn).value());
    }
  }

  // Refuses a request before a connection exists for it; its id is
  // destroyed with `child`.
  static void RejectRequest(const CmId& child, const Rejection& why) {
    const std::vector<uint8_t> reject = EncodeRejection(why);
    if (rdma_reject(child.get(), reject.data(), static_cast<uint8_t>(reject.size())) != 0) {
      VLOG(1) << VerbsError("rdma_reject", errno);
    }
  }

  void Shutdown() override {
    shutdown_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      LOG(WARNING) << VerbsError("write(listener wake eventfd)", errno);
    }
  }

 private:
  const ConnectionConfig config_;
  std::shared_ptr<EventChannel> channel_;
  CmId id_;
  const int wake_fd_;
  const std::string address_;
  // Release in Shutdown, acquire in Next: a Next that sees it returns
  // CANCELLED (the eventfd only wakes a Next already asleep).
  std::atomic<bool> shutdown_{false};
  // Next's thread only (Next is called from one thread at a time).
  SourceRefusals source_refusals_;
  // ListenerCounters, read from any thread.
  std::atomic<uint64_t> screened_out_{0};
  std::atomic<uint64_t> source_limited_{0};
  std::atomic<uint64_t> created_{0};
};

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(ConnectionConfig config) : config_(std::move(config)) {}

  Kind kind() const override { return Kind::kVerbs; }
  bool one_sided_uses_target_cpu() const override { return false; }

  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t length,
                                                   uint32_t access) override {
    if (addr == nullptr || length == 0) return InvalidArgument("Register of an empty range");
    if ((access & ~uint32_t{kLocalWrite | kRemoteRead | kRemoteWrite}) != 0) {
      return InvalidArgument("unknown access bits " + std::to_string(access));
    }
    RKV_ASSIGN_OR_RETURN(std::shared_ptr<MemoryRegistration> mr,
                         MemoryRegistration::Create(config_.pd, addr, length, IbvAccess(access)));
    const uint32_t rkey = mr->get()->rkey;
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<VerbsRegion>(std::move(mr), static_cast<uint8_t*>(addr), length, rkey));
  }

  StatusOr<std::unique_ptr<PollGroup>> NewPollGroup() override {
    RKV_ASSIGN_OR_RETURN(std::shared_ptr<PollGroupCore> core, PollGroupCore::Create(config_));
    return std::unique_ptr<PollGroup>(std::make_unique<VerbsPollGroup>(std::move(core)));
  }
  StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    std::string host;
    uint16_t port = 0;
    RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* resolved = nullptr;
    if (const int ret = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &resolved);
        ret != 0) {
      return InvalidArgument("listen on " + address + ": cannot resolve host: " + gai_strerror(ret));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(resolved, &freeaddrinfo);

    RKV_ASSIGN_OR_RETURN(std::shared_ptr<EventChannel> channel, EventChannel::Create());
    RKV_ASSIGN_OR_RETURN(CmId id, CmId::Create(channel));
    if (rdma_bind_addr(id.get(), resolved->ai_addr) != 0) {
      return VerbsError("listen on " + address + ": rdma_bind_addr", errno);
    }
    // Bound to a device address, the id carries that device now; a
    // wildcard bind leaves it null and each request is checked instead.
    if (id->verbs != nullptr && id->verbs != config_.pd->device()->context()) {
      return FailedPrecondition("listen on " + address + ": the address belongs to device " +
                                ibv_get_device_name(id->verbs->device) +
                                " but this transport uses " + config_.pd->device()->name());
    }
    if (rdma_listen(id.get(), static_cast<int>(config_.listen_backlog)) != 0) {
      return VerbsError("listen on " + address + ": rdma_listen", errno);
    }
    const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) return VerbsError("eventfd", errno);
    // The port is known once bound (port 0 asks for a free one).
    std::string bound = FormatSockaddr(rdma_get_local_addr(id.get()));
    return std::unique_ptr<Listener>(std::make_unique<VerbsListener>(
        config_, std::move(channel), std::move(id), wake_fd, std::move(bound)));
  }

  using Transport::Connect;
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                std::span<const uint8_t> private_data,
                                                std::chrono::milliseconds timeout, Rejection* rejected) override {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<VerbsConnection> conn,
                         VerbsConnection::Connect(config_, address, private_data, timeout, rejected));
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  const ConnectionConfig config_;
};

}  // namespace

StatusOr<std::unique_ptr<Transport>> Create(const Options& options, bool allow_memory_windows) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<Device> device, Device::Open(options.device));
  const ibv_device_attr& attr = device->attr();
  RKV_ASSIGN_OR_RETURN(ibv_port_attr port, device->QueryPort(device->port()));
  if (options.gid_index >= 0 && options.gid_index >= port.gid_tbl_len) {
    return InvalidArgument("gid_index " + std::to_string(options.gid_index) + " is outside " +
                           device->name() + "'s GID table of " +
                           std::to_string(port.gid_tbl_len) + " entries");
  }
  if (options.gid_index > 255) return InvalidArgument("gid_index above 255");
  if (options.listen_backlog < 1 || options.listen_backlog > kMaxListenBacklog) {
    return InvalidArgument("listen_backlog " + std::to_string(options.listen_backlog) + " is outside [1, " +
                           std::to_string(kMaxListenBacklog) + "]");
  }
  if (attr.max_sge < 1) return Unavailable(device->name() + " reports max_sge 0");
  if (options.poll_spin_us < 0 || options.poll_spin_us > kMaxSpinLimit.count()) {
    return InvalidArgument("poll_spin_us " + std::to_string(options.poll_spin_us) +
                           " is outside [0, " + std::to_string(kMaxSpinLimit.count()) + "]");
  }

  ConnectionConfig config;
  RKV_ASSIGN_OR_RETURN(config.pd, ProtectionDomain::Create(device));
  config.gid_index = options.gid_index;
  config.active_mtu = port.active_mtu;
  config.max_inline_wish = kInlineWish;
  config.max_spin = std::chrono::microseconds(options.poll_spin_us);
  config.listen_backlog = options.listen_backlog;
  config.max_refusals_per_source = options.max_refusals_per_source;
  // Queue depths: what was asked, at least what the accounting needs, at
  // most what the device allows for a QP and a CQ.
  const auto device_depth = static_cast<uint32_t>(std::max(0, std::min(attr.max_qp_wr, attr.max_cqe)));
  if (device_depth < kMinSendDepth) {
    return Unavailable(device->name() + " allows only " + std::to_string(device_depth) +
                       " work requests per queue; the verbs transport needs " +
                       std::to_string(kMinSendDepth));
  }
  config.send_depth = std::clamp(options.max_send_wr, kMinSendDepth, device_depth);
  config.recv_depth = std::clamp(options.max_recv_wr, kMinRecvDepth, device_depth);
  config.responder_resources = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 0, 255));
  config.initiator_depth = static_cast<uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 0, 255));

  // Private regions: type 2 memory windows when the device has them and
  // one can actually be allocated, else plain MRs.
  std::string private_mode;
  if (!allow_memory_windows) {
    private_mode = "plain MRs (memory windows not allowed; any peer holding the rkey can use it)";
  } else if (device->SupportsMemoryWindowType2()) {
    auto probe = MemoryWindow::Create(config.pd);
    if (probe.ok()) {
      config.use_memory_windows = true;
      private_mode = "type 2 memory windows (rkey valid on its connection's QP only)";
    } else {
      private_mode = "plain MRs (type 2 memory window allocation failed: " +
                     probe.status().ToString() + "; any peer holding the rkey can use it)";
    }
  } else {
    private_mode = "plain MRs (no type 2 memory windows on this device; any peer holding the "
                   "rkey can use it)";
  }
  LOG(INFO) << "verbs transport on " << device->name() << " port "
            << static_cast<int>(device->port()) << ": active_mtu "
            << (128 << static_cast<int>(port.active_mtu)) << ", send/recv depth " << config.send_depth << "/"
            << config.recv_depth << ", rd_atom " << static_cast<int>(config.responder_resources)
            << "/" << static_cast<int>(config.initiator_depth) << ", gid_index "
            << (options.gid_index < 0 ? std::string("chosen by rdma_cm")
                                      : std::to_string(options.gid_index))
            << ", poll spin up to " << options.poll_spin_us << " us"
            << "; private regions use " << private_mode;
  return std::unique_ptr<Transport>(std::make_unique<VerbsTransport>(std::move(config)));
}

StatusOr<std::unique_ptr<Transport>> CreateWithoutMemoryWindows(const Options& options) {
  return Create(options, /*allow_memory_windows=*/false);
}

}  // namespace verbs

StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(const Options& options) {
  return verbs::Create(options, /*allow_memory_windows=*/true);
}

bool VerbsDeviceAvailable() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) return false;
  bool found = false;
  for (int i = 0; i < count && !found; ++i) {
    ibv_context* context = ibv_open_device(list[i]);
    if (context == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(context, &attr) == 0) {
      for (uint8_t port = 1; port <= attr.phys_port_cnt && !found; ++port) {
        ibv_port_attr port_attr{};
        found = ibv_query_port(context, port, &port_attr) == 0 && port_attr.state == IBV_PORT_ACTIVE;
      }
    }
    ibv_close_device(context);
  }
  ibv_free_device_list(list);
  return found;
}

}  // namespace rkv::transport
