// A writable, contiguous export of a Python object's buffer (the buffer
// protocol, PyObject_GetBuffer with PyBUF_WRITABLE): bytearray, a
// contiguous memoryview or array, a C-contiguous numpy array.
//
// While a BufferView lives the exporter keeps the memory where it is: a
// bytearray refuses to be resized (BufferError), a memoryview to be
// released. So the memory may be written with the GIL released as long as
// the BufferView outlives that work.
//
// Thread safety: construct and destroy with the GIL held; data() and size()
// may be read without it.
#pragma once

#include <cstddef>
#include <span>

#include <pybind11/pybind11.h>

namespace rkv::python {

class BufferView {
 public:
  // The exporter's error (TypeError for an object without the buffer
  // protocol, BufferError for a read-only or non-contiguous one) as
  // pybind11::error_already_set.
  explicit BufferView(pybind11::handle object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_WRITABLE) != 0) throw pybind11::error_already_set();
  }
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(view_.buf), size()}; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_;
};

}  // namespace rkv::python
