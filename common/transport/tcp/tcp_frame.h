// Wire format of the tcp transport: every message on the socket is one
// frame, a fixed 40-byte little-endian FrameHeader followed by
// `payload_len` bytes of payload.
//
// Connection setup (client = the side that called Connect):
//   client -> server  kConnect  addr = kHelloMagic, payload = private data (<= 56)
//   server -> client  kAccept   payload = accept private data (<= 196)
//                  or kReject   payload = reject private data (<= 148), then EOF
// Data path (either side may be the requester; `seq` is the requester's
// sequence number of the work request, echoed by the target's response):
//   kReadReq   addr, rkey, op_len = bytes to read; no payload
//   kReadResp  status; payload = the bytes (OK) or an error text
//   kWrite     addr, rkey; payload = the bytes. No response when it succeeds
//              (a later response acknowledges it, as an RC ACK would)
//   kWriteNak  status; payload = error text
//   kSend      payload = the message
//   kSendAck   status (OK: placed in a receive buffer or queued at the
//              target); payload = error text when not OK
// The target processes frames in arrival order, so its responses arrive in
// the order of the requests they answer.
//
// What a peer may have in flight at a target (the model is a verbs RC
// responder, which serves max_dest_rd_atomic READs at once and applies
// back-pressure, not errors, beyond it). The target stops taking the
// peer's requests (it leaves them unread in the socket, so TCP's window
// pushes back) while kMaxReadsInFlight READ responses are not wholly sent,
// or while more than kMaxQueuedResponseBytes of responses wait for the
// peer to read them; it sends a large READ response in chunks from memory
// as the peer reads, so that one 64 MiB READ holds no 64 MiB buffer. Valid
// requests are never refused for this: they wait. A peer that reads none
// of what waits for it is the target's to close (Options::frame_timeout,
// with the reason in its log).
//
// Every header read from a socket goes through ValidateHeader before any of
// its fields is used.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

static_assert(std::endian::native == std::endian::little,
              "the tcp frame header is copied to and from the wire as is");

inline constexpr uint16_t kFrameMagic = 0x4b52;               // "RK"
inline constexpr uint64_t kHelloMagic = 0x3130504354564b52;   // "RKVTCP01"

// Largest READ, WRITE or SEND, and so the largest payload of any frame.
inline constexpr uint32_t kMaxOpBytes = 64u << 20;
// Back-pressure limits of a target (see above).
inline constexpr uint32_t kMaxReadsInFlight = 16;
inline constexpr size_t kMaxQueuedResponseBytes = 4u << 20;
// Largest error text carried by a response frame.
inline constexpr uint32_t kMaxErrorText = 256;
// Private data limits, those of rdmacm on IB/RoCE.
inline constexpr uint32_t kMaxConnectData = kMaxConnectPrivateData;
inline constexpr uint32_t kMaxAcceptData = kMaxAcceptPrivateData;
inline constexpr uint32_t kMaxRejectData = kMaxRejectionBytes;

enum class FrameType : uint8_t {
  kConnect = 1,
  kAccept = 2,
  kReject = 3,
  kReadReq = 4,
  kReadResp = 5,
  kWrite = 6,
  kWriteNak = 7,
  kSend = 8,
  kSendAck = 9,
};

struct FrameHeader {
  uint16_t magic = kFrameMagic;
  uint8_t type = 0;        // FrameType
  uint8_t flags = 0;       // reserved, 0
  int32_t status = 0;      // StatusCode, responses only
  uint64_t seq = 0;        // requester's work request sequence number
  uint64_t addr = 0;       // kReadReq/kWrite: target address; kConnect: kHelloMagic
  uint32_t rkey = 0;       // kReadReq/kWrite
  uint32_t op_len = 0;     // kReadReq: bytes asked for
  uint32_t payload_len = 0;
  uint32_t reserved = 0;   // 0
};
static_assert(sizeof(FrameHeader) == 40);
inline constexpr size_t kHeaderBytes = sizeof(FrameHeader);

inline FrameHeader MakeHeader(FrameType type, uint64_t seq) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.seq = seq;
  return h;
}

inline const char* FrameTypeName(uint8_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kConnect: return "CONNECT";
    case FrameType::kAccept: return "ACCEPT";
    case FrameType::kReject: return "REJECT";
    case FrameType::kReadReq: return "READ_REQ";
    case FrameType::kReadResp: return "READ_RESP";
    case FrameType::kWrite: return "WRITE";
    case FrameType::kWriteNak: return "WRITE_NAK";
    case FrameType::kSend: return "SEND";
    case FrameType::kSendAck: return "SEND_ACK";
  }
  return "UNKNOWN";
}

// Checks what a header alone can tell: magic, a known type, zero reserved
// fields, a valid status code, and the payload and operation lengths
// allowed for its type. INVALID_ARGUMENT says what is wrong.
inline Status ValidateHeader(const FrameHeader& h) {
  if (h.magic != kFrameMagic) {
    return InvalidArgument("bad frame magic " + std::to_string(h.magic));
  }
  if (h.flags != 0 || h.reserved != 0) return InvalidArgument("reserved frame fields are not zero");
  if (!IsValidStatusCode(h.status)) {
    return InvalidArgument("frame status code " + std::to_string(h.status) + " is not a status code");
  }
  const auto type = static_cast<FrameType>(h.type);
  uint32_t max_payload = 0;
  bool has_status = false;
  switch (type) {
    case FrameType::kConnect:
      if (h.addr != kHelloMagic) return InvalidArgument("CONNECT frame without the tcp transport hello");
      max_payload = kMaxConnectData;
      break;
    case FrameType::kAccept: max_payload = kMaxAcceptData; break;
    case FrameType::kReject: max_payload = kMaxRejectData; break;
    case FrameType::kReadReq:
      if (h.op_len > kMaxOpBytes) {
        return InvalidArgument("READ of " + std::to_string(h.op_len) + " bytes exceeds the frame limit");
      }
      max_payload = 0;
      break;
    case FrameType::kReadResp:
      has_status = true;
      max_payload = kMaxOpBytes;
      break;
    case FrameType::kWrite:
    case FrameType::kSend: max_payload = kMaxOpBytes; break;
    case FrameType::kWriteNak:
      has_status = true;
      if (h.status == 0) return InvalidArgument("WRITE_NAK frame with an OK status");
      max_payload = kMaxErrorText;
      break;
    case FrameType::kSendAck:
      has_status = true;
      max_payload = kMaxErrorText;
      break;
    default:
      return InvalidArgument("unknown frame type " + std::to_string(h.type));
  }
  if (!has_status && h.status != 0) {
    return InvalidArgument(std::string(FrameTypeName(h.type)) + " frame carries a status");
  }
  if (has_status && h.status != 0 && h.payload_len > kMaxErrorText) {
    return InvalidArgument("error frame with " + std::to_string(h.payload_len) + " bytes of text");
  }
  if (h.payload_len > max_payload) {
    return InvalidArgument(std::string(FrameTypeName(h.type)) + " frame with a payload of " +
                           std::to_string(h.payload_len) + " bytes (limit " +
                           std::to_string(max_payload) + ")");
  }
  return Status::Ok();
}

}  // namespace rkv::transport::tcp
