// Validation of everything a server sends a client before the client acts
// on it: the accept private data, the table header it READs, and reply
// messages. A server is trusted to be rkv, not to be bug-free or current:
// every check fails with a Status that names the field, never a crash.
#pragma once

#include <cstdint>
#include <span>

#include "common/layout.h"
#include "common/protocol.h"
#include "common/status.h"

namespace rkv::client {

// Upper bound this client accepts for AcceptData::request_credits.
inline constexpr uint32_t kMaxRequestCredits = 4096;

// Parses the accept private data (which a transport may pad beyond
// sizeof(AcceptData)) and checks it: magic, protocol and layout versions,
// limits within the layout's ceilings, a non-zero grace period, an index
// region of a power-of-two number of buckets, a heap of whole blocks, and a
// staging ring of whole blocks that holds at least one block of the largest
// record. FAILED_PRECONDITION for a version mismatch, INVALID_ARGUMENT for
// anything else.
StatusOr<protocol::AcceptData> ParseAcceptData(std::span<const uint8_t> data);

// Bytes of the block holding the largest record the server accepts.
uint64_t MaxBlockBytes(const protocol::AcceptData& accept);

// Checks the table header READ from the index region against the accept
// data: magic, layout version, bucket count consistent with its log2 and
// with the index region's length, heap size equal to the heap region's
// length. UNAVAILABLE when only the epoch differs (the server restarted
// between accept and read: reconnecting fixes it), INVALID_ARGUMENT or
// FAILED_PRECONDITION otherwise.
Status CheckTableHeader(const layout::TableHeader& header, const protocol::AcceptData& accept);

// Parses a reply message of `data.size()` received bytes: exact size, a
// known status code, a NUL-terminated message.
StatusOr<protocol::ReplyMsg> ParseReply(std::span<const uint8_t> data);

}  // namespace rkv::client
