// Helpers shared by the fuzz targets (fuzz/*_fuzz.cc): a reader that takes
// fixed-size fields from the front of the fuzzer's bytes, a check that
// stops the run (a crash libFuzzer reports, with the input kept) when a
// property of the code under test does not hold, and the request parsers'
// property that a split input parses as the whole one.
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
#include <vector>

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

// Aborts (a crash libFuzzer reports) when `cond` is false. Unlike assert it
// is never compiled out.
#define RKV_FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::rkv::fuzz::Fail(__FILE__, __LINE__, #cond))

// A connection's bytes delivered in two parts, split at `split`, as an
// event loop may see them (it splits wherever the socket did): buffer()
// holds what arrived and is not consumed yet; the parser under test erases
// what it consumed.
class SplitDelivery {
 public:
  SplitDelivery(std::string_view in, size_t split) : in_(in), buffer_(in.substr(0, split)), delivered_(split) {}

  std::string& buffer() { return buffer_; }
  // Appends the second part; false when everything was delivered already.
  bool DeliverMore() {
    if (delivered_ == in_.size()) return false;
    buffer_.append(in_.substr(delivered_));
    delivered_ = in_.size();
    return true;
  }

 private:
  std::string_view in_;
  std::string buffer_;
  size_t delivered_;
};

// The property of a request parser that it sees the same requests however
// its input is split: parse_all(SplitDelivery&) parses a delivery to its
// end and returns one line per result; the whole input delivered at once
// and the input split where `split_byte` says (mod size + 1) must give the
// same lines. Fails the run otherwise (RKV_FUZZ_CHECK).
template <typename ParseAll>
void CheckSameRequestsWhateverTheSplit(std::string_view in, uint8_t split_byte, ParseAll&& parse_all) {
  SplitDelivery whole(in, in.size());
  const std::vector<std::string> at_once = parse_all(whole);
  SplitDelivery parted(in, in.empty() ? 0 : split_byte % (in.size() + 1));
  RKV_FUZZ_CHECK(at_once == parse_all(parted));
}

}  // namespace rkv::fuzz
