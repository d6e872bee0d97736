// CRC32C (Castagnoli), as used by iSCSI and ext4: the block checksum.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at
// run time) and a table-driven portable version otherwise; both give the
// same result. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv {

// Extends `crc` (the value returned by a previous call, or 0 to start) over
// `n` bytes. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The portable implementation, exposed for tests that compare the two.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

// True when the hardware path is in use.
bool Crc32cHardwareAvailable();

}  // namespace rkv
