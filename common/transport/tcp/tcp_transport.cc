// The tcp transport. Wire format: common/transport/tcp/tcp_frame.h.
//
// Structure:
//   Registry        rkey -> registered region; checks every remote access.
//   TcpMemoryRegion a registry entry owned by the caller.
//   TcpConnection   one socket; a reader thread that serves the peer's
//                   READ/WRITE/SEND frames and completes local work
//                   requests from the peer's responses; a send queue
//                   (`out_`) shared by the application thread (requests)
//                   and the reader (responses).
//   TcpListener     accepts sockets and reads their CONNECT frame inside
//                   Next(); hands out pending connections.
//   TcpTransport    Register / Listen / Connect.
//
// Deadlock freedom: the socket is non-blocking and nobody ever blocks on a
// send. A frame that does not fit the kernel buffer stays in `out_` and the
// reader thread sends it when the socket is writable, so a reader always
// keeps reading and two peers can never wait on each other's full buffers.
// The reader pauses reading only while its own backlog of responses to the
// peer is above a high-water mark (a peer that asks but never reads).
#include "common/transport/tcp/tcp_transport.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/net_address.h"
#include "common/transport/tcp/tcp_frame.h"

namespace rkv::transport {
namespace {

using Clock = std::chrono::steady_clock;
using tcp::FrameHeader;
using tcp::FrameType;
using tcp::kHeaderBytes;

// A peer that opens a socket and sends no CONNECT frame is dropped after this.
// How long a connection that refused a remote access waits, when destroyed,
// for the peer to read the refusal and close (see ~TcpConnection).
constexpr auto kLingerOnError = std::chrono::milliseconds(250);

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// Sockets in setup at once per listener; more are closed at once.
constexpr size_t kMaxPendingHandshakes = 256;
// Free space made before each recv on a connection.
constexpr size_t kMinRecvSpace = 64 << 10;
// Idle send/receive buffers larger than this are released.
constexpr size_t kIdleBufferKeep = 4 << 20;
// A reader stops taking requests while this many response bytes wait for
// the peer to read them, and resumes below the low-water mark.
constexpr size_t kOutHighWater = 128 << 20;
constexpr size_t kOutLowWater = 16 << 20;
// Queue depth limits (Options are clamped into [1, kMaxQueueDepth]).
constexpr uint32_t kMaxQueueDepth = 1 << 16;
// SENDs that arrived before a receive was posted: at most this many bytes.
constexpr size_t kMaxUnmatchedBytes = 64 << 20;
// Longer waits are clamped so that deadlines never overflow.
constexpr auto kMaxWait = std::chrono::hours(24 * 365);

std::atomic<uint64_t> g_next_connection_id{1};

Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

template <typename Duration>
Clock::time_point DeadlineAfter(Duration timeout) {
  const auto wait = std::clamp<std::chrono::microseconds>(
      std::chrono::duration_cast<std::chrono::microseconds>(timeout), std::chrono::microseconds(0),
      std::chrono::duration_cast<std::chrono::microseconds>(kMaxWait));
  return Clock::now() + wait;
}

// Milliseconds until `deadline`, rounded up, for poll(2).
int MillisUntil(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Printable text of untrusted bytes: stops at the first NUL, replaces
// anything unprintable.
std::string PrintableText(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && p[i] != 0; ++i) {
    out.push_back(p[i] >= 0x20 && p[i] < 0x7f ? static_cast<char>(p[i]) : '?');
  }
  return out;
}


// 8-byte words of registered memory, which may be of any type.
typedef uint64_t __attribute__((__may_alias__)) AliasedWord;

// Copies out of registered memory that its owner may be storing to at the
// same time (index slots are published with one aligned 8-byte release
// store): every aligned 8-byte word is read with one atomic acquire load,
// so it is never torn, and pairs with the owner's release store; the
// unaligned head and tail are read bytewise, also atomically.
void CopyFromShared(uint8_t* dst, const uint8_t* src, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(src) & 7) != 0) {
    *dst++ = __atomic_load_n(src++, __ATOMIC_ACQUIRE);
    --n;
  }
  for (; n >= 8; n -= 8, src += 8, dst += 8) {
    const uint64_t word = __atomic_load_n(reinterpret_cast<const AliasedWord*>(src), __ATOMIC_ACQUIRE);
    std::memcpy(dst, &word, 8);
  }
  while (n > 0) {
    *dst++ = __atomic_load_n(src++, __ATOMIC_ACQUIRE);
    --n;
  }
}

// The mirror image for a remote WRITE: aligned words with one atomic
// release store each, the rest bytewise, so that an owner reading its
// memory concurrently (a misbehaving peer writing into a ring the owner is
// reading) sees whole words and no data race.
void CopyToShared(uint8_t* dst, const uint8_t* src, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(dst) & 7) != 0) {
    __atomic_store_n(dst++, *src++, __ATOMIC_RELEASE);
    --n;
  }
  for (; n >= 8; n -= 8, src += 8, dst += 8) {
    uint64_t word;
    std::memcpy(&word, src, 8);
    __atomic_store_n(reinterpret_cast<AliasedWord*>(dst), word, __ATOMIC_RELEASE);
  }
  while (n > 0) {
    __atomic_store_n(dst++, *src++, __ATOMIC_RELEASE);
    --n;
  }
}

// ---------------------------------------------------------------------------
// File descriptors and buffers.

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A FIFO of bytes: appended at the tail, consumed at the head; grows
// without zeroing. Not thread-safe.
class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&& other) noexcept
      : data_(std::move(other.data_)),
        capacity_(std::exchange(other.capacity_, 0)),
        head_(std::exchange(other.head_, 0)),
        tail_(std::exchange(other.tail_, 0)) {}
  ByteBuffer& operator=(ByteBuffer&&) = delete;

  uint8_t* head() { return data_.get() + head_; }
  size_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }
  uint8_t* tail() { return data_.get() + tail_; }
  size_t tail_space() const { return capacity_ - tail_; }

  // Makes room for at least `n` more bytes at the tail.
  void Reserve(size_t n) {
    if (capacity_ - tail_ >= n) return;
    const size_t live = size();
    if (head_ > 0 && capacity_ - live >= n) {
      std::memmove(data_.get(), head(), live);
    } else {
      const size_t capacity = std::max({capacity_ * 2, live + n, size_t{4096}});
      auto fresh = std::make_unique_for_overwrite<uint8_t[]>(capacity);
      if (live > 0) std::memcpy(fresh.get(), head(), live);
      data_ = std::move(fresh);
      capacity_ = capacity;
    }
    head_ = 0;
    tail_ = live;
  }
  void Commit(size_t n) { tail_ += n; }
  // Returns `n` writable bytes appended at the tail.
  uint8_t* Append(size_t n) {
    Reserve(n);
    uint8_t* p = tail();
    tail_ += n;
    return p;
  }
  void Append(const void* src, size_t n) {
    if (n > 0) std::memcpy(Append(n), src, n);
  }
  void Consume(size_t n) {
    head_ += n;
    if (head_ == tail_) head_ = tail_ = 0;
  }
  // Releases the storage when nothing is buffered and it is over `keep`.
  void TrimIfIdle(size_t keep) {
    if (empty() && capacity_ > keep) {
      data_.reset();
      capacity_ = 0;
    }
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
  size_t head_ = 0;
  size_t tail_ = 0;
};

// Parses the frame at the head of `rx`: false while incomplete, an error
// when the header is invalid.
StatusOr<bool> TryParseFrame(ByteBuffer& rx, FrameHeader* header) {
  if (rx.size() < kHeaderBytes) return false;
  std::memcpy(header, rx.head(), kHeaderBytes);
  RKV_RETURN_IF_ERROR(tcp::ValidateHeader(*header));
  return rx.size() >= kHeaderBytes + header->payload_len;
}

std::string SockaddrToString(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "unknown";
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown";
  return SockaddrToString(reinterpret_cast<sockaddr*>(&ss));
}

Status SetNoDelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return PosixError("setsockopt(TCP_NODELAY)", errno);
  }
  return Status::Ok();
}

StatusOr<UniqueFd> MakeEventFd() {
  UniqueFd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) return PosixError("eventfd", errno);
  return fd;
}

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  // EAGAIN (counter saturated) still leaves the fd readable: nothing to do.
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void DrainEventFd(int fd) {
  uint64_t value;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

// Waits until `fd` has `events` or `deadline` passes (DEADLINE_EXCEEDED
// with `what`).
Status WaitFd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, MillisUntil(deadline));
    if (r > 0) return Status::Ok();
    if (r == 0) return DeadlineExceeded(what);
    if (errno != EINTR) return PosixError("poll", errno);
  }
}

// Sends all of [p, p+n) on a non-blocking socket by `deadline`.
Status SendAllBy(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "timed out sending to " + what));
      continue;
    }
    return PosixError("send to " + what, errno);
  }
  return Status::Ok();
}

// Reads from a non-blocking socket until `rx` holds one whole frame, by
// `deadline`. The frame stays at the head of `rx`.
StatusOr<FrameHeader> ReadFrameBy(int fd, ByteBuffer& rx, Clock::time_point deadline, const std::string& what) {
  FrameHeader h;
  for (;;) {
    RKV_ASSIGN_OR_RETURN(const bool complete, TryParseFrame(rx, &h));
    if (complete) return h;
    rx.Reserve(4096);
    const ssize_t r = ::recv(fd, rx.tail(), rx.tail_space(), MSG_DONTWAIT);
    if (r > 0) {
      rx.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return Unavailable(what + " closed the connection during setup");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "timed out waiting for " + what));
      continue;
    }
    return PosixError("recv from " + what, errno);
  }
}

// ---------------------------------------------------------------------------
// Registered memory.

// Thread safety: all methods are thread-safe. Remote accesses run under the
// shared lock, so a region cannot be deregistered (and its memory freed by
// its owner) while a transport thread copies from or into it.
class Registry {
 public:
  // Adds a region; returns its random nonzero rkey. `owner` is the id of
  // the only connection allowed remote access, or 0 for all.
  uint32_t Add(uint8_t* base, size_t length, uint32_t access, uint64_t owner) {
    std::unique_lock lock(mu_);
    for (;;) {
      const uint32_t rkey = static_cast<uint32_t>(rng_());
      if (rkey != 0 && regions_.emplace(rkey, Entry{base, length, access, owner}).second) return rkey;
    }
  }

  void Remove(uint32_t rkey) {
    std::unique_lock lock(mu_);
    regions_.erase(rkey);
  }

  // Runs fn(pointer to `addr`) under the shared lock when connection `conn`
  // may access [addr, addr+len) of region `rkey` with the rights `need`;
  // otherwise returns PERMISSION_DENIED with the reason and runs nothing.
  template <typename Fn>
  Status Access(uint32_t rkey, uint64_t addr, uint32_t len, uint32_t need, uint64_t conn, Fn&& fn) {
    std::shared_lock lock(mu_);
    const auto it = regions_.find(rkey);
    if (it == regions_.end()) return PermissionDenied("rkey " + Hex(rkey) + " is not registered");
    const Entry& r = it->second;
    if (r.owner != 0 && r.owner != conn) {
      return PermissionDenied("rkey " + Hex(rkey) + " is registered for another connection");
    }
    if ((r.access & need) != need) {
      return PermissionDenied("rkey " + Hex(rkey) + " is not registered for remote " +
                              (need == kRemoteRead ? "read" : "write"));
    }
    const uint64_t base = reinterpret_cast<uint64_t>(r.base);
    if (addr < base || addr - base > r.length || len > r.length - (addr - base)) {
      return PermissionDenied("[" + Hex(addr) + ", +" + std::to_string(len) + ") is outside rkey " +
                              Hex(rkey) + " ([" + Hex(base) + ", +" + std::to_string(r.length) + "))");
    }
    fn(r.base + (addr - base));
    return Status::Ok();
  }

 private:
  struct Entry {
    uint8_t* base;
    size_t length;
    uint32_t access;
    uint64_t owner;
  };

  std::shared_mutex mu_;
  std::unordered_map<uint32_t, Entry> regions_;  // guarded by mu_
  std::mt19937 rng_{std::random_device{}()};     // guarded by mu_ (exclusive)
};

// A registered region; deregisters itself when destroyed. lkey == rkey.
class TcpMemoryRegion final : public MemoryRegion {
 public:
  TcpMemoryRegion(std::shared_ptr<Registry> registry, uint8_t* data, size_t size, uint32_t access,
                  uint32_t rkey)
      : MemoryRegion(data, size, /*lkey=*/rkey, rkey), registry_(std::move(registry)), access_(access) {}
  ~TcpMemoryRegion() override { registry_->Remove(rkey()); }

  uint32_t access() const { return access_; }

 private:
  const std::shared_ptr<Registry> registry_;
  const uint32_t access_;
};

StatusOr<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<Registry>& registry, void* addr,
                                                       size_t length, uint32_t access, uint64_t owner) {
  if (addr == nullptr || length == 0) return InvalidArgument("cannot register an empty region");
  if ((access & ~uint32_t{kLocalWrite | kRemoteRead | kRemoteWrite}) != 0) {
    return InvalidArgument("unknown access bits " + Hex(access));
  }
  if ((access & kRemoteWrite) != 0 && (access & kLocalWrite) == 0) {
    return InvalidArgument("kRemoteWrite needs kLocalWrite (as with ibv_reg_mr)");
  }
  if (reinterpret_cast<uintptr_t>(addr) > UINTPTR_MAX - length) {
    return InvalidArgument("region wraps around the address space");
  }
  auto* base = static_cast<uint8_t*>(addr);
  const uint32_t rkey = registry->Add(base, length, access, owner);
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<TcpMemoryRegion>(registry, base, length, access, rkey));
}

// The local bytes a LocalBuf names, after checking it.
StatusOr<uint8_t*> ResolveLocal(const LocalBuf& buf, bool needs_local_write, const char* what) {
  if (buf.mr == nullptr) return InvalidArgument(std::string(what) + " has no memory region");
  const auto* mr = dynamic_cast<const TcpMemoryRegion*>(buf.mr);
  if (mr == nullptr) return InvalidArgument(std::string(what) + " is not registered with the tcp transport");
  if (buf.offset > mr->size() || buf.length > mr->size() - buf.offset) {
    return InvalidArgument(std::string(what) + " [" + std::to_string(buf.offset) + ", +" +
                           std::to_string(buf.length) + ") is outside its region of " +
                           std::to_string(mr->size()) + " bytes");
  }
  if (needs_local_write && (mr->access() & kLocalWrite) == 0) {
    return InvalidArgument(std::string(what) + " is in a region without kLocalWrite");
  }
  if (buf.length > tcp::kMaxOpBytes) {
    return InvalidArgument(std::string(what) + " of " + std::to_string(buf.length) +
                           " bytes exceeds the tcp transport limit of " + std::to_string(tcp::kMaxOpBytes));
  }
  return mr->data() + buf.offset;
}

// ---------------------------------------------------------------------------
// Connections.

// Thread safety: the application thread calls the Connection methods (one
// at a time, per the interface); the reader thread serves the socket. They
// share the work queues and completions under `mu_` and the outgoing byte
// queue under `out_mu_`. Lock order: registry, then mu_, then out_mu_
// (never mu_ while holding out_mu_).
//
// Invariants:
//   - send_queue_ holds the posted, unfinished send-side work requests in
//     sequence order; the peer answers them in that order.
//   - Once failed_ is set, both work queues are empty (flushed into
//     completions) and nothing is ever queued again.
//   - The reader thread runs only in kActive.
class TcpConnection final : public Connection {
 public:
  TcpConnection(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd, UniqueFd wake_fd,
                std::vector<uint8_t> peer_private_data, ByteBuffer rx, bool established)
      : registry_(std::move(registry)),
        id_(g_next_connection_id.fetch_add(1, std::memory_order_relaxed)),
        fd_(std::move(fd)),
        wake_fd_(std::move(wake_fd)),
        peer_address_(PeerName(fd_.get())),
        peer_private_data_(std::move(peer_private_data)),
        max_send_wr_(std::clamp<uint32_t>(options.max_send_wr, 1, kMaxQueueDepth)),
        max_recv_wr_(std::clamp<uint32_t>(options.max_recv_wr, 1, kMaxQueueDepth)),
        state_(established ? State::kActive : State::kPending),
        rx_(std::move(rx)) {}

  // Teardown: stop and wake the reader, join it, then close the socket
  // (members), then deregister private regions (members, after the join:
  // the reader may be copying into one until then).
  ~TcpConnection() override {
    LingerIfRefused();
    stop_.store(true, std::memory_order_release);
    ::shutdown(fd_.get(), SHUT_RDWR);
    SignalEventFd(wake_fd_.get());
    if (reader_.joinable()) reader_.join();
  }

  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  // Starts the reader thread; once, when the connection becomes active.
  void Start() { reader_ = std::thread([this] { ReaderLoop(); }); }

  std::span<const uint8_t> peer_private_data() const override { return peer_private_data_; }
  std::string peer_address() const override { return peer_address_; }

  StatusOr<MemoryRegion*> RegisterPrivate(void* addr, size_t length, uint32_t access) override {
    if (state_.load(std::memory_order_acquire) != State::kPending) {
      return FailedPrecondition("RegisterPrivate is only for a pending connection");
    }
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> mr, RegisterRegion(registry_, addr, length, access, id_));
    private_regions_.push_back(std::move(mr));
    return private_regions_.back().get();
  }

  Status Accept(std::span<const uint8_t> reply) override {
    if (reply.size() > tcp::kMaxAcceptData) {
      return InvalidArgument("accept data of " + std::to_string(reply.size()) + " bytes exceeds " +
                             std::to_string(tcp::kMaxAcceptData));
    }
    if (state_.load(std::memory_order_acquire) != State::kPending) {
      return FailedPrecondition("connection is not pending");
    }
    {
      std::lock_guard lock(mu_);
      if (failed_) return error_;
    }
    FrameHeader h = tcp::MakeHeader(FrameType::kAccept, 0);
    h.payload_len = static_cast<uint32_t>(reply.size());
    Status sent;
    {
      std::lock_guard lock(out_mu_);
      out_.Append(&h, kHeaderBytes);
      out_.Append(reply.data(), reply.size());
      sent = FlushLocked();
    }
    if (!sent.ok()) {
      Break(sent.message());
      return sent;
    }
    // What did not fit the socket buffer is sent by the reader.
    state_.store(State::kActive, std::memory_order_release);
    Start();
    return Status::Ok();
  }

  void Reject(const Rejection& why) override {
    if (state_.load(std::memory_order_acquire) != State::kPending) return;
    state_.store(State::kClosed, std::memory_order_release);
    const std::vector<uint8_t> encoded = EncodeRejection(why);
    const std::span<const uint8_t> reply(encoded);
    static_assert(kMaxRejectionBytes <= tcp::kMaxRejectData);
    std::vector<uint8_t> frame(kHeaderBytes + reply.size());
    FrameHeader h = tcp::MakeHeader(FrameType::kReject, 0);
    h.payload_len = static_cast<uint32_t>(reply.size());
    std::memcpy(frame.data(), &h, kHeaderBytes);
    if (!reply.empty()) std::memcpy(frame.data() + kHeaderBytes, reply.data(), reply.size());
    const Status sent =
        SendAllBy(fd_.get(), frame.data(), frame.size(), DeadlineAfter(std::chrono::seconds(1)), peer_address_);
    if (!sent.ok()) LOG(WARNING) << "tcp transport: rejecting " << peer_address_ << ": " << sent;
    // SHUT_WR, not close: the reject reaches the peer before the EOF.
    ::shutdown(fd_.get(), SHUT_WR);
    Fail("connection rejected");
  }

  Status PostReads(std::span<const ReadOp> ops) override {
    if (ops.empty()) return Status::Ok();
    read_dst_.clear();
    for (const ReadOp& op : ops) {
      RKV_ASSIGN_OR_RETURN(uint8_t* dst, ResolveLocal(op.local, /*needs_local_write=*/true, "READ destination"));
      read_dst_.push_back(dst);
    }
    uint64_t first_seq = 0;
    {
      std::lock_guard lock(mu_);
      RKV_RETURN_IF_ERROR(CheckPostableLocked(ops.size()));
      first_seq = next_seq_;
      next_seq_ += ops.size();
      for (size_t i = 0; i < ops.size(); ++i) {
        send_queue_.push_back(SendWr{first_seq + i, ops[i].wr_id, OpType::kRead, ops[i].signaled, read_dst_[i],
                                     ops[i].local.length});
      }
    }
    // One send for the whole chain: the peer serves it in one batch.
    SendFrames([&](ByteBuffer& out) {
      for (size_t i = 0; i < ops.size(); ++i) {
        FrameHeader h = tcp::MakeHeader(FrameType::kReadReq, first_seq + i);
        h.addr = ops[i].remote.addr;
        h.rkey = ops[i].remote.rkey;
        h.op_len = ops[i].local.length;
        out.Append(&h, kHeaderBytes);
      }
    });
    return Status::Ok();
  }

  Status PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send, uint64_t wr_id) override {
    RKV_ASSIGN_OR_RETURN(const uint8_t* src, ResolveLocal(write_src, false, "WRITE source"));
    RKV_ASSIGN_OR_RETURN(const uint8_t* msg, ResolveLocal(send, false, "SEND buffer"));
    uint64_t seq = 0;
    {
      std::lock_guard lock(mu_);
      RKV_RETURN_IF_ERROR(CheckPostableLocked(2));
      seq = next_seq_;
      next_seq_ += 2;
      // Both carry the caller's wr_id: a failed WRITE reports it too.
      send_queue_.push_back(SendWr{seq, wr_id, OpType::kWrite, false, nullptr, write_src.length});
      send_queue_.push_back(SendWr{seq + 1, wr_id, OpType::kSend, true, nullptr, send.length});
    }
    SendFrames([&](ByteBuffer& out) {
      FrameHeader w = tcp::MakeHeader(FrameType::kWrite, seq);
      w.addr = write_dst.addr;
      w.rkey = write_dst.rkey;
      w.payload_len = write_src.length;
      out.Append(&w, kHeaderBytes);
      out.Append(src, write_src.length);
      FrameHeader s = tcp::MakeHeader(FrameType::kSend, seq + 1);
      s.payload_len = send.length;
      out.Append(&s, kHeaderBytes);
      out.Append(msg, send.length);
    });
    return Status::Ok();
  }

  Status PostSend(LocalBuf send, uint64_t wr_id) override {
    RKV_ASSIGN_OR_RETURN(const uint8_t* msg, ResolveLocal(send, false, "SEND buffer"));
    uint64_t seq = 0;
    {
      std::lock_guard lock(mu_);
      RKV_RETURN_IF_ERROR(CheckPostableLocked(1));
      seq = next_seq_++;
      send_queue_.push_back(SendWr{seq, wr_id, OpType::kSend, true, nullptr, send.length});
    }
    SendFrames([&](ByteBuffer& out) {
      FrameHeader s = tcp::MakeHeader(FrameType::kSend, seq);
      s.payload_len = send.length;
      out.Append(&s, kHeaderBytes);
      out.Append(msg, send.length);
    });
    return Status::Ok();
  }

  Status PostRecv(LocalBuf buf, uint64_t wr_id) override {
    RKV_ASSIGN_OR_RETURN(uint8_t* dst, ResolveLocal(buf, /*needs_local_write=*/true, "receive buffer"));
    bool broke = false;
    {
      std::lock_guard lock(mu_);
      if (failed_) return error_;
      if (!unmatched_sends_.empty()) {
        // A SEND that arrived before any receive was posted.
        std::vector<uint8_t> msg = std::move(unmatched_sends_.front());
        unmatched_sends_.pop_front();
        unmatched_bytes_ -= msg.size();
        if (msg.size() > buf.length) {
          completions_.push_back(Completion{wr_id, OpType::kRecv, TooLong(msg.size(), buf.length), 0});
          FailLocked("a received message did not fit its receive buffer");
          broke = true;
        } else {
          if (!msg.empty()) std::memcpy(dst, msg.data(), msg.size());
          completions_.push_back(Completion{wr_id, OpType::kRecv, Status::Ok(), static_cast<uint32_t>(msg.size())});
          cv_.notify_all();
        }
      } else {
        if (recv_queue_.size() >= max_recv_wr_) {
          return ResourceExhausted("receive queue full (" + std::to_string(max_recv_wr_) + ")");
        }
        recv_queue_.push_back(RecvWr{wr_id, dst, buf.length});
      }
    }
    if (broke) ::shutdown(fd_.get(), SHUT_RDWR);
    return Status::Ok();
  }

  StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds timeout) override {
    std::unique_lock lock(mu_);
    if (out.empty()) return failed_ && completions_.empty() ? StatusOr<size_t>(error_) : StatusOr<size_t>(0);
    if (completions_.empty() && !failed_) {
      // The reader pushes completions under mu_ and then notifies: waking
      // here with the lock held sees everything it copied (READ data,
      // received messages, remote WRITEs that preceded a SEND).
      cv_.wait_until(lock, DeadlineAfter(timeout), [this] { return !completions_.empty() || failed_; });
    }
    size_t n = 0;
    while (n < out.size() && !completions_.empty()) {
      out[n++] = std::move(completions_.front());
      completions_.pop_front();
    }
    if (n == 0 && failed_ && completions_.empty()) return error_;
    return n;
  }

  void Disconnect() override {
    LingerIfRefused();
    Fail("disconnected locally");
    stop_.store(true, std::memory_order_release);
    ::shutdown(fd_.get(), SHUT_RDWR);
    SignalEventFd(wake_fd_.get());
  }

 private:
  enum class State : uint8_t { kPending, kActive, kClosed };

  struct SendWr {
    uint64_t seq;
    uint64_t wr_id;
    OpType op;
    bool signaled;
    uint8_t* dst;     // kRead: where the data goes
    uint32_t length;  // bytes read, written or sent
  };
  struct RecvWr {
    uint64_t wr_id;
    uint8_t* buf;
    uint32_t length;
  };

  static Status TooLong(size_t got, size_t room) {
    return Internal("received message of " + std::to_string(got) + " bytes exceeds the receive buffer of " +
                    std::to_string(room) + " bytes");
  }

  Status CheckPostableLocked(size_t n) const {
    if (failed_) return error_;
    if (state_.load(std::memory_order_acquire) != State::kActive) {
      return FailedPrecondition("connection to " + peer_address_ + " is not established");
    }
    if (send_queue_.size() + n > max_send_wr_) {
      return ResourceExhausted("send queue full (" + std::to_string(max_send_wr_) + " outstanding)");
    }
    return Status::Ok();
  }

  // Moves to the error state: every queued work request completes with
  // UNAVAILABLE, later posts fail, Poll reports UNAVAILABLE once drained.
  void FailLocked(const std::string& why) {
    if (failed_) return;
    failed_ = true;
    error_ = Unavailable("connection to " + peer_address_ + " failed: " + why);
    for (const SendWr& wr : send_queue_) {
      completions_.push_back(Completion{wr.wr_id, wr.op, Unavailable("flushed: " + why), 0});
    }
    send_queue_.clear();
    for (const RecvWr& wr : recv_queue_) {
      completions_.push_back(Completion{wr.wr_id, OpType::kRecv, Unavailable("flushed: " + why), 0});
    }
    recv_queue_.clear();
    unmatched_sends_.clear();
    unmatched_bytes_ = 0;
    cv_.notify_all();
  }

  void Fail(const std::string& why) {
    std::lock_guard lock(mu_);
    FailLocked(why);
  }

  // Fails and closes the socket; the reader sees EOF and exits.
  void Break(const std::string& why) {
    Fail(why);
    ::shutdown(fd_.get(), SHUT_RDWR);
  }

  // Sends what it can of `out_` without blocking. Caller holds out_mu_.
  Status FlushLocked() {
    while (!out_.empty()) {
      const ssize_t r = ::send(fd_.get(), out_.head(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        out_.Consume(static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return PosixError("send to " + peer_address_, errno);
    }
    out_.TrimIfIdle(kIdleBufferKeep);
    return Status::Ok();
  }

  // Application thread: appends frames with `fill` and sends what the
  // socket takes now; the reader sends the rest.
  template <typename Fill>
  void SendFrames(Fill&& fill) {
    Status sent;
    bool leftover = false;
    {
      std::lock_guard lock(out_mu_);
      if (out_closed_) return;
      fill(out_);
      sent = FlushLocked();
      leftover = !out_.empty();
    }
    if (!sent.ok()) {
      // The work requests are queued: they complete with the error.
      Break(sent.message());
    } else if (leftover) {
      SignalEventFd(wake_fd_.get());
    }
  }

  size_t OutBacklog() {
    std::lock_guard lock(out_mu_);
    return out_closed_ ? 0 : out_.size();
  }

  // After this side refused a remote access, its last words (the refusal)
  // are sent and its side is shut: give the peer a moment to read them and
  // close. Closing at once, with the bytes the peer pipelined still unread
  // here, would send an RST, and an RST can destroy those last words before
  // the peer reads them.
  void LingerIfRefused() {
    if (!lingering_.load(std::memory_order_acquire)) return;
    const auto until = std::chrono::steady_clock::now() + kLingerOnError;
    while (!reader_done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // ---- reader thread

  void ReaderLoop() {
    ReaderBody();
    reader_done_.store(true, std::memory_order_release);
  }

  void ReaderBody() {
    Status end = ProcessFrames();
    if (end.ok()) end = FlushFromReader();
    while (end.ok()) {
      if (stop_.load(std::memory_order_acquire)) {
        end = Unavailable("disconnected locally");
        break;
      }
      const size_t backlog = OutBacklog();
      if (paused_ && backlog <= kOutLowWater) {
        paused_ = false;
        end = ProcessFrames();
        if (end.ok()) end = FlushFromReader();
        continue;
      }
      short events = paused_ ? 0 : POLLIN;
      if (backlog > 0) events |= POLLOUT;
      pollfd fds[2] = {{fd_.get(), events, 0}, {wake_fd_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        end = PosixError("poll", errno);
        break;
      }
      if ((fds[1].revents & POLLIN) != 0) DrainEventFd(wake_fd_.get());
      if ((fds[0].revents & POLLNVAL) != 0) {
        end = Internal("socket closed under the reader");
        break;
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !paused_) {
        end = ReadAvailable();
        if (!end.ok()) break;
      }
      end = FlushFromReader();
    }
    Break(end.message());
  }

  Status FlushFromReader() {
    std::lock_guard lock(out_mu_);
    if (out_closed_) return Status::Ok();
    RKV_RETURN_IF_ERROR(FlushLocked());
    if (close_after_flush_ && out_.empty()) {
      // Our last words (an access error) are out: EOF follows them.
      ::shutdown(fd_.get(), SHUT_WR);
      out_closed_ = true;
    }
    return Status::Ok();
  }

  // Reads what the socket has and handles every complete frame.
  Status ReadAvailable() {
    for (;;) {
      rx_.Reserve(kMinRecvSpace);
      const size_t space = rx_.tail_space();
      const ssize_t r = ::recv(fd_.get(), rx_.tail(), space, MSG_DONTWAIT);
      if (r > 0) {
        rx_.Commit(static_cast<size_t>(r));
        RKV_RETURN_IF_ERROR(ProcessFrames());
        if (paused_ || static_cast<size_t>(r) < space) break;
        continue;
      }
      if (r == 0) return Unavailable("peer " + peer_address_ + " closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return PosixError("recv from " + peer_address_, errno);
    }
    rx_.TrimIfIdle(kIdleBufferKeep);
    return Status::Ok();
  }

  Status ProcessFrames() {
    FrameHeader h;
    for (;;) {
      if (rx_.size() < kHeaderBytes) return Status::Ok();
      if (OutBacklog() > kOutHighWater) {
        paused_ = true;
        return Status::Ok();
      }
      const StatusOr<bool> complete = TryParseFrame(rx_, &h);
      if (!complete.ok()) return ProtocolViolation(complete.status().message());
      if (!*complete) {
        // Room for the whole frame, so it arrives in place.
        rx_.Reserve(kHeaderBytes + h.payload_len - rx_.size());
        return Status::Ok();
      }
      const uint8_t* payload = rx_.head() + kHeaderBytes;
      const Status handled = discard_ ? Status::Ok() : HandleFrame(h, payload);
      rx_.Consume(kHeaderBytes + h.payload_len);
      RKV_RETURN_IF_ERROR(handled);
    }
  }

  Status ProtocolViolation(const std::string& what) {
    LOG(ERROR) << "tcp transport: protocol violation by " << peer_address_ << ": " << what
               << "; dropping the connection";
    return Internal("protocol violation by " + peer_address_ + ": " + what);
  }

  Status HandleFrame(const FrameHeader& h, const uint8_t* payload) {
    switch (static_cast<FrameType>(h.type)) {
      case FrameType::kReadReq: return ServeRead(h);
      case FrameType::kWrite: return ServeWrite(h, payload);
      case FrameType::kSend: return ServeSend(h, payload);
      case FrameType::kReadResp:
      case FrameType::kWriteNak:
      case FrameType::kSendAck: return HandleResponse(h, payload);
      default: break;
    }
    return ProtocolViolation(std::string(tcp::FrameTypeName(h.type)) + " frame after setup");
  }

  // Appends a response frame that carries `code` and (for errors) `text`.
  void AppendResponse(FrameType type, uint64_t seq, StatusCode code, std::string_view text) {
    text = text.substr(0, tcp::kMaxErrorText);
    FrameHeader h = tcp::MakeHeader(type, seq);
    h.status = static_cast<int32_t>(code);
    h.payload_len = static_cast<uint32_t>(text.size());
    std::lock_guard lock(out_mu_);
    if (out_closed_) return;
    out_.Append(&h, kHeaderBytes);
    out_.Append(text.data(), text.size());
  }

  // The peer's access was refused: tell it, then move to the error state
  // (as both queue pairs do on a remote access error), ignore whatever the
  // peer pipelined after it, and close once the answer is out. The rest of
  // the process is untouched.
  void RefuseRemoteAccess(FrameType response, uint64_t seq, const Status& why, const char* op) {
    LOG(WARNING) << "tcp transport: remote " << op << " by " << peer_address_ << " refused: " << why.message();
    AppendResponse(response, seq, why.code(), why.message());
    discard_ = true;
    close_after_flush_ = true;
    lingering_.store(true, std::memory_order_release);
    Fail("peer made an invalid remote " + std::string(op) + " (" + why.message() + ")");
  }

  Status ServeRead(const FrameHeader& h) {
    const Status access = registry_->Access(h.rkey, h.addr, h.op_len, kRemoteRead, id_, [&](const uint8_t* src) {
      FrameHeader r = tcp::MakeHeader(FrameType::kReadResp, h.seq);
      r.payload_len = h.op_len;
      std::lock_guard lock(out_mu_);
      if (out_closed_) return;
      uint8_t* p = out_.Append(kHeaderBytes + h.op_len);
      std::memcpy(p, &r, kHeaderBytes);
      CopyFromShared(p + kHeaderBytes, src, h.op_len);
    });
    if (!access.ok()) RefuseRemoteAccess(FrameType::kReadResp, h.seq, access, "READ");
    return Status::Ok();
  }

  Status ServeWrite(const FrameHeader& h, const uint8_t* payload) {
    const Status access = registry_->Access(h.rkey, h.addr, h.payload_len, kRemoteWrite, id_,
                                            [&](uint8_t* dst) { CopyToShared(dst, payload, h.payload_len); });
    if (!access.ok()) RefuseRemoteAccess(FrameType::kWriteNak, h.seq, access, "WRITE");
    return Status::Ok();
  }

  Status ServeSend(const FrameHeader& h, const uint8_t* payload) {
    Status nak;
    {
      std::lock_guard lock(mu_);
      if (failed_) return Status::Ok();
      if (!unmatched_sends_.empty() || recv_queue_.empty()) {
        // No receive posted: keep it for the next PostRecv (verbs would
        // retry on RNR).
        if (unmatched_bytes_ + h.payload_len > kMaxUnmatchedBytes ||
            unmatched_sends_.size() >= kMaxQueueDepth) {
          nak = Internal("receiver not ready: too many messages wait for a receive buffer");
        } else {
          unmatched_sends_.emplace_back(payload, payload + h.payload_len);
          unmatched_bytes_ += h.payload_len;
        }
      } else {
        const RecvWr wr = recv_queue_.front();
        recv_queue_.pop_front();
        if (h.payload_len > wr.length) {
          nak = TooLong(h.payload_len, wr.length);
          completions_.push_back(Completion{wr.wr_id, OpType::kRecv, nak, 0});
        } else {
          if (h.payload_len > 0) std::memcpy(wr.buf, payload, h.payload_len);
          completions_.push_back(Completion{wr.wr_id, OpType::kRecv, Status::Ok(), h.payload_len});
          cv_.notify_all();
        }
      }
    }
    if (!nak.ok()) {
      AppendResponse(FrameType::kSendAck, h.seq, nak.code(), nak.message());
      discard_ = true;
      close_after_flush_ = true;
      Fail(nak.message());
      return Status::Ok();
    }
    AppendResponse(FrameType::kSendAck, h.seq, StatusCode::kOk, {});
    return Status::Ok();
  }

  // A response to one of our work requests.
  Status HandleResponse(const FrameHeader& h, const uint8_t* payload) {
    std::unique_lock lock(mu_);
    if (failed_) return Status::Ok();  // already flushed
    // Unsignaled WRITEs before the answered request have executed.
    while (!send_queue_.empty() && send_queue_.front().seq < h.seq) {
      if (send_queue_.front().op != OpType::kWrite) {
        return ProtocolViolation("response for request " + std::to_string(h.seq) + " skips request " +
                                 std::to_string(send_queue_.front().seq));
      }
      send_queue_.pop_front();
    }
    if (send_queue_.empty() || send_queue_.front().seq != h.seq) {
      return ProtocolViolation("response for unknown request " + std::to_string(h.seq));
    }
    const SendWr wr = send_queue_.front();
    const FrameType expected = wr.op == OpType::kRead    ? FrameType::kReadResp
                               : wr.op == OpType::kWrite ? FrameType::kWriteNak
                                                         : FrameType::kSendAck;
    if (static_cast<FrameType>(h.type) != expected) {
      return ProtocolViolation(std::string(tcp::FrameTypeName(h.type)) + " answers a " +
                               tcp::FrameTypeName(static_cast<uint8_t>(expected)) + " request");
    }
    if (h.status == 0) {
      if (wr.op == OpType::kRead ? h.payload_len != wr.length : h.payload_len != 0) {
        return ProtocolViolation("response of " + std::to_string(h.payload_len) + " bytes to request " +
                                 std::to_string(h.seq));
      }
      if (wr.op == OpType::kRead && wr.length > 0) std::memcpy(wr.dst, payload, wr.length);
      send_queue_.pop_front();
      if (wr.signaled) {
        completions_.push_back(Completion{wr.wr_id, wr.op, Status::Ok(), wr.length});
        cv_.notify_all();
      }
      return Status::Ok();
    }
    const char* op = wr.op == OpType::kRead ? "READ" : wr.op == OpType::kWrite ? "WRITE" : "SEND";
    const Status failed(static_cast<StatusCode>(h.status),
                        std::string("remote ") + op + " failed at " + peer_address_ + ": " +
                            PrintableText(payload, h.payload_len));
    send_queue_.pop_front();
    completions_.push_back(Completion{wr.wr_id, wr.op, failed, 0});
    FailLocked("a " + std::string(op) + " failed: " + failed.message());
    return failed;  // ends the reader; the socket is closed
  }

  const std::shared_ptr<Registry> registry_;
  const uint64_t id_;  // owner id of private regions
  const UniqueFd fd_;
  const UniqueFd wake_fd_;  // wakes the reader: stop, or bytes left in out_
  const std::string peer_address_;
  const std::vector<uint8_t> peer_private_data_;
  const uint32_t max_send_wr_;
  const uint32_t max_recv_wr_;
  std::atomic<State> state_;
  std::atomic<bool> stop_{false};

  // Application thread only.
  std::vector<std::unique_ptr<MemoryRegion>> private_regions_;
  std::vector<uint8_t*> read_dst_;  // scratch of PostReads

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SendWr> send_queue_;                   // guarded by mu_
  std::deque<RecvWr> recv_queue_;                   // guarded by mu_
  std::deque<std::vector<uint8_t>> unmatched_sends_;  // guarded by mu_
  size_t unmatched_bytes_ = 0;                      // guarded by mu_
  std::deque<Completion> completions_;              // guarded by mu_
  bool failed_ = false;                             // guarded by mu_
  Status error_;                                    // guarded by mu_
  uint64_t next_seq_ = 1;                           // guarded by mu_

  std::mutex out_mu_;
  ByteBuffer out_;           // guarded by out_mu_
  bool out_closed_ = false;  // guarded by out_mu_

  // Reader thread only (and the constructor).
  ByteBuffer rx_;
  bool discard_ = false;            // ignore the peer's frames (after an access error)
  bool close_after_flush_ = false;  // shut down our side once out_ is sent
  std::atomic<bool> lingering_{false};    // an access error was answered
  std::atomic<bool> reader_done_{false};  // the reader thread has finished
  bool paused_ = false;             // not reading: too much output backlog

  std::thread reader_;
};

// ---------------------------------------------------------------------------
// Listener.

// Thread safety: Next may be called from one thread at a time (it is
// serialized); Shutdown and address from any thread.
class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd, UniqueFd wake_fd,
              std::string address)
      : registry_(std::move(registry)),
        options_(options),
        fd_(std::move(fd)),
        wake_fd_(std::move(wake_fd)),
        address_(std::move(address)) {}

  std::string address() const override { return address_; }

  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout) override {
    std::lock_guard lock(mu_);
    const auto deadline = DeadlineAfter(timeout);
    std::vector<pollfd> fds;
    for (;;) {
      if (shutdown_.load(std::memory_order_acquire)) return Cancelled("listener " + address_ + " shut down");
      Clock::time_point wake_at = deadline;
      fds.clear();
      fds.push_back({fd_.get(), POLLIN, 0});
      fds.push_back({wake_fd_.get(), POLLIN, 0});
      for (const auto& hs : handshakes_) {
        fds.push_back({hs->fd.get(), POLLIN, 0});
        wake_at = std::min(wake_at, hs->deadline);
      }
      if (::poll(fds.data(), fds.size(), MillisUntil(wake_at)) < 0 && errno != EINTR) {
        return PosixError("poll", errno);
      }
      if ((fds[1].revents & POLLIN) != 0) DrainEventFd(wake_fd_.get());
      // Handshakes first (their fds are in `fds` by index), then new sockets.
      std::unique_ptr<Connection> ready;
      const auto now = Clock::now();
      size_t keep = 0;
      for (size_t i = 0; i < handshakes_.size(); ++i) {
        auto& hs = handshakes_[i];
        bool drop = false;
        if (ready == nullptr && fds[2 + i].revents != 0) {
          StatusOr<std::unique_ptr<Connection>> conn = Progress(*hs);
          if (!conn.ok()) {
            LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << " during setup: "
                         << conn.status();
            drop = true;
          } else if (*conn != nullptr) {
            ready = std::move(*conn);
            drop = true;
          }
        }
        if (!drop && now >= hs->deadline) {
          LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << ": no CONNECT in time";
          drop = true;
        }
        if (!drop) {
          if (keep != i) handshakes_[keep] = std::move(hs);
          ++keep;
        }
      }
      handshakes_.resize(keep);
      if ((fds[0].revents & POLLIN) != 0) AcceptSockets();
      if (ready != nullptr) return ready;
      if (Clock::now() >= deadline) return std::unique_ptr<Connection>();
    }
  }

  void Shutdown() override {
    shutdown_.store(true, std::memory_order_release);
    SignalEventFd(wake_fd_.get());
  }

 private:
  struct Handshake {
    UniqueFd fd;
    std::string peer;
    ByteBuffer rx;
    Clock::time_point deadline;
  };

  void AcceptSockets() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      UniqueFd fd(::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          LOG(WARNING) << "tcp transport: accept on " << address_ << ": " << std::strerror(errno);
        }
        return;
      }
      const std::string peer = SockaddrToString(reinterpret_cast<sockaddr*>(&ss));
      if (handshakes_.size() >= kMaxPendingHandshakes) {
        LOG(WARNING) << "tcp transport: " << handshakes_.size() << " connections in setup; dropping " << peer;
        continue;
      }
      const Status nodelay = SetNoDelay(fd.get());
      if (!nodelay.ok()) {
        LOG(WARNING) << "tcp transport: " << peer << ": " << nodelay;
        continue;
      }
      auto hs = std::make_unique<Handshake>();
      hs->fd = std::move(fd);
      hs->peer = peer;
      hs->deadline = Clock::now() + kHandshakeTimeout;
      handshakes_.push_back(std::move(hs));
    }
  }

  // Reads what a socket in setup has sent: a pending connection once its
  // CONNECT frame is whole, nullptr while incomplete, an error when the
  // peer does not speak the protocol or left.
  StatusOr<std::unique_ptr<Connection>> Progress(Handshake& hs) {
    FrameHeader h;
    for (;;) {
      RKV_ASSIGN_OR_RETURN(const bool complete, TryParseFrame(hs.rx, &h));
      if (complete) break;
      hs.rx.Reserve(512);
      const ssize_t r = ::recv(hs.fd.get(), hs.rx.tail(), hs.rx.tail_space(), MSG_DONTWAIT);
      if (r > 0) {
        hs.rx.Commit(static_cast<size_t>(r));
        continue;
      }
      if (r == 0) return Unavailable("peer closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return std::unique_ptr<Connection>();
      return PosixError("recv", errno);
    }
    if (static_cast<FrameType>(h.type) != FrameType::kConnect || h.seq != 0 || h.rkey != 0 || h.op_len != 0) {
      return InvalidArgument(std::string("expected a CONNECT frame, got ") + tcp::FrameTypeName(h.type));
    }
    const uint8_t* payload = hs.rx.head() + kHeaderBytes;
    std::vector<uint8_t> private_data(payload, payload + h.payload_len);
    hs.rx.Consume(kHeaderBytes + h.payload_len);
    RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
    return std::unique_ptr<Connection>(std::make_unique<TcpConnection>(
        registry_, options_, std::move(hs.fd), std::move(wake), std::move(private_data), std::move(hs.rx),
        /*established=*/false));
  }

  const std::shared_ptr<Registry> registry_;
  const Options options_;
  const UniqueFd fd_;
  const UniqueFd wake_fd_;
  const std::string address_;
  std::atomic<bool> shutdown_{false};

  std::mutex mu_;  // serializes Next
  std::vector<std::unique_ptr<Handshake>> handshakes_;  // guarded by mu_
};

// ---------------------------------------------------------------------------
// Transport.

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};

StatusOr<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(const std::string& host, uint16_t port, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0) return Unavailable("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(result);
}

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const Options& options) : options_(options), registry_(std::make_shared<Registry>()) {}

  Kind kind() const override { return Kind::kTcp; }

  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t length, uint32_t access) override {
    return RegisterRegion(registry_, addr, length, access, /*owner=*/0);
  }

  StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    std::string host;
    uint16_t port = 0;
    RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
    RKV_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, AI_PASSIVE));
    Status last = Unavailable("no address to listen on for '" + address + "'");
    for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last = PosixError("socket", errno);
        continue;
      }
      const int one = 1;
      if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        last = PosixError("setsockopt(SO_REUSEADDR)", errno);
        continue;
      }
      if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        last = PosixError("bind(" + address + ")", errno);
        continue;
      }
      if (::listen(fd.get(), SOMAXCONN) != 0) {
        last = PosixError("listen(" + address + ")", errno);
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        return PosixError("getsockname", errno);
      }
      RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
      return std::unique_ptr<Listener>(std::make_unique<TcpListener>(
          registry_, options_, std::move(fd), std::move(wake), SockaddrToString(reinterpret_cast<sockaddr*>(&ss))));
    }
    return last;
  }

  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address, std::span<const uint8_t> private_data,
                                                std::chrono::milliseconds timeout) override {
    if (private_data.size() > tcp::kMaxConnectData) {
      return InvalidArgument("connect private data of " + std::to_string(private_data.size()) +
                             " bytes exceeds " + std::to_string(tcp::kMaxConnectData));
    }
    std::string host;
    uint16_t port = 0;
    RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
    if (port == 0) return InvalidArgument("cannot connect to port 0 ('" + address + "')");
    const auto deadline = DeadlineAfter(timeout);
    RKV_ASSIGN_OR_RETURN(UniqueFd fd, Dial(host, port, address, deadline));
    RKV_RETURN_IF_ERROR(SetNoDelay(fd.get()));

    std::vector<uint8_t> hello(kHeaderBytes + private_data.size());
    FrameHeader h = tcp::MakeHeader(FrameType::kConnect, 0);
    h.addr = tcp::kHelloMagic;
    h.payload_len = static_cast<uint32_t>(private_data.size());
    std::memcpy(hello.data(), &h, kHeaderBytes);
    if (!private_data.empty()) std::memcpy(hello.data() + kHeaderBytes, private_data.data(), private_data.size());
    RKV_RETURN_IF_ERROR(SendAllBy(fd.get(), hello.data(), hello.size(), deadline, address));

    ByteBuffer rx;
    StatusOr<FrameHeader> reply = ReadFrameBy(fd.get(), rx, deadline, address);
    if (!reply.ok()) {
      if (reply.status().code() == StatusCode::kInvalidArgument) {
        return Unavailable("bad reply from " + address + ": " + reply.status().message());
      }
      return reply.status();
    }
    const uint8_t* payload = rx.head() + kHeaderBytes;
    const FrameType type = static_cast<FrameType>(reply->type);
    if (type == FrameType::kReject) {
      return RejectedStatus("connection to " + address,
                            DecodeRejection(std::span<const uint8_t>(payload, reply->payload_len)));
    }
    if (type != FrameType::kAccept) {
      return Unavailable(std::string("bad reply from ") + address + ": " + tcp::FrameTypeName(reply->type) +
                         " frame during setup");
    }
    std::vector<uint8_t> accept_data(payload, payload + reply->payload_len);
    rx.Consume(kHeaderBytes + reply->payload_len);  // what follows is data-path traffic
    RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
    auto conn = std::make_unique<TcpConnection>(registry_, options_, std::move(fd), std::move(wake),
                                                std::move(accept_data), std::move(rx), /*established=*/true);
    conn->Start();
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  // A connected non-blocking socket to host:port, by `deadline`.
  static StatusOr<UniqueFd> Dial(const std::string& host, uint16_t port, const std::string& address,
                                 Clock::time_point deadline) {
    RKV_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, 0));
    Status last = Unavailable("no address for '" + address + "'");
    for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last = PosixError("socket", errno);
        continue;
      }
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        // EINTR: the connect goes on asynchronously, as with EINPROGRESS.
        if (errno != EINPROGRESS && errno != EINTR) {
          last = PosixError("connect(" + address + ")", errno);
          continue;
        }
        RKV_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline, "timed out connecting to " + address));
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) {
          last = PosixError("connect(" + address + ")", err);
          continue;
        }
      }
      return fd;
    }
    return last;
  }

  const Options options_;
  const std::shared_ptr<Registry> registry_;
};

}  // namespace

StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const Options& options) {
  return std::unique_ptr<Transport>(std::make_unique<TcpTransport>(options));
}

}  // namespace rkv::transport
