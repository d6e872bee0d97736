#include "server/table/mapped_memory.h"

#include <cerrno>
#include <string>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace rkv::server {

StatusOr<MappedMemory> MappedMemory::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgument("cannot map 0 bytes");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return ResourceExhausted(PosixError("mmap(" + std::to_string(bytes) + " bytes)", err).message());
  }
  // Transparent huge pages where the system allows them on request: the
  // heap and index are written densely, and 4 KiB pages cost a fault each
  // (a third of the rebuild's time) and TLB misses on every READ. Advice
  // only: a kernel without THP keeps small pages.
  constexpr size_t kHugePage = size_t{2} << 20;
  if (mapped >= kHugePage) ::madvise(p, mapped, MADV_HUGEPAGE);
  return MappedMemory(static_cast<uint8_t*>(p), bytes, mapped);
}

MappedMemory::MappedMemory(MappedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

MappedMemory& MappedMemory::operator=(MappedMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

MappedMemory::~MappedMemory() { Release(); }

void MappedMemory::Release() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
}

}  // namespace rkv::server
