// The bytes of a key or value passed from Python, readable while the GIL is
// released.
//
// bytes and str (as UTF-8) are viewed in place: both are immutable and the
// BytesArg holds a reference, so no other thread can change or free them.
// Any other bytes-like object (bytearray, memoryview, array) may change
// while the GIL is released, so its bytes are copied.
//
// Thread safety: construct and destroy with the GIL held; view() may be
// read without it.
#pragma once

#include <string>
#include <string_view>

#include <pybind11/pybind11.h>

namespace rkv::python {

class BytesArg {
 public:
  // TypeError (pybind11::type_error) naming `what` ("key", "value") for an
  // object that is neither bytes, str nor bytes-like.
  BytesArg(pybind11::handle object, const char* what);

  BytesArg(BytesArg&&) noexcept = default;
  BytesArg& operator=(BytesArg&&) noexcept = default;
  BytesArg(const BytesArg&) = delete;
  BytesArg& operator=(const BytesArg&) = delete;

  std::string_view view() const { return copied_ ? std::string_view(copy_) : view_; }

 private:
  pybind11::object owner_;  // keeps a viewed bytes or str alive
  std::string_view view_;   // into owner_, unless copied_
  bool copied_ = false;
  std::string copy_;        // the bytes of any other object
};

}  // namespace rkv::python
