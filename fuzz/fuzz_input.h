// Helpers shared by the fuzz targets (fuzz/*_fuzz.cc): a reader that takes
// fixed-size fields from the front of the fuzzer's bytes, and a check that
// stops the run (a crash libFuzzer reports, with the input kept) when a
// property of the code under test does not hold.
//
// The targets are built twice: as libFuzzer binaries (RKV_FUZZ, clang) and,
// in every other build, with replay_main.cc as ctests that run their corpus
// (fuzz/CMakeLists.txt). Nothing here depends on libFuzzer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace rkv::fuzz {

// Takes bytes from the front of the input; past its end every field reads
// as zero bytes, so a short input is still a valid (if dull) one.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }

  // Up to `n` bytes (fewer at the end of the input).
  std::span<const uint8_t> Bytes(size_t n) {
    const size_t k = n < remaining() ? n : remaining();
    std::span<const uint8_t> out(data_ + pos_, k);
    pos_ += k;
    return out;
  }
  std::span<const uint8_t> Rest() { return Bytes(remaining()); }

  template <typename T>
  T Take() {
    T v{};
    const std::span<const uint8_t> b = Bytes(sizeof(T));
    if (!b.empty()) std::memcpy(&v, b.data(), b.size());
    return v;
  }

  // A string of up to `max` bytes whose length is the next byte (mod max+1).
  std::string String(size_t max) {
    const size_t n = Take<uint8_t>() % (max + 1);
    const std::span<const uint8_t> b = Bytes(n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline std::string_view AsText(std::span<const uint8_t> b) {
  return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

[[noreturn]] inline void Fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: property violated: %s\n", file, line, what);
  std::abort();
}

}  // namespace rkv::fuzz

// Aborts (a crash libFuzzer reports) when `cond` is false. Unlike assert it
// is never compiled out.
#define RKV_FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::rkv::fuzz::Fail(__FILE__, __LINE__, #cond))
