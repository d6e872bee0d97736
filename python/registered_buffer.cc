#include "python/registered_buffer.h"

#include <utility>

#include "python/errors.h"

namespace py = pybind11;

namespace rkv::python {

PyRegisteredBuffer::PyRegisteredBuffer(std::shared_ptr<Client> client, py::handle buffer)
    : object_(py::reinterpret_borrow<py::object>(buffer)) {
  view_.emplace(buffer);
  StatusOr<BufferHandle> handle = Status();
  {
    // Nothing else sees this registration yet: its members may be read
    // without the GIL.
    py::gil_scoped_release release;
    handle = client->RegisterBuffer(view_->bytes());
  }
  if (!handle.ok()) {
    view_.reset();
    ThrowStatus(handle.status());
  }
  handle_ = *handle;
  client_ = std::move(client);
}

PyRegisteredBuffer::~PyRegisteredBuffer() { (void)End(); }

void PyRegisteredBuffer::Unregister() {
  const Status status = End();
  if (!status.ok()) ThrowStatus(status);
}

Status PyRegisteredBuffer::End() {
  if (!handle_) return Status::Ok();
  // The memory stays exported until no READ can land in it any more.
  const Status status = client_->UnregisterBuffer(*handle_);
  handle_.reset();
  view_.reset();
  client_.reset();
  return status;
}

}  // namespace rkv::python
