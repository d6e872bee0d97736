#include "common/transport/verbs/verbs_resources.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <glog/logging.h>

namespace rkv::transport::verbs {

Status VerbsError(std::string_view context, int ret_or_errno) {
  const int err = ret_or_errno < 0 ? -ret_or_errno : ret_or_errno;
  if (err == 0) return Internal(std::string(context) + ": failed (no errno reported)");
  return PosixError(context, err);
}

namespace {

Status SetNonBlocking(int fd, const char* what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return VerbsError(std::string("fcntl(O_NONBLOCK) on ") + what, errno);
  }
  return Status::Ok();
}

// Moves a raw handle out of `other`, leaving it null.
template <typename T>
T* Take(T*& p) {
  return std::exchange(p, nullptr);
}

}  // namespace

// ---------------------------------------------------------------- EventChannel

StatusOr<std::shared_ptr<EventChannel>> EventChannel::Create() {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) return VerbsError("rdma_create_event_channel", errno);
  auto owner = std::make_shared<EventChannel>(channel);
  RKV_RETURN_IF_ERROR(SetNonBlocking(channel->fd, "the rdma_cm event channel"));
  return owner;
}

EventChannel::EventChannel(EventChannel&& other) noexcept : channel_(Take(other.channel_)) {}

EventChannel& EventChannel::operator=(EventChannel&& other) noexcept {
  if (this != &other) {
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
    channel_ = Take(other.channel_);
  }
  return *this;
}

EventChannel::~EventChannel() {
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
}

// --------------------------------------------------------------------- CmEvent

CmEvent::CmEvent(CmEvent&& other) noexcept : event_(Take(other.event_)) {}

CmEvent& CmEvent::operator=(CmEvent&& other) noexcept {
  if (this != &other) {
    Ack();
    event_ = Take(other.event_);
  }
  return *this;
}

CmEvent::~CmEvent() { Ack(); }

void CmEvent::Ack() {
  if (event_ != nullptr) rdma_ack_cm_event(Take(event_));
}

StatusOr<CmEvent> TryGetCmEvent(const EventChannel& channel) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel.get(), &event) != 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return CmEvent();
    return VerbsError("rdma_get_cm_event", errno);
  }
  return CmEvent(event);
}

StatusOr<CmEvent> WaitCmEvent(const EventChannel& channel, Clock::time_point deadline,
                              int wake_fd) {
  while (true) {
    RKV_ASSIGN_OR_RETURN(CmEvent event, TryGetCmEvent(channel));
    if (event) return event;
    const auto now = Clock::now();
    if (now >= deadline) return DeadlineExceeded("timed out waiting for an rdma_cm event");
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    pollfd fds[2] = {{channel.fd(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int n = ppoll(fds, wake_fd >= 0 ? 2 : 1, &ts, nullptr);
    if (n < 0 && errno != EINTR) return VerbsError("ppoll(rdma_cm event channel)", errno);
    if (wake_fd >= 0 && n > 0 && (fds[1].revents & POLLIN) != 0) return Status(StatusCode::kCancelled, "woken up");
  }
}

// ------------------------------------------------------------------------ CmId

StatusOr<CmId> CmId::Create(std::shared_ptr<EventChannel> channel) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel->get(), &id, nullptr, RDMA_PS_TCP) != 0) {
    return VerbsError("rdma_create_id(RDMA_PS_TCP)", errno);
  }
  return CmId(id, std::move(channel));
}

CmId::CmId(CmId&& other) noexcept
    : channel_(std::move(other.channel_)), id_(Take(other.id_)) {}

CmId& CmId::operator=(CmId&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = Take(other.id_);
    channel_ = std::move(other.channel_);
  }
  return *this;
}

CmId::~CmId() { Reset(); }

void CmId::Reset() {
  // The id goes before its channel (the shared_ptr is dropped after).
  if (id_ != nullptr && rdma_destroy_id(Take(id_)) != 0) {
    LOG(WARNING) << VerbsError("rdma_destroy_id", errno);
  }
  channel_.reset();
}

Status CmId::MigrateTo(std::shared_ptr<EventChannel> channel) {
  if (rdma_migrate_id(id_, channel->get()) != 0) return VerbsError("rdma_migrate_id", errno);
  channel_ = std::move(channel);
  return Status::Ok();
}

// ------------------------------------------------------------ DeviceList/Device

StatusOr<std::shared_ptr<DeviceList>> DeviceList::Get() {
  int count = 0;
  errno = 0;
  ibv_context** list = rdma_get_devices(&count);
  if (list == nullptr) {
    // librdmacm fails with ENODEV (or ENOENT/ENOSYS when the rdma_cm kernel
    // module is absent) when there is nothing to open.
    return Unavailable(VerbsError("rdma_get_devices", errno).message() +
                       " (no RDMA device usable through rdma_cm)");
  }
  return std::make_shared<DeviceList>(list, count);
}

DeviceList::DeviceList(DeviceList&& other) noexcept
    : list_(Take(other.list_)), count_(std::exchange(other.count_, 0)) {}

DeviceList& DeviceList::operator=(DeviceList&& other) noexcept {
  if (this != &other) {
    if (list_ != nullptr) rdma_free_devices(list_);
    list_ = Take(other.list_);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

DeviceList::~DeviceList() {
  if (list_ != nullptr) rdma_free_devices(list_);
}

StatusOr<std::shared_ptr<Device>> Device::Open(const std::string& name) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<DeviceList> list, DeviceList::Get());
  std::string seen;
  for (int i = 0; i < list->size(); ++i) {
    ibv_context* context = list->at(i);
    const std::string dev_name = ibv_get_device_name(context->device);
    if (!seen.empty()) seen += ", ";
    seen += dev_name;
    if (!name.empty() && dev_name != name) continue;
    ibv_device_attr attr{};
    if (const int ret = ibv_query_device(context, &attr); ret != 0) {
      return VerbsError("ibv_query_device(" + dev_name + ")", ret);
    }
    for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
      ibv_port_attr port_attr{};
      if (ibv_query_port(context, port, &port_attr) != 0) continue;
      if (port_attr.state == IBV_PORT_ACTIVE) {
        return std::make_shared<Device>(list, context, attr, port);
      }
    }
    if (!name.empty()) return Unavailable("RDMA device " + name + " has no active port");
  }
  if (!name.empty()) {
    return Unavailable("RDMA device " + name + " not found (devices: " +
                       (seen.empty() ? std::string("none") : seen) + ")");
  }
  return Unavailable("no RDMA device with an active port (devices: " +
                     (seen.empty() ? std::string("none") : seen) + ")");
}

std::string Device::name() const { return ibv_get_device_name(context_->device); }

StatusOr<ibv_port_attr> Device::QueryPort(uint8_t port) const {
  ibv_port_attr attr{};
  if (const int ret = ibv_query_port(context_, port, &attr); ret != 0) {
    return VerbsError("ibv_query_port(" + name() + ":" + std::to_string(port) + ")", ret);
  }
  return attr;
}

bool Device::SupportsMemoryWindowType2() const {
  const auto flags = static_cast<uint64_t>(attr_.device_cap_flags);
  return (flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
}

// ------------------------------------------------------------ ProtectionDomain

StatusOr<std::shared_ptr<ProtectionDomain>> ProtectionDomain::Create(
    std::shared_ptr<Device> device) {
  ibv_pd* pd = ibv_alloc_pd(device->context());
  if (pd == nullptr) return VerbsError("ibv_alloc_pd(" + device->name() + ")", errno);
  return std::make_shared<ProtectionDomain>(std::move(device), pd);
}

ProtectionDomain::ProtectionDomain(ProtectionDomain&& other) noexcept
    : device_(std::move(other.device_)), pd_(Take(other.pd_)) {}

ProtectionDomain& ProtectionDomain::operator=(ProtectionDomain&& other) noexcept {
  if (this != &other) {
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    pd_ = Take(other.pd_);
    device_ = std::move(other.device_);
  }
  return *this;
}

ProtectionDomain::~ProtectionDomain() {
  if (pd_ != nullptr) {
    if (const int ret = ibv_dealloc_pd(pd_); ret != 0) {
      LOG(WARNING) << VerbsError("ibv_dealloc_pd", ret);
    }
  }
}

// ---------------------------------------------------------- MemoryRegistration

StatusOr<std::shared_ptr<MemoryRegistration>> MemoryRegistration::Create(
    std::shared_ptr<ProtectionDomain> pd, void* addr, size_t length, int ibv_access) {
  ibv_mr* mr = ibv_reg_mr(pd->get(), addr, length, ibv_access);
  if (mr == nullptr) {
    return VerbsError("ibv_reg_mr(" + std::to_string(length) + " bytes)", errno);
  }
  return std::make_shared<MemoryRegistration>(std::move(pd), mr);
}

MemoryRegistration::MemoryRegistration(MemoryRegistration&& other) noexcept
    : pd_(std::move(other.pd_)), mr_(Take(other.mr_)) {}

MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&& other) noexcept {
  if (this != &other) {
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    mr_ = Take(other.mr_);
    pd_ = std::move(other.pd_);
  }
  return *this;
}

MemoryRegistration::~MemoryRegistration() {
  if (mr_ != nullptr) {
    if (const int ret = ibv_dereg_mr(mr_); ret != 0) LOG(WARNING) << VerbsError("ibv_dereg_mr", ret);
  }
}

// ---------------------------------------------------------------- MemoryWindow

StatusOr<MemoryWindow> MemoryWindow::Create(std::shared_ptr<ProtectionDomain> pd) {
  ibv_mw* mw = ibv_alloc_mw(pd->get(), IBV_MW_TYPE_2);
  if (mw == nullptr) return VerbsError("ibv_alloc_mw(IBV_MW_TYPE_2)", errno);
  return MemoryWindow(std::move(pd), mw);
}

MemoryWindow::MemoryWindow(MemoryWindow&& other) noexcept
    : pd_(std::move(other.pd_)), bound_(std::move(other.bound_)), mw_(Take(other.mw_)) {}

MemoryWindow& MemoryWindow::operator=(MemoryWindow&& other) noexcept {
  if (this != &other) {
    Reset();
    mw_ = Take(other.mw_);
    bound_ = std::move(other.bound_);
    pd_ = std::move(other.pd_);
  }
  return *this;
}

MemoryWindow::~MemoryWindow() { Reset(); }

void MemoryWindow::Reset() {
  // The window goes first, then the MR it was bound to, then (maybe) the PD.
  if (mw_ != nullptr) {
    if (const int ret = ibv_dealloc_mw(Take(mw_)); ret != 0) {
      LOG(WARNING) << VerbsError("ibv_dealloc_mw", ret);
    }
  }
  bound_.reset();
  pd_.reset();
}

// ----------------------------------------------------------- CompletionChannel

StatusOr<std::shared_ptr<CompletionChannel>> CompletionChannel::Create(
    std::shared_ptr<Device> device) {
  ibv_comp_channel* channel = ibv_create_comp_channel(device->context());
  if (channel == nullptr) return VerbsError("ibv_create_comp_channel", errno);
  auto owner = std::make_shared<CompletionChannel>(std::move(device), channel);
  RKV_RETURN_IF_ERROR(SetNonBlocking(channel->fd, "the completion channel"));
  return owner;
}

CompletionChannel::CompletionChannel(CompletionChannel&& other) noexcept
    : device_(std::move(other.device_)), channel_(Take(other.channel_)) {}

CompletionChannel& CompletionChannel::operator=(CompletionChannel&& other) noexcept {
  if (this != &other) {
    if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
    channel_ = Take(other.channel_);
    device_ = std::move(other.device_);
  }
  return *this;
}

CompletionChannel::~CompletionChannel() {
  if (channel_ != nullptr) {
    if (const int ret = ibv_destroy_comp_channel(channel_); ret != 0) {
      LOG(WARNING) << VerbsError("ibv_destroy_comp_channel", ret);
    }
  }
}

// ------------------------------------------------------------- CompletionQueue

StatusOr<std::shared_ptr<CompletionQueue>> CompletionQueue::Create(
    std::shared_ptr<CompletionChannel> channel, int depth) {
  ibv_context* context = channel->get()->context;
  ibv_cq* cq = ibv_create_cq(context, depth, nullptr, channel->get(), 0);
  if (cq == nullptr) return VerbsError("ibv_create_cq(" + std::to_string(depth) + ")", errno);
  return std::make_shared<CompletionQueue>(std::move(channel), cq);
}

CompletionQueue::CompletionQueue(CompletionQueue&& other) noexcept
    : channel_(std::move(other.channel_)), cq_(Take(other.cq_)) {}

CompletionQueue& CompletionQueue::operator=(CompletionQueue&& other) noexcept {
  if (this != &other) {
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    cq_ = Take(other.cq_);
    channel_ = std::move(other.channel_);
  }
  return *this;
}

CompletionQueue::~CompletionQueue() {
  if (cq_ != nullptr) {
    if (const int ret = ibv_destroy_cq(cq_); ret != 0) LOG(WARNING) << VerbsError("ibv_destroy_cq", ret);
  }
}

// ------------------------------------------------------------------- QueuePair

StatusOr<QueuePair> QueuePair::Create(std::shared_ptr<ProtectionDomain> pd,
                                      std::shared_ptr<CompletionQueue> send_cq,
                                      std::shared_ptr<CompletionQueue> recv_cq,
                                      const ibv_qp_cap& cap) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq->get();
  init.recv_cq = recv_cq->get();
  init.qp_type = IBV_QPT_RC;
  // Every WR chooses whether it is signaled (IBV_SEND_SIGNALED).
  init.sq_sig_all = 0;
  init.cap = cap;
  ibv_qp* qp = ibv_create_qp(pd->get(), &init);
  if (qp == nullptr && cap.max_inline_data > 0) {
    // Devices differ in how much inline data they accept (rxe: little);
    // the limit is not queryable before creation, so ask again without.
    init = ibv_qp_init_attr{};
    init.send_cq = send_cq->get();
    init.recv_cq = recv_cq->get();
    init.qp_type = IBV_QPT_RC;
    init.cap = cap;
    init.cap.max_inline_data = 0;
    qp = ibv_create_qp(pd->get(), &init);
  }
  if (qp == nullptr) return VerbsError("ibv_create_qp(RC)", errno);
  QueuePair owner;
  owner.pd_ = std::move(pd);
  owner.send_cq_ = std::move(send_cq);
  owner.recv_cq_ = std::move(recv_cq);
  owner.qp_ = qp;
  // ibv_create_qp writes the granted capacity (>= the asked one) back.
  owner.cap_ = init.cap;
  return owner;
}

QueuePair::QueuePair(QueuePair&& other) noexcept
    : pd_(std::move(other.pd_)),
      send_cq_(std::move(other.send_cq_)),
      recv_cq_(std::move(other.recv_cq_)),
      qp_(Take(other.qp_)),
      cap_(other.cap_) {}

QueuePair& QueuePair::operator=(QueuePair&& other) noexcept {
  if (this != &other) {
    Reset();
    qp_ = Take(other.qp_);
    cap_ = other.cap_;
    send_cq_ = std::move(other.send_cq_);
    recv_cq_ = std::move(other.recv_cq_);
    pd_ = std::move(other.pd_);
  }
  return *this;
}

QueuePair::~QueuePair() { Reset(); }

void QueuePair::Reset() {
  // The QP goes before the CQs and the PD it holds.
  if (qp_ != nullptr) {
    if (const int ret = ibv_destroy_qp(Take(qp_)); ret != 0) {
      LOG(WARNING) << VerbsError("ibv_destroy_qp", ret);
    }
  }
  send_cq_.reset();
  recv_cq_.reset();
  pd_.reset();
}

// ---------------------------------------------------------------------- misc

std::string FormatSockaddr(const sockaddr* addr) {
  if (addr == nullptr) return "?";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    // Appended in order rather than "[" + std::string(host) + ...: GCC 12 at
    // -O3 warns falsely (-Wrestrict) on the insert at the front that
    // operator+(const char*, std::string&&) performs.
    std::string out = "[";
    out += host;
    out += "]:";
    out += std::to_string(ntohs(in6->sin6_port));
    return out;
  }
  return "?";
}

}  // namespace rkv::transport::verbs
