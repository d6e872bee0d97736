// One connection of the tcp transport (either side): an emulated RC queue
// pair over one TCP socket. Internal to common/transport/tcp/; users see
// the Connection interface of common/transport/transport.h. Wire format:
// tcp_frame.h.
//
// Work requests. Each posted send-side work request (READ, WRITE, SEND)
// gets the next sequence number and one frame; the peer answers them in
// order (a READ with its data, a SEND with an acknowledgement, a WRITE only
// when it fails), so a response completes the oldest requests it covers.
// Posted receives wait in recv_queue_ for the peer's SENDs; a SEND that
// finds none is kept (up to a byte and message limit) for the next PostRecv,
// where verbs would have the peer retry on RNR.
//
// Serving the socket. Once the connection is established, something reads
// the peer's frames: serves its READ/WRITE/SEND frames straight from (into)
// registered memory, completes local work requests from the peer's
// responses, and sends what waits in the outgoing queue. For a server-side
// connection handed out with a PollGroup that is the thread in that
// group's Wait (TcpPollGroup, tcp_poll_group.h): a group member has no
// thread of its own. Otherwise it is the thread in Poll, while one waits
// there for a completion: it reads its own responses from the socket (no
// other thread wakes, none hands it the completion), spinning briefly and
// then sleeping in poll(2) on the socket. The connection's reader thread
// serves the socket while nobody polls: it leaves the socket to the
// polling thread while one polled within kHandBack (it then waits on the
// wake fd and for room to send only), and takes it back after that, so a
// frame that comes while nobody polls (a peer's READ of this side's
// memory, a SEND before its Poll) is served within kHandBack. Whoever
// serves holds serve_mu_ for each step. All run the same step (ServeStep:
// drain the wake fd, read and handle frames, resume a paused peer or a
// streamed READ response, flush, check the peer's deadlines); only the
// waiting between steps differs (poll(2) on the socket and wake fd, or the
// group's epoll). A refused remote access is
// answered, moves the connection to the error state (as both queue pairs do
// on a remote access error) and closes it once the answer is out; the rest
// of the process is untouched.
//
// Deadlock freedom: the socket is non-blocking and nobody ever blocks on a
// send. A frame that does not fit the kernel buffer stays in `out_` and the
// server side (reader thread or group) sends it when the socket is
// writable, so the reading side keeps reading and two peers do not wait on
// each other's full buffers. It stops at a request of the peer (READ,
// WRITE, SEND; responses are always taken) while the peer has
// kMaxReadsInFlight READ responses or kMaxQueuedResponseBytes of responses
// unread, or while a large READ response is still being streamed
// (tcp_frame.h); it resumes below a low-water mark. Two peers that both
// serve each other's READs and both stop reading that way could wait on
// each other; rkv's clients serve no READs.
//
// Streaming. A READ response longer than kReadChunkBytes is copied into
// `out_` a chunk at a time as the peer reads it. Until its last chunk is
// in, frames the application thread sends wait in `deferred_`, so that no
// frame lands inside the response.
//
// Limits on the peer (accepted connections only, from Options): the
// connection is closed when the peer sends no frame for idle_timeout while
// nothing waits for it, leaves a frame incomplete for frame_timeout, or
// reads none of the responses waiting for it for frame_timeout (its TCP
// acknowledges none of their bytes: stall_clock.h).
//
// Thread safety: the application thread calls the Connection methods (one
// at a time, per the interface); the serving thread (the reader thread, or
// the group's thread in Wait) serves the socket. For a group member both
// are the group's thread, except Accept, which runs on the server's accept
// thread and only hands the connection to the group (TcpPollGroup::Join).
// They share the work queues and completions under `mu_` and the outgoing
// byte queue under `out_mu_`. Lock order: registry, then mu_, then out_mu_
// (never mu_ while holding out_mu_).
//
// Invariants:
//   - send_queue_ holds the posted, unfinished send-side work requests in
//     sequence order; the peer answers them in that order.
//   - Once failed_ is set, both work queues are empty (flushed into
//     completions) and nothing is ever queued again.
//   - The socket is served only in kActive, by one thread at a time: the
//     reader thread (no group), or the group's thread, in Wait or in a
//     member's Disconnect or destructor while it lingers (LingerIfRefused).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/spin_window.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/socket_stream.h"
#include "common/transport/tcp/stall_clock.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

class TcpPollGroup;
struct GroupMember;

class TcpConnection final : public Connection {
 public:
  // Takes over `fd`, a connected non-blocking socket whose setup frames
  // (CONNECT and, for a client, ACCEPT) have been consumed; `rx` holds what
  // was read after them. `established`: the client side, which the caller
  // then Start()s; otherwise the connection is pending until Accept or
  // Reject. `wake_fd` is an eventfd for this connection alone. `group`
  // (pending connections only; may be null): the group the connection
  // joins on Accept instead of starting a reader thread; it must outlive
  // the connection. `tls` (may be null): the TLS session over `fd`, its
  // handshake done; every byte then goes through it.
  TcpConnection(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd, UniqueFd wake_fd,
                std::vector<uint8_t> peer_private_data, ByteBuffer rx, bool established,
                TcpPollGroup* group = nullptr, std::unique_ptr<TlsSession> tls = nullptr);

  // Teardown: leave the group (its epoll stops watching the socket), stop
  // and wake the reader, join it, then close the socket (members), then
  // deregister private regions (members, after the join: the reader may be
  // copying into one until then).
  ~TcpConnection() override;

  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  // Starts the reader thread; once, when the connection becomes active
  // (never for a group member).
  void Start();

  std::span<const uint8_t> peer_private_data() const override { return peer_private_data_; }
  std::string peer_address() const override { return peer_address_; }

  StatusOr<MemoryRegion*> RegisterPrivate(void* addr, size_t length, uint32_t access) override;
  Status Accept(std::span<const uint8_t> reply) override EXCLUDES(mu_, out_mu_);
  void Reject(const Rejection& why) override EXCLUDES(mu_);

  Status PostReads(std::span<const ReadOp> ops) override EXCLUDES(mu_, out_mu_);
  // FAILED_PRECONDITION on a poll group member, nothing posted: the READ's
  // response is read by the group's Wait, which the caller is not in.
  Status PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                          std::vector<Completion>* others) override EXCLUDES(mu_, out_mu_);
  Status PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send, uint64_t wr_id) override
      EXCLUDES(mu_, out_mu_);
  Status PostWriteSends(std::span<const WriteSendOp> ops) override EXCLUDES(mu_, out_mu_);
  Status PostSend(LocalBuf send, uint64_t wr_id) override EXCLUDES(mu_, out_mu_);
  // A READ frame of zero bytes (no rkey, no address), answered by the
  // peer's reader with an empty READ response.
  Status PostProbe(uint64_t wr_id) override EXCLUDES(mu_, out_mu_);
  Status PostRecv(LocalBuf buf, uint64_t wr_id) override EXCLUDES(mu_);
  StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds timeout) override EXCLUDES(mu_);
  void Disconnect() override EXCLUDES(mu_);

 private:
  // How long a connection that refused a remote access waits, when
  // destroyed, for the peer to read the refusal and close (see
  // LingerIfRefused).
  static constexpr auto kLingerOnError = std::chrono::milliseconds(250);
  // Free space made before each recv.
  static constexpr size_t kMinRecvSpace = 64 << 10;
  // The most one step reads: a peer that keeps its socket full cannot
  // hold a group's thread from the other members (the rest is read in
  // later steps; the socket stays readable).
  static constexpr size_t kReadBytesPerStep = 4 << 20;
  // Idle send/receive buffers larger than this are released.
  static constexpr size_t kIdleBufferKeep = 4 << 20;
  // The reader stops taking requests while this many response bytes wait
  // for the peer to read them, and resumes below the low-water mark.
  static constexpr size_t kOutHighWater = kMaxQueuedResponseBytes;
  static constexpr size_t kOutLowWater = kMaxQueuedResponseBytes / 4;
  // Adaptive polling bound (see ready_; the window's rule is
  // spin_window.h): the largest max_spin_.
  static constexpr int kMaxPollSpinUs = 1'000'000;
  // A READ response is copied into out_ at most this much at a time.
  static constexpr uint32_t kReadChunkBytes = 1 << 20;
  static_assert(kReadChunkBytes <= kOutHighWater);
  // Queue depth limit (Options are clamped into [1, kMaxQueueDepth]); also
  // the most SENDs kept for receives not yet posted.
  static constexpr uint32_t kMaxQueueDepth = 1 << 16;
  // SENDs that arrived before a receive was posted: at most this many bytes.
  static constexpr size_t kMaxUnmatchedBytes = 64 << 20;

  enum class State : uint8_t { kPending, kActive, kClosed };

  struct SendWr {
    uint64_t seq;
    uint64_t wr_id;
    OpType op;
    bool signaled;
    uint8_t* dst;     // kRead: where the data goes (its first piece)
    uint32_t length;  // bytes read (all pieces), written or sent
    // kRead: the further pieces (ReadOp::more); dst takes length minus
    // theirs. A piece of length 0 ends the list.
    std::array<uint8_t*, kMaxReadPieces - 1> more_dst{};
    std::array<uint32_t, kMaxReadPieces - 1> more_len{};
  };
  // A READ response whose payload is still being copied into out_.
  struct StreamedRead {
    uint32_t rkey;
    uint64_t addr;  // of the next byte to copy
    uint32_t left;  // bytes still to copy
  };
  // What waits in out_ for the peer.
  struct Backlog {
    size_t bytes;
    size_t reads;  // READ responses not wholly sent
  };
  struct RecvWr {
    uint64_t wr_id;
    uint8_t* buf;
    uint32_t length;
  };

  // ---- work queues and the error state (tcp_connection.cc)

  static Status TooLong(size_t got, size_t room);

  // OK when `n` more send-side work requests may be posted now.
  Status CheckPostableLocked(size_t n) const REQUIRES(mu_);

  // Moves to the error state: every queued work request completes with
  // UNAVAILABLE, later posts fail, Poll reports UNAVAILABLE once drained.
  void FailLocked(const std::string& why) REQUIRES(mu_);
  void Fail(const std::string& why) EXCLUDES(mu_);

  // Fails and closes the socket; the reader sees EOF and exits.
  void Break(const std::string& why) EXCLUDES(mu_);

  // After this side refused a remote access, its last words (the refusal)
  // are sent and its side is shut: give the peer a moment to read them and
  // close. Closing at once, with the bytes the peer pipelined still unread
  // here, would send an RST, and an RST can destroy those last words before
  // the peer reads them.
  void LingerIfRefused();

  // ---- the outgoing byte queue (tcp_connection.cc)

  // Sends what it can of `out_` without blocking; starts out_stall_ when
  // some is left, stops it when none is.
  Status FlushLocked() REQUIRES(out_mu_);
  // The bytes of out_ the peer's TCP has acknowledged, modulo 2^64 (only
  // changes mean anything).
  uint64_t PeerAckedLocked() const REQUIRES(out_mu_);

  // Application thread: appends frames with `fill` and sends what the
  // socket takes now; the reader sends the rest.
  template <typename Fill>
  void SendFrames(Fill&& fill) EXCLUDES(mu_, out_mu_);

  // What waits in `out_` (nothing once our side is shut).
  Backlog OutBacklog() EXCLUDES(out_mu_);

  // Appends a response frame that carries `code` and (for errors) `text`.
  void AppendResponse(FrameType type, uint64_t seq, StatusCode code, std::string_view text) EXCLUDES(out_mu_);

  // ---- serving the socket (tcp_connection_reader.cc)

  friend class TcpPollGroup;

  // What the socket should be watched for until the next step, and when
  // the next step must run at the latest for the peer's limits (max(): no
  // limit applies now).
  struct Watch {
    bool read;
    bool write;
    Clock::time_point give_up;
    // A group member's bytes left in out_ on purpose (ServeStep): the
    // group flushes them at its next Wait unless a post sent them first.
    bool flush_deferred = false;
  };

  // The reader thread's body.
  void ReaderLoop();
  // Poll's wait on a connection with a reader thread: serves the socket
  // on this thread until a completion is queued (ready_), the connection
  // breaks or `timeout` passes; spins (non-blocking reads) within the
  // adaptive window, then sleeps in ppoll(2) on the socket and the wake
  // fd. Returns whether it slept.
  bool ServeWhilePolling(std::chrono::microseconds timeout) EXCLUDES(mu_, out_mu_, serve_mu_);
  // The reader's poll(2) events for the socket after a step that asked
  // for `watch`: none for reading while a polling thread serves it.
  short ReaderEvents(const Watch& watch) const;
  // Serves the socket on the calling thread, waiting in poll(2) between
  // steps, until the connection ends (then it is broken) or `until`
  // passes. `begin`: first handle what setup left in rx_.
  void ServeOnThisThread(Clock::time_point until, bool begin) EXCLUDES(mu_, out_mu_);
  // Starts serving: the peer's deadlines run from now, and the frames read
  // with the setup frames are handled.
  Status BeginServing() EXCLUDES(mu_, out_mu_);
  // One step of serving (the class comment says what), after the socket
  // became `readable` (or hung up) and/or the wake fd was signalled
  // (`woken`); both false just re-checks. An error ends the connection:
  // the caller Breaks it with the error's message.
  // `from_poll`: the step runs in Poll's wait (ServeWhilePolling), whose
  // thread returns to the application once a completion is queued.
  StatusOr<Watch> ServeStep(bool readable, bool woken, bool from_poll = false) EXCLUDES(mu_, out_mu_);
  // Sends what the socket takes of `out_`, and shuts our side once the last
  // words after an access error are out.
  Status FlushFromReader() EXCLUDES(out_mu_);
  // Reads what the socket has (up to kReadBytesPerStep) and handles every
  // complete frame.
  Status ReadAvailable() EXCLUDES(mu_, out_mu_);
  Status ProcessFrames() EXCLUDES(mu_, out_mu_);
  Status ProtocolViolation(const std::string& what);
  Status HandleFrame(const FrameHeader& h, const uint8_t* payload) EXCLUDES(mu_, out_mu_);

  // The peer's access was refused: tell it, then move to the error state,
  // ignore whatever the peer pipelined after it, and close once the answer
  // is out.
  void RefuseRemoteAccess(FrameType response, uint64_t seq, const Status& why, const char* op)
      EXCLUDES(mu_, out_mu_);
  Status ServeRead(const FrameHeader& h) EXCLUDES(mu_, out_mu_);
  // Copies the next chunks of streaming_ into out_ while it has room; ends
  // the stream after the last one.
  Status ContinueRead() EXCLUDES(out_mu_);
  // Whether the peer's next request must wait (the class comment says when).
  bool MustWaitToServe(FrameType type) EXCLUDES(out_mu_);
  // The limits a peer can run into (Options::frame_timeout, idle_timeout).
  enum class PeerLimit : uint8_t { kNone, kUnreadResponses, kIncompleteFrame, kIdle };
  // When the serving step must run again for the peer's limits (max():
  // no limit applies now), with the limit that sets it (described only
  // when it is reached: this runs at every serving step). kNone: a look at
  // what the peer acknowledged (stall_clock.h), always after `now`; a
  // limit at or before `now` is reached.
  Clock::time_point PeerDeadline(const Backlog& backlog, Clock::time_point now, PeerLimit* limit)
      EXCLUDES(out_mu_);
  std::string DescribePeerLimit(PeerLimit limit, const Backlog& backlog) const;
  Status ServeWrite(const FrameHeader& h, const uint8_t* payload) EXCLUDES(mu_, out_mu_);
  Status ServeSend(const FrameHeader& h, const uint8_t* payload) EXCLUDES(mu_, out_mu_);
  // A response to one of our work requests.
  Status HandleResponse(const FrameHeader& h, const uint8_t* payload) EXCLUDES(mu_);
  // Copies a READ response's payload (wr.length bytes) into the READ's pieces.
  static void ScatterReadPayload(const SendWr& wr, const uint8_t* payload);

  const std::shared_ptr<Registry> registry_;
  const uint64_t id_;  // owner id of private regions
  const UniqueFd fd_;
  // fd_'s bytes, plain or through TLS: read by the serving thread, written
  // under out_mu_ (socket_stream.h).
  SocketStream io_;
  const UniqueFd wake_fd_;  // wakes the reader: stop, or bytes left in out_
  const std::string peer_address_;
  const std::vector<uint8_t> peer_private_data_;
  const uint32_t max_send_wr_;
  const uint32_t max_recv_wr_;
  // Limits on the peer; zero: none (always for a connection we made).
  const std::chrono::milliseconds idle_timeout_;
  const std::chrono::milliseconds frame_timeout_;
  // What serves the socket after Accept, when not a reader thread.
  TcpPollGroup* const group_;
  std::atomic<State> state_;
  std::atomic<bool> stop_{false};

  // Application thread only.
  std::vector<std::unique_ptr<MemoryRegion>> private_regions_;
  std::vector<SendWr> read_wrs_;  // scratch of PostReads (seq set under mu_)

  Mutex mu_;
  // Signalled whenever a completion is queued or the connection fails.
  CondVar cv_;
  std::deque<SendWr> send_queue_ GUARDED_BY(mu_);
  std::deque<RecvWr> recv_queue_ GUARDED_BY(mu_);
  std::deque<std::vector<uint8_t>> unmatched_sends_ GUARDED_BY(mu_);
  size_t unmatched_bytes_ GUARDED_BY(mu_) = 0;
  uint32_t largest_recv_ GUARDED_BY(mu_) = 0;  // longest receive buffer ever posted
  std::deque<Completion> completions_ GUARDED_BY(mu_);
  bool failed_ GUARDED_BY(mu_) = false;
  // Adaptive polling (Options::poll_spin_us, as on verbs): Poll serves the
  // socket itself (ServeWhilePolling), spinning up to spin_window_ with
  // non-blocking reads before it sleeps in ppoll(2). ready_ mirrors
  // "completions_ non-empty or failed_" (stored under mu_ with release by
  // NotifyPollersLocked and Poll; read without the lock, acquire). The
  // window adapts like verbs' (kMinSpinWindow..max_spin_): a wait that
  // ended within max_spin_ after the window doubles it, one that outlasted
  // max_spin_ halves it, so an idle connection stops spinning. What Poll
  // returns is always taken under mu_; a Poll that does not serve (the
  // connection not active, or failed) sleeps on cv_.
  std::atomic<bool> ready_{false};
  const std::chrono::microseconds max_spin_;
  std::atomic<int64_t> spin_window_us_;  // touched by the polling thread only; atomic for Poll from several
  // No spinning for a while after a spin lost its CPU (spin_window.h).
  SpinCooldown spin_cooldown_;
  // Stores ready_ and wakes threads sleeping in Poll.
  void NotifyPollersLocked() REQUIRES(mu_);
  Status error_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;

  Mutex out_mu_ ACQUIRED_AFTER(mu_);
  ByteBuffer out_ GUARDED_BY(out_mu_);
  bool out_closed_ GUARDED_BY(out_mu_) = false;  // our side is shut: nothing more is sent
  bool out_streaming_ GUARDED_BY(out_mu_) = false;  // a READ response is being streamed
  ByteBuffer deferred_ GUARDED_BY(out_mu_);          // frames sent during the stream
  uint64_t sent_total_ GUARDED_BY(out_mu_) = 0;      // bytes of out_ ever sent
  // Where (in sent_total_'s count) each READ response not wholly sent ends.
  std::deque<uint64_t> read_ends_ GUARDED_BY(out_mu_);
  // How long out_ has waited with no byte acknowledged by the peer
  // (frame_timeout_'s unread-responses limit); stopped while out_ is empty
  // or the socket takes all of it.
  StallClock out_stall_ GUARDED_BY(out_mu_){frame_timeout_};

  // Serving from Poll (see "Serving the socket" above). serve_mu_ is held
  // for each serving step by whoever runs it (the reader thread, or the
  // application thread in Poll); it orders the serving state below between
  // them. poller_serves_: a polling thread has served the socket and may
  // again, so the reader reads it only once that thread has stayed out of
  // Poll for kHandBack; polling_: a thread is in Poll's wait now;
  // poll_left_at_ns_: when it last left it (steady clock).
  static constexpr auto kHandBack = std::chrono::milliseconds(5);
  Mutex serve_mu_ ACQUIRED_BEFORE(mu_);
  std::atomic<bool> poller_serves_{false};
  std::atomic<bool> polling_{false};
  std::atomic<int64_t> poll_left_at_ns_{0};
  // The reader sleeps in poll(2) watching the socket for reading (no
  // time-out): a poller that reads the socket's bytes first does not wake
  // it, so one that leaves bytes for a post (poll_flush_deferred_) wakes it
  // to take the socket over at kHandBack.
  std::atomic<bool> reader_watches_socket_{false};

  // The serving thread only (whoever holds serve_mu_ on a connection with
  // a reader thread; the group's thread for a member), and the constructor.
  ByteBuffer rx_;
  bool discard_ = false;                  // ignore the peer's frames (after an access error)
  bool close_after_flush_ = false;        // shut down our side once out_ is sent
  std::atomic<bool> lingering_{false};    // an access error was answered
  std::atomic<bool> reader_done_{false};  // serving has ended (the connection broke)
  bool paused_ = false;                   // a request of the peer waits at the head of rx_
  std::optional<StreamedRead> streaming_;
  // The last step, a polling thread's, left bytes in out_ for the
  // application's next post to carry (ServeStep); the next wait in Poll,
  // or the reader within kHandBack, sends them if no post did.
  bool poll_flush_deferred_ = false;
  Clock::time_point last_frame_at_;       // when the peer's last whole frame was taken
  Clock::time_point partial_since_;       // when the frame at the head of rx_ began (if partial)

  // A group member's record in its group (tcp_poll_group.h), from Accept
  // until the destructor leaves the group; written by the group under its
  // mutex (Join) or on its thread (Leave), read on the group's thread.
  GroupMember* member_ = nullptr;

  std::thread reader_;
};

}  // namespace rkv::transport::tcp
