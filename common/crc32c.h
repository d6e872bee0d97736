// CRC32C (Castagnoli), as used by iSCSI and ext4: the checksum of the records
// a server keeps in RocksDB (server/store/store.h). Heap blocks use XXH64
// (common/layout.h).
//
// Two implementations that give the same result: the SSE4.2 crc32
// instruction, and a portable slicing-by-8 table version. The first call
// picks the faster of the two on this machine by timing both over a few
// KiB (well under a millisecond): on real CPUs that is the instruction (a
// few times faster); under emulation (e.g. QEMU TCG, where the instruction
// is emulated bit by bit) the tables win by ~5x. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv {

// Extends `crc` (the value returned by a previous call, or 0 to start) over
// `n` bytes. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The implementations, exposed for tests that compare them. The hardware
// one may only be called when Crc32cHardwareAvailable().
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t n);

// True when the CPU has the SSE4.2 crc32 instruction.
bool Crc32cHardwareAvailable();

// The implementation Crc32cExtend uses: "sse4.2" or "slicing-by-8".
const char* Crc32cImplementation();

}  // namespace rkv
