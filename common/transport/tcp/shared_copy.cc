#include "common/transport/tcp/shared_copy.h"

#include <cstring>

namespace rkv::transport::tcp {
namespace {

// 8-byte words of registered memory, which may be of any type.
typedef uint64_t __attribute__((__may_alias__)) AliasedWord;

}  // namespace

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

}  // namespace rkv::transport::tcp
