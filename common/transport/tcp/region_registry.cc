#include "common/transport/tcp/region_registry.h"

#include <cstdio>
#include <string>

#include "common/transport/tcp/tcp_frame.h"

namespace rkv::transport::tcp {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint32_t Registry::Add(uint8_t* base, size_t length, uint32_t access, uint64_t owner) {
  WriterLock lock(mu_);
  for (;;) {
    const uint32_t rkey = static_cast<uint32_t>(rng_());
    if (rkey != 0 && regions_.emplace(rkey, Entry{base, length, access, owner}).second) return rkey;
  }
}

void Registry::Remove(uint32_t rkey) {
  WriterLock lock(mu_);
  regions_.erase(rkey);
}

StatusOr<uint8_t*> Registry::CheckAccessLocked(uint32_t rkey, uint64_t addr, uint32_t len, uint32_t need,
                                               uint64_t conn) const {
  const auto it = regions_.find(rkey);
  if (it == regions_.end()) return PermissionDenied("rkey " + Hex(rkey) + " is not registered");
  const Entry& r = it->second;
  if (r.owner != 0 && r.owner != conn) {
    return PermissionDenied("rkey " + Hex(rkey) + " is registered for another connection");
  }
  if ((r.access & need) != need) {
    return PermissionDenied("rkey " + Hex(rkey) + " is not registered for remote " +
                            (need == kRemoteRead ? "read" : "write"));
  }
  const uint64_t base = reinterpret_cast<uint64_t>(r.base);
  if (addr < base || addr - base > r.length || len > r.length - (addr - base)) {
    return PermissionDenied("[" + Hex(addr) + ", +" + std::to_string(len) + ") is outside rkey " + Hex(rkey) +
                            " ([" + Hex(base) + ", +" + std::to_string(r.length) + "))");
  }
  return r.base + (addr - base);
}

StatusOr<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<Registry>& registry, void* addr,
                                                       size_t length, uint32_t access, uint64_t owner) {
  if (addr == nullptr || length == 0) return InvalidArgument("cannot register an empty region");
  if ((access & ~uint32_t{kLocalWrite | kRemoteRead | kRemoteWrite}) != 0) {
    return InvalidArgument("unknown access bits " + Hex(access));
  }
  if ((access & kRemoteWrite) != 0 && (access & kLocalWrite) == 0) {
    return InvalidArgument("kRemoteWrite needs kLocalWrite (as with ibv_reg_mr)");
  }
  if (reinterpret_cast<uintptr_t>(addr) > UINTPTR_MAX - length) {
    return InvalidArgument("region wraps around the address space");
  }
  auto* base = static_cast<uint8_t*>(addr);
  const uint32_t rkey = registry->Add(base, length, access, owner);
  return std::unique_ptr<MemoryRegion>(std::make_unique<TcpMemoryRegion>(registry, base, length, access, rkey));
}

StatusOr<uint8_t*> ResolveLocal(const LocalBuf& buf, bool needs_local_write, const char* what) {
  if (buf.mr == nullptr) return InvalidArgument(std::string(what) + " has no memory region");
  const auto* mr = dynamic_cast<const TcpMemoryRegion*>(buf.mr);
  if (mr == nullptr) return InvalidArgument(std::string(what) + " is not registered with the tcp transport");
  if (buf.offset > mr->size() || buf.length > mr->size() - buf.offset) {
    return InvalidArgument(std::string(what) + " [" + std::to_string(buf.offset) + ", +" +
                           std::to_string(buf.length) + ") is outside its region of " +
                           std::to_string(mr->size()) + " bytes");
  }
  if (needs_local_write && (mr->access() & kLocalWrite) == 0) {
    return InvalidArgument(std::string(what) + " is in a region without kLocalWrite");
  }
  if (buf.length > kMaxOpBytes) {
    return InvalidArgument(std::string(what) + " of " + std::to_string(buf.length) +
                           " bytes exceeds the tcp transport limit of " + std::to_string(kMaxOpBytes));
  }
  return mr->data() + buf.offset;
}

}  // namespace rkv::transport::tcp
