// Zeroed, page-aligned anonymous memory for RDMA regions (index, heap,
// staging rings, message buffers). Move-only owner: the mapping is removed
// on destruction, so any MemoryRegion registered over it must be destroyed
// first (the owners in server.h are declared in that order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace rkv::server {

class MappedMemory {
 public:
  MappedMemory() = default;
  // Maps `bytes` (> 0) of zeroed memory; RESOURCE_EXHAUSTED when the
  // system refuses.
  static StatusOr<MappedMemory> Allocate(size_t bytes);

  MappedMemory(MappedMemory&& other) noexcept;
  MappedMemory& operator=(MappedMemory&& other) noexcept;
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;
  ~MappedMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<uint8_t> span() const { return {data_, size_}; }

 private:
  MappedMemory(uint8_t* data, size_t size, size_t mapped) : data_(data), size_(size), mapped_(mapped) {}
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;    // bytes asked for
  size_t mapped_ = 0;  // bytes mapped (whole pages)
};

}  // namespace rkv::server
