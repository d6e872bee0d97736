// Registered memory of the tcp transport: the registry that maps an rkey to
// its region and checks every remote access, the MemoryRegion handed to
// callers, and the checks of local buffers. Internal to
// common/transport/tcp/.
//
// The transport emulates the protection of verbs memory regions: a peer
// reaches a region only with its rkey (random, nonzero), only inside its
// bounds, only with the remote rights it was registered with, and (for a
// private region) only over the connection that registered it. A refused
// access is PERMISSION_DENIED, as IBV_WC_REM_ACCESS_ERR maps in the verbs
// transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

// rkey -> registered region, shared by a transport and its connections.
//
// Thread safety: all methods are thread-safe. Remote accesses run under the
// shared lock, so a region cannot be deregistered (and its memory freed by
// its owner) while a transport thread copies from or into it. Lock order:
// the registry's lock comes before a connection's locks (Access's `fn` may
// take them).
//
// Invariants: every key of regions_ is nonzero.
class Registry {
 public:
  // Adds a region; returns its random nonzero rkey. `owner` is the id of
  // the only connection allowed remote access, or 0 for all.
  uint32_t Add(uint8_t* base, size_t length, uint32_t access, uint64_t owner) EXCLUDES(mu_);

  void Remove(uint32_t rkey) EXCLUDES(mu_);

  // Runs fn(pointer to `addr`) under the shared lock when connection `conn`
  // may access [addr, addr+len) of region `rkey` with the rights `need`;
  // otherwise returns PERMISSION_DENIED with the reason and runs nothing.
  template <typename Fn>
  Status Access(uint32_t rkey, uint64_t addr, uint32_t len, uint32_t need, uint64_t conn, Fn&& fn)
      EXCLUDES(mu_) {
    ReaderLock lock(mu_);
    RKV_ASSIGN_OR_RETURN(uint8_t* const p, CheckAccessLocked(rkey, addr, len, need, conn));
    fn(p);
    return Status::Ok();
  }

 private:
  struct Entry {
    uint8_t* base;
    size_t length;
    uint32_t access;
    uint64_t owner;
  };

  // Access's checks: the address of `addr` in region `rkey`, or
  // PERMISSION_DENIED with the reason.
  StatusOr<uint8_t*> CheckAccessLocked(uint32_t rkey, uint64_t addr, uint32_t len, uint32_t need,
                                       uint64_t conn) const REQUIRES_SHARED(mu_);

  SharedMutex mu_;
  std::unordered_map<uint32_t, Entry> regions_ GUARDED_BY(mu_);
  // Written by every draw: Add holds mu_ exclusively.
  std::mt19937 rng_ GUARDED_BY(mu_) = std::mt19937(std::random_device{}());
};

// A registered region; deregisters itself when destroyed. lkey == rkey.
class TcpMemoryRegion final : public MemoryRegion {
 public:
  TcpMemoryRegion(std::shared_ptr<Registry> registry, uint8_t* data, size_t size, uint32_t access,
                  uint32_t rkey)
      : MemoryRegion(data, size, /*lkey=*/rkey, rkey), registry_(std::move(registry)), access_(access) {}
  ~TcpMemoryRegion() override { registry_->Remove(rkey()); }

  uint32_t access() const { return access_; }

 private:
  const std::shared_ptr<Registry> registry_;
  const uint32_t access_;
};

// Registers [addr, addr+length) with `access` (transport::Access bits) in
// `registry`, for every connection (`owner` 0) or only connection `owner`.
// INVALID_ARGUMENT for an empty region, unknown access bits, kRemoteWrite
// without kLocalWrite (as ibv_reg_mr), or a region that wraps around.
StatusOr<std::unique_ptr<MemoryRegion>> RegisterRegion(const std::shared_ptr<Registry>& registry, void* addr,
                                                       size_t length, uint32_t access, uint64_t owner);

// The local bytes a LocalBuf names, after checking that it lies in a
// TcpMemoryRegion, inside its bounds, with kLocalWrite when
// `needs_local_write`, and within the transport's operation size limit.
// INVALID_ARGUMENT otherwise, its text starting with `what`.
StatusOr<uint8_t*> ResolveLocal(const LocalBuf& buf, bool needs_local_write, const char* what);

}  // namespace rkv::transport::tcp
