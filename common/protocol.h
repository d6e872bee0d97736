// The rkv data-plane protocol between a client and one server, on top of a
// transport (common/transport/transport.h). Fixed-size little-endian POD
// messages; every field that arrives from a peer is validated by the
// receiver before use.
//
// Connection setup (a challenge, then a proof; docs/design.md §7.2):
//   client -> server: a hello: ConnectRequestData with a zero nonce and
//                     MAC, as the connect private data (<= 56 bytes: the
//                     limit of rdma_connect on IB/RoCE).
//   server -> client: a refusal UNAUTHENTICATED whose Rejection detail is
//                     a challenge (kNonceBytes), made without allocating.
//   client -> server: ConnectRequestData with that nonce and its MAC.
//   server -> client: AcceptData as the accept private data (<= 196 bytes),
//                     or a refusal: the transport's Rejection {code, text}
//                     (common/transport/rejection.h).
// Requests (PUT / DELETE):
//   client RDMA-WRITEs a record (common/record.h, version 0) into its
//   staging ring at a 64-byte aligned offset, then SENDs a RequestMsg naming
//   it, chained in one doorbell. The server replies with a ReplyMsg SEND.
// Lookups (kGet; a client on a transport without one-sided hardware,
//   docs/design.md §4.1): the same, with a record of the key and an empty
//   value. The request names a landing slot in memory the client
//   registered kRemoteWrite for this connection (landing_*); the server
//   looks the key up and, when found, WRITEs the key's heap block there
//   (when it fits landing_bytes) chained before its reply, which carries
//   the block's slot word and version (NOT_FOUND: absent). The client
//   checks the landed block as it checks a READ's. Not remembered by the
//   server (a lookup changes nothing; a resent one is answered afresh).
//   At most AcceptData::request_credits requests may be outstanding on a
//   connection; each reply returns ReplyMsg::credits of them.
// Staging ring use: the server processes a connection's requests in order,
//   so the ring is a FIFO: a request's bytes are free again once its reply
//   has arrived.
// Request ids: a client numbers its PUT/DELETE requests uniquely per
//   client_id, across all of its connections to a server. The server
//   remembers its recent replies per client_id (server/apply/request_cache.h) and
//   answers a request id it has answered before with that reply again,
//   without applying it twice; a client may therefore resend a request
//   whose reply was lost, with the same id, on another connection to the
//   same server incarnation (epoch), with kRequestResent set in
//   RequestMsg::flags (so that a server whose bounded cache forgot the
//   client refuses it rather than apply it a second time).
// Refusals: a reply that is not OK carries a typed Refusal and, where the
//   refusal is about a cluster map, that map's version in its own field;
//   whether a write may be resent is decided from these fields alone
//   (docs/design.md §5.6), never from ReplyMsg::message, which is for people.
// Replication (server to server, docs/design.md "Replication"): a primary
//   connects to each backup of its shards like a client, with a
//   PeerConnectData (magic kPeerConnectMagic) that names it by
//   fingerprint and epoch, and forwards each write as kReplicatePut /
//   kReplicateDelete: the record carries the primary's version (non-zero)
//   and RequestMsg::map_version the primary's map version. A client
//   connection may send only kPut / kDelete / kGet, a peer connection only the
//   replica ops.
// Versions: a server accepts kProtocolVersion only and refuses every other
//   at the handshake, naming both (what each version changed:
//   docs/design.md §5.6).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv::protocol {

inline constexpr uint32_t kConnectMagic = 0x43564B52;  // "RKVC"
inline constexpr uint32_t kAcceptMagic = 0x41564B52;   // "RKVA"
inline constexpr uint32_t kPeerConnectMagic = 0x50564B52;  // "RKVP"
inline constexpr uint16_t kProtocolVersion = 8;

inline constexpr size_t kMaxConnectPrivateData = 56;
inline constexpr size_t kMaxAcceptPrivateData = 196;

inline constexpr size_t kTokenDigestBytes = 32;

// Connection setup proves the token without sending it or its digest
// (docs/design.md §7.2): the connecting side first sends a hello (the
// request below with an all-zero nonce and MAC); the server refuses it
// with UNAUTHENTICATED and a challenge, a kNonceBytes server nonce carried
// as the Rejection's detail; the connecting side connects again with the
// same request carrying that nonce and a MAC, HMAC-SHA256 keyed by
// TokenDigest(token) over kProofDomain and every byte of the request
// before the MAC, truncated to the MAC field (common/connect_proof.h).
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kClientMacBytes = 24;
inline constexpr size_t kPeerMacBytes = 16;
// How long a challenge may be answered, counted from its issue by the
// server's own clock (no clock is shared between machines): a proof is
// made at once, so a few round trips must fit.
inline constexpr uint32_t kChallengeLifetimeSeconds = 30;

struct ConnectRequestData {
  uint32_t magic;             // kConnectMagic
  uint16_t protocol_version;  // kProtocolVersion
  uint16_t layout_version;    // layout::kLayoutVersion
  uint64_t client_id;         // random per client instance (so per process):
                              // names the client in the server's replay
                              // cache and in logs
  uint8_t nonce[kNonceBytes];     // the server's challenge; all zero: a hello
  uint8_t mac[kClientMacBytes];   // the proof (all zero in a hello)
};
static_assert(sizeof(ConnectRequestData) == kMaxConnectPrivateData);
static_assert(offsetof(ConnectRequestData, mac) + kClientMacBytes == sizeof(ConnectRequestData));

// The connect private data of a replication connection. Its first 8
// bytes are laid out as ConnectRequestData's, so that the server reads
// magic and versions the same way for both; the sender's identity is in
// fields of its own. The receiving server accepts it only from a server of
// its current cluster map with that fingerprint and epoch.
struct PeerConnectData {
  uint32_t magic;               // kPeerConnectMagic
  uint16_t protocol_version;    // kProtocolVersion
  uint16_t layout_version;      // layout::kLayoutVersion
  uint64_t sender_fingerprint;  // PeerFingerprint(sender's server id),
                                // server/replication/replication.h
  uint64_t sender_epoch;        // >= 1
  uint8_t nonce[kNonceBytes];   // as ConnectRequestData's
  uint8_t mac[kPeerMacBytes];
};
static_assert(sizeof(PeerConnectData) == kMaxConnectPrivateData);
static_assert(offsetof(PeerConnectData, mac) + kPeerMacBytes == sizeof(PeerConnectData));
static_assert(offsetof(PeerConnectData, magic) == offsetof(ConnectRequestData, magic) &&
              offsetof(PeerConnectData, protocol_version) == offsetof(ConnectRequestData, protocol_version) &&
              offsetof(PeerConnectData, layout_version) == offsetof(ConnectRequestData, layout_version));

// What a client holds to connect: the fields its hello and proof carry
// and the key its proof is made with. Never sent as such.
struct ClientConnectParams {
  uint32_t magic;             // kConnectMagic
  uint16_t protocol_version;  // kProtocolVersion
  uint16_t layout_version;    // layout::kLayoutVersion
  uint64_t client_id;         // ConnectRequestData::client_id
  uint8_t token_digest[kTokenDigestBytes];  // TokenDigest(token): the MAC key
};

// What a server holds to open a replication connection.
struct PeerConnectParams {
  uint64_t sender_fingerprint;
  uint64_t sender_epoch;
  uint8_t token_digest[kTokenDigestBytes];  // TokenDigest(its peer token)
};

struct RegionDescriptor {
  uint64_t addr;    // remote virtual address of the first byte
  uint64_t length;  // bytes
  uint32_t rkey;
  uint32_t reserved;
};
static_assert(sizeof(RegionDescriptor) == 24);

struct AcceptData {
  uint32_t magic;             // kAcceptMagic
  uint16_t protocol_version;
  uint16_t layout_version;
  uint64_t epoch;             // server epoch; also in the table header
  RegionDescriptor index;     // REMOTE_READ: TableHeader + buckets
  RegionDescriptor heap;      // REMOTE_READ: blocks
  RegionDescriptor ring;      // REMOTE_WRITE, this connection only
  uint32_t request_credits;   // max outstanding requests on this connection
  uint32_t max_key_bytes;
  uint32_t max_value_bytes;
  uint32_t grace_period_us;   // heap quarantine; a GET lease is half of it
};
static_assert(sizeof(AcceptData) <= kMaxAcceptPrivateData);

// kPut / kDelete: a client's write (record version 0). kReplicatePut /
// kReplicateDelete: a primary's forward of a write it applies (record
// version = the primary's, non-zero); only on a peer connection.
// kGet: a client's lookup (see Lookups above).
enum class Op : uint8_t { kPut = 1, kDelete = 2, kReplicatePut = 3, kReplicateDelete = 4, kGet = 5 };

// RequestMsg::flags.
inline constexpr uint8_t kRequestResent = 1;  // client ops: this request id was sent to
                                               // this server incarnation before
inline constexpr uint8_t kRequestFlagsKnown = kRequestResent;

// RequestMsg::condition: a client PUT's precondition on the key, checked by
// the primary inside the apply (docs/design.md §5.10). Every other op: kNone.
enum class Condition : uint8_t {
  kNone = 0,
  kAbsent = 1,     // the key has no record
  kVersionIs = 2,  // the key's record has version RequestMsg::expected_version
};
inline constexpr uint8_t kConditionMax = static_cast<uint8_t>(Condition::kVersionIs);

struct RequestMsg {
  uint8_t op;            // Op
  uint8_t flags;         // kRequestResent or 0 (client ops); replica ops: 0
  uint8_t condition;     // Condition: kPut may carry one; every other op kNone
  uint8_t reserved;      // 0
  uint32_t length;       // bytes of the record in the ring (block length)
  uint64_t request_id;   // client ops: unique per client_id; replica ops: the
                         // sender's own sequence; echoed in the reply
  uint64_t ring_offset;  // 64-byte aligned offset of the record in the ring
  uint64_t map_version;  // replica ops: the cluster map version the primary
                         // routed the write by (>= 1); client ops: 0
  uint64_t expected_version;  // Condition::kVersionIs: the version (>= 1);
                              // otherwise 0
  // kGet: where the found block is WRITTEN (a region of the client's,
  // kRemoteWrite), and the most bytes it takes (0: reply only). Every
  // other op: 0.
  uint64_t landing_addr;
  uint32_t landing_rkey;
  uint32_t landing_bytes;
};
static_assert(sizeof(RequestMsg) == 56);

struct ReplyMsg {
  uint64_t request_id;
  int32_t status_code;   // StatusCode
  uint16_t credits;      // request credits returned (normally 1; at most
                         // AcceptData::request_credits, itself <= 128)
  uint8_t reason;        // rkv::Reason (client/include/rkv/status.h): why
                         // a request was refused, for code to decide on;
                         // kNone when status_code is 0 or the refusal
                         // needs no decision
  uint8_t reserved;      // 0
  uint64_t version;      // the key's new version (PUT) or the deleted one;
                         // FAILED_PRECONDITION: the key's version (0:
                         // absent) that failed the condition
  uint64_t map_version;  // the cluster map version the refusal speaks of
                         // (0: none, or "this server has no map")
  char message[88];      // NUL-terminated error text when status_code != 0
  uint64_t block;        // the OK reply of a PUT that was published: the
                         // slot word (common/layout.h) naming the block that
                         // holds it, so that a client can cache where the
                         // key now is (docs/design.md §4.4); 0 in every
                         // other reply
};
static_assert(sizeof(ReplyMsg) == 128);

// Receive buffers are sized for the larger of the two messages.
inline constexpr size_t kMaxMessageBytes = 128;
static_assert(sizeof(RequestMsg) <= kMaxMessageBytes && sizeof(ReplyMsg) <= kMaxMessageBytes);

}  // namespace rkv::protocol
