// BufferRegistry: the caller memory a Client's GETs may READ into directly
// (Client::RegisterBuffer, GetInto; docs/design.md §4.6).
//
// A registration is the caller's memory and, made on first use per
// transport (the client has one per kind), its region registered with that
// transport for local writes: a verbs READ scatters a value straight into
// it, and tcp's emulated READ copies the response there as it would into
// the client's own buffer. Registrations do not overlap, so memory names
// at most one.
//
// Lifetime: a call that uses a registration holds it (a shared_ptr), so
// Remove while a GetInto runs deregisters when that call returns; a call
// that returns has no READ left that could write the memory (a READ that
// did not complete broke and disconnected its connection). The registry
// is destroyed before the client's transports (client_impl.h).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>

#include "common/mutex.h"
#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::client {

class BufferRegistry {
 public:
  class Registration {
   public:
    explicit Registration(std::span<std::byte> memory) : memory_(memory) {}
    std::span<std::byte> memory() const { return memory_; }
    // This memory's region on `transport`, registered on first use
    // (kLocalWrite); the transport's error when it cannot be registered.
    StatusOr<const transport::MemoryRegion*> RegionFor(transport::Transport& transport) EXCLUDES(mu_);

   private:
    const std::span<std::byte> memory_;
    Mutex mu_;
    std::map<const transport::Transport*, std::unique_ptr<transport::MemoryRegion>> regions_ GUARDED_BY(mu_);
  };

  // Registers `memory` (non-empty) under a new id, and registers it at
  // once with each of `transports` so that their errors (a locked-memory
  // limit, say) come back here. INVALID_ARGUMENT for empty memory,
  // ALREADY_EXISTS when it overlaps a registered buffer.
  StatusOr<uint64_t> Add(std::span<std::byte> memory, std::span<transport::Transport* const> transports)
      EXCLUDES(mu_);
  // Forgets the buffer `id`; NOT_FOUND when no buffer has that id.
  Status Remove(uint64_t id) EXCLUDES(mu_);
  // The registration holding all of `memory`, or null.
  std::shared_ptr<Registration> Find(std::span<const std::byte> memory) const EXCLUDES(mu_);
  // Buffers registered now.
  size_t size() const EXCLUDES(mu_);

 private:
  struct Entry {
    uint64_t id = 0;
    std::shared_ptr<Registration> registration;
  };
  mutable Mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  // By the address of the memory's first byte.
  std::map<uintptr_t, Entry> by_address_ GUARDED_BY(mu_);
};

}  // namespace rkv::client
