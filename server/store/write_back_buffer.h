// WriteBackBuffer: the last write of each key, as Store's background writes
// (--durability=none, docs/design.md §5.5) hold them until the writer
// thread writes them to RocksDB. A key written again replaces its entry in
// place (its buffers reused); the entries are read back in the order their
// keys were first added, by index, and the buffer is only ever emptied
// whole (Clear), never one key at a time.
//
// Layout: the entries in one array (entries_, [0, size_) in use), found by
// key through a flat open-addressing index (slots_: linear probing, no
// deletion, so no tombstones) of 8-byte slots, each the entry's position
// and the top 32 bits of its key's hash. A lookup reads the slots it
// probes, and an entry only where the hash bits match: one cache miss in
// the index and one in the entry for a key present, where a node-based map
// (std::unordered_map, before) took a bucket, a node and the node's key
// string, and hashed the next node's key again at each step of a chain
// (libstdc++ keeps no hash in a node for a hash it deems fast). On a
// 100,000-key buffer that lookup was 19% of rkv-server's CPU under a
// pipelined SET load (design §8.14.6).
//
// Reuse: Clear keeps the entries' key and value buffers for the next
// writes (a warm buffer allocates nothing), up to kSpareBytes of them
// together and none above kKeptEntryBytes each; entries past that budget
// are freed.
//
// Thread safety: none; Store guards its pending buffer with its queue
// mutex and lets the writer thread own the one it writes.
//
// Invariants: size_ <= entries_.size(); each entry in [0, size_) has one
// slot in slots_ naming it, found by linear probing from its hash's home
// slot with no empty slot on the way; entries' keys are distinct; at most
// half the slots are used, so a probe always ends at an empty slot;
// slots_.size() is zero or a power of two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::server {

class WriteBackBuffer {
 public:
  struct Entry {
    std::string key;
    std::string value;
    uint64_t hash = 0;  // BufferKeyHash(key)
    uint64_t version = 0;
    int64_t expires_at_ms = 0;
    bool put = false;
  };

  // What Clear keeps of the entries' buffers (key and value capacity) for
  // reuse: at most kSpareBytes in all, and no entry whose buffers alone
  // pass kKeptEntryBytes.
  static constexpr uint64_t kSpareBytes = 8ULL << 20;
  static constexpr uint64_t kKeptEntryBytes = 64ULL << 10;

  WriteBackBuffer() = default;
  WriteBackBuffer(const WriteBackBuffer&) = delete;
  WriteBackBuffer& operator=(const WriteBackBuffer&) = delete;

  // The entry of `key`: the one present (*existed = true; its fields are
  // the last write's) or a new one at index size() - 1 (*existed = false;
  // its key is set, its other fields are for the caller to set). The
  // reference holds until the next Upsert, Clear or swap.
  Entry& Upsert(std::string_view key, bool* existed);

  // The entry of `key`, or null.
  const Entry* Find(std::string_view key) const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Entry i, 0 <= i < size(), in the order the keys were first added.
  const Entry& operator[](size_t i) const { return entries_[i]; }

  // Empties the buffer, keeping buffers for reuse as above.
  void Clear();

  void swap(WriteBackBuffer& other) noexcept;

  // The bytes the buffer holds (entries, their buffers, the index),
  // spare ones included.
  uint64_t MemoryBytes() const;

 private:
  // The slot of `key` (hash `hash`): the one naming its entry, or the
  // empty slot where it would go.
  size_t Probe(std::string_view key, uint64_t hash) const;
  // Doubles the index (at least kMinSlots) and places every entry again.
  void Grow();

  static constexpr size_t kMinSlots = 64;

  std::vector<Entry> entries_;
  size_t size_ = 0;
  // 0: empty; else (top 32 bits of the hash) << 32 | (index + 1).
  std::vector<uint64_t> slots_;
};

// The hash a WriteBackBuffer places a key by (XXH3-64, seed 0).
uint64_t BufferKeyHash(std::string_view key);

}  // namespace rkv::server
