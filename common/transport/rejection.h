// Why a server refused a connection request: the transport's own type, sent
// as the reject private data and decoded by the connecting side.
//
// Wire format (little-endian, at most kMaxRejectionBytes, the limit of
// rdma_reject's private data on IB/RoCE):
//   uint32 magic     kRejectionMagic ("RKVR")
//   int32  code      a StatusCode
//   char   text[120] NUL-terminated, printable ASCII
//   uint8  detail_len  0..kMaxRejectionDetailBytes   (only when a detail
//   uint8  detail[detail_len]                          is sent)
// The detail is opaque to the transport: the refusing side's bytes for the
// connecting side's code (rkv's server sends a connect challenge there).
// Data of the older 128-byte format, or with a detail_len over the limit,
// decodes with no detail.
// rdma_cm may pad what arrives with zeros, so a decoder accepts trailing
// bytes. Anything that is not this format (a peer of another kind, plain
// text, garbage) decodes to a Rejection with code kOk and a printable
// description of the bytes: the bytes are never trusted beyond that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rkv::transport {

inline constexpr uint32_t kRejectionMagic = 0x52564B52;  // "RKVR"
inline constexpr size_t kRejectionTextBytes = 120;        // NUL included
inline constexpr size_t kRejectionHeaderBytes = 8;        // magic + code
inline constexpr size_t kMaxRejectionBytes = 148;
inline constexpr size_t kMaxRejectionDetailBytes = 16;
static_assert(kRejectionHeaderBytes + kRejectionTextBytes + 1 + kMaxRejectionDetailBytes <= kMaxRejectionBytes);

struct Rejection {
  Rejection() = default;
  Rejection(StatusCode code_in, std::string text_in, std::vector<uint8_t> detail_in = {})
      : code(code_in), text(std::move(text_in)), detail(std::move(detail_in)) {}

  // The server's reason as a status code; kOk when the peer sent none
  // that could be read (see DecodeRejection).
  StatusCode code = StatusCode::kOk;
  // The server's reason in words (at most kRejectionTextBytes - 1 bytes are
  // sent; longer text is cut).
  std::string text;
  // Opaque bytes for the connecting side (at most
  // kMaxRejectionDetailBytes; more is not sent); empty when none.
  std::vector<uint8_t> detail;
};

// Encodes `r` in the wire format above. Text is cut to fit and every
// unprintable byte becomes '?'; a detail over kMaxRejectionDetailBytes is
// left out (the sender's bug: its code sends a fixed size).
std::vector<uint8_t> EncodeRejection(const Rejection& r);

// Decodes reject private data of any length and content. Empty or all-zero
// data gives {kOk, "no reason given"}; the wire format gives its code (kOk
// if the code is not a valid StatusCode) and text; printable text padded
// with zeros gives {kOk, that text}; anything else {kOk, "N bytes of reject
// data"}.
Rejection DecodeRejection(std::span<const uint8_t> data);

// The reason for a Connect error: the text, then " (CODE)" when a code was
// sent.
std::string DescribeRejection(const Rejection& r);

// The status a refused Connect returns: UNAVAILABLE when the server
// refused for a transient reason (it said UNAVAILABLE: worth retrying),
// RESOURCE_EXHAUSTED when it said so (no connection slot or memory left),
// PERMISSION_DENIED otherwise (a wrong token, another version, or no code),
// with `where` and the reason in its message.
Status RejectedStatus(const std::string& where, const Rejection& r);

}  // namespace rkv::transport
