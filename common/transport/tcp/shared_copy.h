// Copies into and out of registered memory while its owner may be using it
// at the same time. Internal to common/transport/tcp/.
//
// The tcp transport serves a peer's READs and WRITEs on its own thread,
// straight from (into) regions their owner keeps using: an owner may store
// to a word (index slots are published with one aligned 8-byte release
// store) while a READ copies it. These copies move every aligned 8-byte
// word with one atomic access, so it is never torn, and are free of data
// races in the C++ memory model.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv::transport::tcp {

// Copies n bytes from registered memory at `src` to private memory at
// `dst`: each aligned 8-byte word of `src` with one atomic acquire load
// (pairing with the owner's release store), the unaligned head and tail
// bytewise, also atomically. The ranges must not overlap.
void CopyFromShared(uint8_t* dst, const uint8_t* src, size_t n);

// The mirror image, for a remote WRITE: copies n bytes from private memory
// at `src` into registered memory at `dst`, each aligned word of `dst`
// with one atomic release store, the rest bytewise. An owner that reads its
// memory concurrently (a misbehaving peer writing into a ring the owner is
// reading) thus sees whole words and no data race. The ranges must not
// overlap.
void CopyToShared(uint8_t* dst, const uint8_t* src, size_t n);

}  // namespace rkv::transport::tcp
