// A FIFO of bytes for the tcp transport's sockets: what was received and
// not yet parsed, or what waits to be sent. Internal to
// common/transport/tcp/.
//
// Bytes are appended at the tail and consumed at the head. The storage
// grows without zeroing (a receive overwrites it at once) and is compacted
// or reallocated only when the tail runs out of room, so a buffer that is
// emptied as fast as it fills allocates nothing in the steady state.
//
// Thread safety: none; the owner serializes all calls (the connection's
// outgoing buffer is guarded by its out_mu_).
//
// Invariants: 0 <= head_ <= tail_ <= capacity_; data_ holds capacity_
// bytes; head_ == tail_ == 0 whenever the buffer is empty.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

namespace rkv::transport::tcp {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&& other) noexcept
      : data_(std::move(other.data_)),
        capacity_(std::exchange(other.capacity_, 0)),
        head_(std::exchange(other.head_, 0)),
        tail_(std::exchange(other.tail_, 0)) {}
  ByteBuffer& operator=(ByteBuffer&&) = delete;

  uint8_t* head() { return data_.get() + head_; }
  size_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }
  uint8_t* tail() { return data_.get() + tail_; }
  size_t tail_space() const { return capacity_ - tail_; }

  // Makes room for at least `n` more bytes at the tail. Pointers into the
  // buffer are invalid afterwards.
  void Reserve(size_t n) {
    if (capacity_ - tail_ >= n) return;
    const size_t live = size();
    if (head_ > 0 && capacity_ - live >= n) {
      std::memmove(data_.get(), head(), live);
    } else {
      const size_t capacity = std::max({capacity_ * 2, live + n, size_t{4096}});
      auto fresh = std::make_unique_for_overwrite<uint8_t[]>(capacity);
      if (live > 0) std::memcpy(fresh.get(), head(), live);
      data_ = std::move(fresh);
      capacity_ = capacity;
    }
    head_ = 0;
    tail_ = live;
  }
  // Counts `n` bytes written at tail() (n <= tail_space()) as buffered.
  void Commit(size_t n) { tail_ += n; }
  // Returns `n` writable bytes appended at the tail.
  uint8_t* Append(size_t n) {
    Reserve(n);
    uint8_t* p = tail();
    tail_ += n;
    return p;
  }
  void Append(const void* src, size_t n) {
    if (n > 0) std::memcpy(Append(n), src, n);
  }
  // Drops `n` bytes (n <= size()) from the head.
  void Consume(size_t n) {
    head_ += n;
    if (head_ == tail_) head_ = tail_ = 0;
  }
  // Releases the storage when nothing is buffered and it is over `keep`.
  void TrimIfIdle(size_t keep) {
    if (empty() && capacity_ > keep) {
      data_.reset();
      capacity_ = 0;
    }
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
  size_t head_ = 0;
  size_t tail_ = 0;
};

}  // namespace rkv::transport::tcp
