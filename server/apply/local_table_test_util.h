// For tests of the Applier: the local state it works on, as a server builds
// it (a Store in a scratch directory, a Heap, and a Table over zeroed,
// 64-byte-aligned index and heap memory), one per test.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/layout.h"
#include "common/status.h"
#include "server/table/heap.h"
#include "server/store/store.h"
#include "server/table/table.h"

namespace rkv::server::testing {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

// `n` zeroed bytes aligned to 64 (a cache line, as the server's regions).
inline AlignedBuffer AlignedZeroed(size_t n) {
  AlignedBuffer b(static_cast<uint8_t*>(std::aligned_alloc(64, n)));
  std::memset(b.get(), 0, n);
  return b;
}

struct LocalTable {
  std::filesystem::path dir;
  std::unique_ptr<Store> store;
  size_t index_bytes = 0;
  AlignedBuffer index;
  AlignedBuffer heap_memory;
  std::unique_ptr<Heap> heap;
  std::unique_ptr<Table> table;

  // Closes what was open, then opens a store (`durability`) in a fresh
  // directory named after `prefix`, the process and the running test, and a
  // table of 2^log2 buckets over a heap of `heap_bytes` with quarantine
  // `grace`. The store's or the table's error, naming which.
  Status Open(const std::string& prefix, uint32_t log2, uint64_t heap_bytes, std::chrono::milliseconds grace,
              Durability durability = Durability::kWal) {
    Close();
    dir = std::filesystem::path(::testing::TempDir()) /
          (prefix + "_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    StatusOr<std::unique_ptr<Store>> opened = Store::Open(dir.string(), durability);
    if (!opened.ok()) return opened.status().WithContext("opening the store");
    store = std::move(opened).value();
    index_bytes = layout::IndexBytes(uint64_t{1} << log2);
    index = AlignedZeroed(index_bytes);
    heap_memory = AlignedZeroed(heap_bytes);
    heap = std::make_unique<Heap>(heap_bytes, grace);
    table = std::make_unique<Table>(std::span<uint8_t>(index.get(), index_bytes),
                                    std::span<uint8_t>(heap_memory.get(), heap_bytes), heap.get());
    return table->Init(log2, store->epoch(), 42).WithContext("initialising the table");
  }

  // Closes the table and the store and removes the directory (whatever
  // uses them, such as an Applier, must be gone first).
  void Close() {
    table.reset();
    store.reset();
    if (!dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

}  // namespace rkv::server::testing
