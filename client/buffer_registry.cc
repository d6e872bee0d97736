#include "client/buffer_registry.h"

#include <string>

namespace rkv::client {

using std::to_string;

StatusOr<const transport::MemoryRegion*> BufferRegistry::Registration::RegionFor(transport::Transport& transport) {
  MutexLock lock(mu_);
  std::unique_ptr<transport::MemoryRegion>& region = regions_[&transport];
  if (!region) {
    StatusOr<std::unique_ptr<transport::MemoryRegion>> made =
        transport.Register(memory_.data(), memory_.size(), transport::kLocalWrite);
    if (!made.ok()) {
      regions_.erase(&transport);
      return made.status().WithContext("registering a " + to_string(memory_.size()) + "-byte buffer with " +
                                       transport::KindName(transport.kind()));
    }
    region = std::move(made).value();
  }
  return region.get();
}

StatusOr<uint64_t> BufferRegistry::Add(std::span<std::byte> memory,
                                       std::span<transport::Transport* const> transports) {
  if (memory.empty()) return InvalidArgument("RegisterBuffer: the buffer is empty");
  const auto begin = reinterpret_cast<uintptr_t>(memory.data());
  auto registration = std::make_shared<Registration>(memory);
  for (transport::Transport* t : transports) RKV_RETURN_IF_ERROR(registration->RegionFor(*t).status());
  MutexLock lock(mu_);
  // The first buffer at or after `begin`, and the one before it.
  auto next = by_address_.lower_bound(begin);
  const bool overlaps_next = next != by_address_.end() && next->first < begin + memory.size();
  bool overlaps_previous = false;
  if (next != by_address_.begin()) {
    const auto& [start, entry] = *std::prev(next);
    overlaps_previous = start + entry.registration->memory().size() > begin;
  }
  if (overlaps_next || overlaps_previous) {
    return Status(StatusCode::kAlreadyExists, "RegisterBuffer: the " + to_string(memory.size()) +
                                                  "-byte buffer overlaps a buffer registered before");
  }
  const uint64_t id = next_id_++;
  by_address_.emplace(begin, Entry{id, std::move(registration)});
  return id;
}

Status BufferRegistry::Remove(uint64_t id) {
  std::shared_ptr<Registration> gone;  // deregistered outside the lock
  MutexLock lock(mu_);
  for (auto it = by_address_.begin(); it != by_address_.end(); ++it) {
    if (it->second.id != id) continue;
    gone = std::move(it->second.registration);
    by_address_.erase(it);
    return Status::Ok();
  }
  return NotFound("no registered buffer has id " + to_string(id));
}

std::shared_ptr<BufferRegistry::Registration> BufferRegistry::Find(std::span<const std::byte> memory) const {
  if (memory.empty()) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(memory.data());
  MutexLock lock(mu_);
  auto it = by_address_.upper_bound(begin);
  if (it == by_address_.begin()) return nullptr;
  --it;
  const std::span<std::byte> held = it->second.registration->memory();
  if (begin + memory.size() > it->first + held.size()) return nullptr;
  return it->second.registration;
}

size_t BufferRegistry::size() const {
  MutexLock lock(mu_);
  return by_address_.size();
}

}  // namespace rkv::client
