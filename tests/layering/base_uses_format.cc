// A deliberate layering violation: code that claims to be in rkv_base (it
// links only rkv_base) but calls into rkv_format. Its layer check must fail
// to link (tests/layering/CMakeLists.txt); it is never built by default.
#include <cstdint>
#include <string_view>

#include "common/hash.h"

namespace rkv {

uint64_t BaseFunctionThatReachesUp(std::string_view key) { return ShardHash(key); }

}  // namespace rkv
