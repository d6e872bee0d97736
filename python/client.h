// rkv.Client: librkv's rkv::Client as a Python class (module.cc binds it).
//
// Keys and values come in as bytes, str (UTF-8) or any bytes-like object
// (BytesArg) and go out as bytes. Every call into librkv runs with the GIL
// released, so Python threads calling one Client run in parallel (up to
// `connections` calls at once, as rkv::Client allows) while other Python
// threads keep running. Errors are raised as rkv.Error subclasses
// (errors.h); argument errors as ValueError or TypeError.
//
// Thread safety: a PyClient may be used from many Python threads at once.
// Every member function is entered with the GIL held. client_ is read and
// written only with the GIL held; a call copies it (a reference) before it
// releases the GIL, so close() from one thread while another is inside a
// call frees the rkv::Client only once that call returned. registrations_
// too is read and written only with the GIL held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <pybind11/pybind11.h>

#include "python/registered_buffer.h"
#include "rkv/client.h"

namespace rkv::python {

class PyClient {
 public:
  // Validates the arguments (ValueError; TypeError for a wrong type),
  // reads `token_file` (OSError from the file system; ValueError for an
  // empty file or one over 4096 bytes, trailing whitespace stripped as
  // kvctl does) and connects (the rkv.Error of rkv::Client::Connect).
  PyClient(const pybind11::object& server, const pybind11::object& coordinators, const pybind11::object& token,
           const pybind11::object& token_file, const std::string& transport, double timeout_s, int connections,
           const pybind11::object& tls_ca = pybind11::none(), const pybind11::object& tls_cert = pybind11::none(),
           const pybind11::object& tls_key = pybind11::none(), bool data_plane_tls = false);
  // Ends the registrations still held (as Close does).
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  pybind11::bytes Get(pybind11::handle key);
  pybind11::tuple GetVersioned(pybind11::handle key);
  uint64_t Put(pybind11::handle key, pybind11::handle value, std::optional<uint64_t> if_version, bool if_absent,
               std::optional<double> ttl);
  // Seconds until key expires; nullopt (None) when it has no deadline.
  std::optional<double> Ttl(pybind11::handle key);
  void Delete(pybind11::handle key, std::optional<uint64_t> if_version);
  // bytes per key, None for an absent one; another error raises the first
  // failing key's.
  pybind11::list MultiGet(const pybind11::iterable& keys);
  // `items`: a mapping or an iterable of (key, value) pairs. The versions,
  // in order; the first failing item's error raises (the others may have
  // been applied).
  pybind11::list MultiPut(const pybind11::object& items);
  // True per removed key, False per absent one; another error raises.
  pybind11::list MultiDelete(const pybind11::iterable& keys);
  // Cluster mode: the cached map's servers as dicts. FailedPrecondition
  // for a client of one server.
  pybind11::list Members();
  pybind11::dict Stats();
  // Writes the value of `key` into the writable contiguous `buffer`
  // (rkv::Client::GetInto on its memory: in place when it lies in a
  // registered buffer, else one copy); returns its size. rkv.BufferTooSmall
  // with the size needed when it does not fit. Bytes of `buffer` past the
  // value may be overwritten; on any error its contents are unspecified.
  size_t GetInto(pybind11::handle key, pybind11::handle buffer);
  // Registers the writable contiguous `buffer` for GetInto
  // (PyRegisteredBuffer); FailedPrecondition once closed.
  std::shared_ptr<PyRegisteredBuffer> RegisterBuffer(pybind11::handle buffer);
  // Ends every registration still held, then disconnects; later calls
  // raise FailedPrecondition. Idempotent.
  void Close();
  bool closed() const { return client_ == nullptr; }

 private:
  // A reference to the client; FailedPrecondition once closed.
  std::shared_ptr<Client> Acquire() const;
  // Runs `call(client)` with the GIL released and returns its result. The
  // call holds its own reference to the client and drops it before the GIL
  // is taken again: a close() from another thread meanwhile frees the
  // client there, without the GIL.
  template <typename Call>
  auto WithoutGil(Call&& call) const {
    std::shared_ptr<Client> client = Acquire();
    pybind11::gil_scoped_release release;
    auto result = call(*client);
    client.reset();
    return result;
  }

  // Unregisters each registration of RegisterBuffer still alive, and
  // forgets them.
  void EndRegistrations();

  std::shared_ptr<Client> client_;
  // What RegisterBuffer made: Close ends those still alive, so that
  // close() disconnects and their memory is released.
  std::vector<std::weak_ptr<PyRegisteredBuffer>> registrations_;
};

}  // namespace rkv::python
