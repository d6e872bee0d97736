// The tcp transport's frame decoding (common/transport/tcp/tcp_frame.h,
// socket_io.h): a stream of bytes from a peer, parsed frame by frame the
// way the connection reader and the listener's handshake parse it.
//
// Properties: ValidateHeader never accepts a header whose payload exceeds
// the largest frame, and TryParseFrame reports a frame complete only when
// all of its bytes are in the buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/tcp_frame.h"
#include "fuzz/fuzz_input.h"

using namespace rkv::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteBuffer rx;
  rx.Append(data, size);
  FrameHeader h;
  for (;;) {
    const rkv::StatusOr<bool> complete = TryParseFrame(rx, &h);
    if (!complete.ok()) {
      RKV_FUZZ_CHECK(complete.status().code() == rkv::StatusCode::kInvalidArgument);
      RKV_FUZZ_CHECK(!ValidateHeader(h).ok());
      break;
    }
    if (!*complete) {
      RKV_FUZZ_CHECK(rx.size() < kHeaderBytes || rx.size() < kHeaderBytes + h.payload_len);
      break;
    }
    RKV_FUZZ_CHECK(ValidateHeader(h).ok());
    RKV_FUZZ_CHECK(h.magic == kFrameMagic && h.flags == 0 && h.reserved == 0);
    RKV_FUZZ_CHECK(h.payload_len <= kMaxOpBytes);
    RKV_FUZZ_CHECK(rx.size() >= kHeaderBytes + h.payload_len);
    const auto type = static_cast<FrameType>(h.type);
    if (type == FrameType::kConnect) RKV_FUZZ_CHECK(h.payload_len <= kMaxConnectData);
    if (type == FrameType::kAccept) RKV_FUZZ_CHECK(h.payload_len <= kMaxAcceptData);
    if (type == FrameType::kReject) RKV_FUZZ_CHECK(h.payload_len <= kMaxRejectData);
    if (type == FrameType::kReadReq) RKV_FUZZ_CHECK(h.payload_len == 0 && h.op_len <= kMaxOpBytes);
    if (h.status != 0) RKV_FUZZ_CHECK(h.payload_len <= kMaxErrorText);
    // Touch every byte the frame claims, so ASan sees any overrun.
    volatile uint8_t sink = 0;
    const uint8_t* payload = rx.head() + kHeaderBytes;
    for (uint32_t i = 0; i < h.payload_len; ++i) sink = sink ^ payload[i];
    (void)sink;
    (void)FrameTypeName(h.type);
    rx.Consume(kHeaderBytes + h.payload_len);
  }
  return 0;
}
