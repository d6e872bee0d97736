// Move-only RAII owners for every librdmacm / ibverbs object the verbs
// transport uses, and VerbsError().
//
// Ownership and teardown order. Each child holds a shared_ptr to the parent
// it needs, so a parent cannot be destroyed first whatever order a caller
// drops its handles in. The order this enforces, and that VerbsConnection
// also follows explicitly in its destructor:
//
//   MemoryWindow       before the QueuePair it is bound to (rxe: a bound type
//                      2 window holds a reference on its QP, and destroying
//                      the QP first stalls in the kernel until a timeout),
//                      and before the MemoryRegistration it is bound to and
//                      the PD (ibv_dereg_mr fails while a window is bound)
//   QueuePair          before the CompletionQueues it posts to and the PD
//   MemoryRegistration before the ProtectionDomain (ibv_dealloc_pd: EBUSY)
//   CompletionQueue    before its CompletionChannel (every CQ event is acked
//                      when it is read, so ibv_destroy_cq never waits)
//   ProtectionDomain,
//   CompletionChannel  before the Device (the device list they came from)
//   CmId               before its EventChannel (every cm event is acked by
//                      CmEvent's destructor, so rdma_destroy_id never waits)
//
// A window cannot hold its QP (the connection owns the QP by value), and a
// QP and its cm_id are independent (QPs are created with ibv_create_qp and
// never attached to the cm_id, see verbs_connection.h): VerbsConnection's
// destructor spells out windows, QP, MRs, CQs, cm_id, channel.
//
// Thread safety: the owners are not synchronised; the verbs objects they
// hold are as thread-safe as libibverbs makes them (posting and polling on
// one QP/CQ must be serialised by the caller, registration is thread-safe).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rkv::transport::verbs {

// A failed verbs or rdma_cm call as a Status that keeps the call and errno:
// VerbsError("ibv_modify_qp(RTR)", ret). `ret_or_errno` is what the call
// returned when it returns an errno value itself (ibv_modify_qp,
// ibv_post_send, ...: a positive number); pass `errno` for calls that return
// -1 or NULL and set errno (rdma_*, ibv_reg_mr, ...). A negative value is
// taken as -errno. Codes follow PosixError (common/status.h).
Status VerbsError(std::string_view context, int ret_or_errno);

using Clock = std::chrono::steady_clock;

// rdma_event_channel, with its fd non-blocking.
class EventChannel {
 public:
  static StatusOr<std::shared_ptr<EventChannel>> Create();
  explicit EventChannel(rdma_event_channel* channel) : channel_(channel) {}
  EventChannel(EventChannel&& other) noexcept;
  EventChannel& operator=(EventChannel&& other) noexcept;
  EventChannel(const EventChannel&) = delete;
  EventChannel& operator=(const EventChannel&) = delete;
  ~EventChannel();

  rdma_event_channel* get() const { return channel_; }
  int fd() const { return channel_->fd; }

 private:
  rdma_event_channel* channel_ = nullptr;
};

// One rdma_cm event; acked when this owner goes away. The event's private
// data is valid only as long as the owner lives.
class CmEvent {
 public:
  CmEvent() = default;
  explicit CmEvent(rdma_cm_event* event) : event_(event) {}
  CmEvent(CmEvent&& other) noexcept;
  CmEvent& operator=(CmEvent&& other) noexcept;
  CmEvent(const CmEvent&) = delete;
  CmEvent& operator=(const CmEvent&) = delete;
  ~CmEvent();

  explicit operator bool() const { return event_ != nullptr; }
  rdma_cm_event* operator->() const { return event_; }
  rdma_cm_event* get() const { return event_; }
  // Acks now (before the owner goes away), e.g. before rdma_migrate_id.
  void Ack();

 private:
  rdma_cm_event* event_ = nullptr;
};

// Reads one event without blocking: an empty CmEvent when none is queued.
StatusOr<CmEvent> TryGetCmEvent(const EventChannel& channel);

// Waits until `deadline` for one event. DEADLINE_EXCEEDED when none came;
// CANCELLED when `wake_fd` (>= 0) became readable first.
StatusOr<CmEvent> WaitCmEvent(const EventChannel& channel, Clock::time_point deadline,
                              int wake_fd = -1);

// rdma_cm_id. Holds the event channel it reports to.
class CmId {
 public:
  static StatusOr<CmId> Create(std::shared_ptr<EventChannel> channel);  // RDMA_PS_TCP
  // Takes ownership of the id a CONNECT_REQUEST event created.
  CmId(rdma_cm_id* id, std::shared_ptr<EventChannel> channel)
      : channel_(std::move(channel)), id_(id) {}
  CmId() = default;
  CmId(CmId&& other) noexcept;
  CmId& operator=(CmId&& other) noexcept;
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;
  ~CmId();

  // Moves the id's events to `channel` (rdma_migrate_id). Every event of the
  // id on its current channel must have been acked.
  Status MigrateTo(std::shared_ptr<EventChannel> channel);

  rdma_cm_id* get() const { return id_; }
  rdma_cm_id* operator->() const { return id_; }
  const EventChannel& channel() const { return *channel_; }

 private:
  void Reset();
  std::shared_ptr<EventChannel> channel_;
  rdma_cm_id* id_ = nullptr;
};

// The device list of librdmacm (rdma_get_devices). librdmacm opens one
// ibv_context per device and hands that same pointer to every cm_id bound
// to the device (cm_id->verbs); a PD, CQ or QP used with rdma_cm must come
// from it, so the transport never opens a context of its own. The contexts
// belong to librdmacm and stay open while the library is loaded; this owner
// releases the list.
class DeviceList {
 public:
  static StatusOr<std::shared_ptr<DeviceList>> Get();
  DeviceList(ibv_context** list, int count) : list_(list), count_(count) {}
  DeviceList(DeviceList&& other) noexcept;
  DeviceList& operator=(DeviceList&& other) noexcept;
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
  ~DeviceList();

  int size() const { return count_; }
  ibv_context* at(int i) const { return list_[i]; }

 private:
  ibv_context** list_ = nullptr;
  int count_ = 0;
};

// One device (a librdmacm context) with the limits queried at open.
class Device {
 public:
  // Opens `name`, or when empty the first device with an active port.
  // UNAVAILABLE when there is no such device.
  static StatusOr<std::shared_ptr<Device>> Open(const std::string& name);

  Device(std::shared_ptr<DeviceList> list, ibv_context* context, const ibv_device_attr& attr,
         uint8_t port)
      : list_(std::move(list)), context_(context), attr_(attr), port_(port) {}
  Device(Device&&) noexcept = default;
  Device& operator=(Device&&) noexcept = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  ibv_context* context() const { return context_; }
  const ibv_device_attr& attr() const { return attr_; }
  // The first active port found at open.
  uint8_t port() const { return port_; }
  std::string name() const;
  StatusOr<ibv_port_attr> QueryPort(uint8_t port) const;
  // True when the device advertises type 2 memory windows.
  bool SupportsMemoryWindowType2() const;

 private:
  std::shared_ptr<DeviceList> list_;
  ibv_context* context_ = nullptr;
  ibv_device_attr attr_{};
  uint8_t port_ = 1;
};

class ProtectionDomain {
 public:
  static StatusOr<std::shared_ptr<ProtectionDomain>> Create(std::shared_ptr<Device> device);
  ProtectionDomain(std::shared_ptr<Device> device, ibv_pd* pd)
      : device_(std::move(device)), pd_(pd) {}
  ProtectionDomain(ProtectionDomain&& other) noexcept;
  ProtectionDomain& operator=(ProtectionDomain&& other) noexcept;
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain();

  ibv_pd* get() const { return pd_; }
  const std::shared_ptr<Device>& device() const { return device_; }

 private:
  std::shared_ptr<Device> device_;
  ibv_pd* pd_ = nullptr;
};

class MemoryRegistration {
 public:
  // ibv_reg_mr with raw IBV_ACCESS_* flags.
  static StatusOr<std::shared_ptr<MemoryRegistration>> Create(
      std::shared_ptr<ProtectionDomain> pd, void* addr, size_t length, int ibv_access);
  MemoryRegistration(std::shared_ptr<ProtectionDomain> pd, ibv_mr* mr)
      : pd_(std::move(pd)), mr_(mr) {}
  MemoryRegistration(MemoryRegistration&& other) noexcept;
  MemoryRegistration& operator=(MemoryRegistration&& other) noexcept;
  MemoryRegistration(const MemoryRegistration&) = delete;
  MemoryRegistration& operator=(const MemoryRegistration&) = delete;
  ~MemoryRegistration();

  ibv_mr* get() const { return mr_; }

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  ibv_mr* mr_ = nullptr;
};

// A type 2 memory window. Once bound (by a BIND_MW work request on one QP)
// it holds the MR it is bound to; its rkey is valid only on that QP.
class MemoryWindow {
 public:
  static StatusOr<MemoryWindow> Create(std::shared_ptr<ProtectionDomain> pd);
  MemoryWindow(std::shared_ptr<ProtectionDomain> pd, ibv_mw* mw) : pd_(std::move(pd)), mw_(mw) {}
  MemoryWindow(MemoryWindow&& other) noexcept;
  MemoryWindow& operator=(MemoryWindow&& other) noexcept;
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;
  ~MemoryWindow();

  ibv_mw* get() const { return mw_; }
  // Records the MR a bind names, so it outlives the window.
  void SetBoundRegion(std::shared_ptr<MemoryRegistration> mr) { bound_ = std::move(mr); }

 private:
  void Reset();
  std::shared_ptr<ProtectionDomain> pd_;
  std::shared_ptr<MemoryRegistration> bound_;
  ibv_mw* mw_ = nullptr;
};

// ibv_comp_channel, with its fd non-blocking.
class CompletionChannel {
 public:
  static StatusOr<std::shared_ptr<CompletionChannel>> Create(std::shared_ptr<Device> device);
  CompletionChannel(std::shared_ptr<Device> device, ibv_comp_channel* channel)
      : device_(std::move(device)), channel_(channel) {}
  CompletionChannel(CompletionChannel&& other) noexcept;
  CompletionChannel& operator=(CompletionChannel&& other) noexcept;
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;
  ~CompletionChannel();

  ibv_comp_channel* get() const { return channel_; }
  int fd() const { return channel_->fd; }

 private:
  std::shared_ptr<Device> device_;
  ibv_comp_channel* channel_ = nullptr;
};

class CompletionQueue {
 public:
  // A CQ of at least `depth` entries reporting to `channel`.
  static StatusOr<std::shared_ptr<CompletionQueue>> Create(
      std::shared_ptr<CompletionChannel> channel, int depth);
  CompletionQueue(std::shared_ptr<CompletionChannel> channel, ibv_cq* cq)
      : channel_(std::move(channel)), cq_(cq) {}
  CompletionQueue(CompletionQueue&& other) noexcept;
  CompletionQueue& operator=(CompletionQueue&& other) noexcept;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue();

  ibv_cq* get() const { return cq_; }

 private:
  std::shared_ptr<CompletionChannel> channel_;
  ibv_cq* cq_ = nullptr;
};

// An RC queue pair created with ibv_create_qp (not attached to a cm_id).
class QueuePair {
 public:
  // `cap` is the wanted capacity; cap.max_inline_data is a wish: creation
  // is retried without inline data when the device refuses it. The
  // capacity actually granted is read back into cap().
  static StatusOr<QueuePair> Create(std::shared_ptr<ProtectionDomain> pd,
                                    std::shared_ptr<CompletionQueue> send_cq,
                                    std::shared_ptr<CompletionQueue> recv_cq,
                                    const ibv_qp_cap& cap);
  QueuePair() = default;
  QueuePair(QueuePair&& other) noexcept;
  QueuePair& operator=(QueuePair&& other) noexcept;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ~QueuePair();

  ibv_qp* get() const { return qp_; }
  const ibv_qp_cap& cap() const { return cap_; }

 private:
  void Reset();
  std::shared_ptr<ProtectionDomain> pd_;
  std::shared_ptr<CompletionQueue> send_cq_;
  std::shared_ptr<CompletionQueue> recv_cq_;
  ibv_qp* qp_ = nullptr;
  ibv_qp_cap cap_{};
};

// "HOST:PORT" ("[v6]:PORT") of a socket address, for logs and address().
std::string FormatSockaddr(const sockaddr* addr);

}  // namespace rkv::transport::verbs
