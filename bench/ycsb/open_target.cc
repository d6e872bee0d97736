// OpenTarget: the one place that knows every kind of target, apart from
// kv_target.cc so that code driving a KvTarget (and its tests) links
// without the stores' client libraries.
#include "bench/ycsb/kv_target.h"

namespace rkv::bench {

StatusOr<std::unique_ptr<KvTarget>> OpenTarget(const TargetOptions& options) {
  if (options.kind == "rkv") return OpenRkvTarget(options);
  if (options.kind == "memcached") return OpenMemcachedTarget(options);
  if (options.kind == "redis") return OpenRedisTarget(options);
  return InvalidArgument("unknown target '" + options.kind + "' (want rkv, memcached or redis)");
}

}  // namespace rkv::bench
