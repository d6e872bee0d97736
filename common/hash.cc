#include "common/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rkv {

uint64_t ShardHash(std::string_view key) { return XXH3_64bits_withSeed(key.data(), key.size(), 0); }

uint64_t TableHash(std::string_view key, uint64_t table_seed) {
  return XXH3_64bits_withSeed(key.data(), key.size(), table_seed);
}

}  // namespace rkv
