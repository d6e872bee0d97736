// rkv.RegisteredBuffer: a Python buffer registered with a client for
// get_into (rkv::Client::RegisterBuffer), made by Client.register_buffer
// (client.h). A get_into whose buffer lies inside it gets the value by the
// READ itself, with no copy.
//
// Lifetime: the registration holds a writable export of the buffer
// (BufferView) and a reference to the C++ client from RegisterBuffer until
// UnregisterBuffer has returned, so the memory stays valid (a bytearray
// cannot be resized) for as long as a READ may land in it, and the client
// outlives the registration whatever Python frees first. It ends, once, at
// the first of: Unregister(), the destructor, or the PyClient's close() or
// destruction (which call Unregister of each registration they made).
//
// Thread safety: every member function is entered with the GIL held and
// keeps it (UnregisterBuffer only removes a map entry and deregisters the
// memory; it waits for no call), so the registration's state needs no lock
// of its own. Construction releases the GIL while the memory is registered
// (ibv_reg_mr pins it, which takes time for a large buffer).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include <pybind11/pybind11.h>

#include "python/buffer_view.h"
#include "rkv/client.h"

namespace rkv::python {

class PyRegisteredBuffer {
 public:
  // Exports `buffer` (BufferView: TypeError or BufferError when it is not
  // a writable contiguous buffer) and registers its memory with `client`:
  // the rkv.Error of RegisterBuffer otherwise (InvalidArgument for an empty
  // buffer, AlreadyExists when it overlaps a registered one).
  PyRegisteredBuffer(std::shared_ptr<Client> client, pybind11::handle buffer);
  // Unregisters, ignoring its error.
  ~PyRegisteredBuffer();
  PyRegisteredBuffer(const PyRegisteredBuffer&) = delete;
  PyRegisteredBuffer& operator=(const PyRegisteredBuffer&) = delete;

  // Deregisters the memory, then releases the buffer and the client.
  // Idempotent: once unregistered, does nothing. Raises the rkv.Error of
  // UnregisterBuffer (the registration ends either way).
  void Unregister();
  // Unregister, its error returned instead of raised (OK when already
  // unregistered).
  Status End();
  bool registered() const { return handle_.has_value(); }
  // The registered object (it stays referenced after Unregister).
  pybind11::object buffer() const { return object_; }
  // The registered memory's size in bytes (0 once unregistered).
  size_t nbytes() const { return view_ ? view_->size() : 0; }

 private:
  pybind11::object object_;
  std::optional<BufferView> view_;  // engaged while registered
  std::shared_ptr<Client> client_;  // non-null while registered
  std::optional<BufferHandle> handle_;
};

}  // namespace rkv::python
