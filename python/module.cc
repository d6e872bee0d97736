// The Python module rkv: its exceptions (errors.h), rkv.Client (client.h)
// and rkv.RegisteredBuffer (registered_buffer.h). rkv.pyi beside this file
// gives the types; docs/design.md ("Python module") the rules.
#include <string>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/client.h"
#include "python/errors.h"
#include "python/registered_buffer.h"

namespace py = pybind11;
using rkv::python::PyClient;
using rkv::python::PyRegisteredBuffer;

PYBIND11_MODULE(rkv, m) {
  m.doc() =
      "Client of an rkv server or cluster, over librkv.\n\n"
      "    with rkv.Client(server=\"127.0.0.1:7700\", token_file=\"token\") as c:\n"
      "        version = c.put(b\"user:42\", b\"alice\")\n"
      "        c.get(b\"user:42\")  # b\"alice\"\n\n"
      "Keys and values are bytes (str is taken as UTF-8; any bytes-like object is accepted); values come "
      "back as bytes. Errors are rkv.Error subclasses, one per status code (rkv.NotFound is also a "
      "KeyError, rkv.InvalidArgument also a ValueError). Every call releases the GIL while librkv works, "
      "and a Client may be shared by threads.";

  rkv::python::RegisterErrors(m);

  // Before Client, whose register_buffer returns one.
  py::class_<PyRegisteredBuffer, std::shared_ptr<PyRegisteredBuffer>>(
      m, "RegisteredBuffer",
      "A buffer registered with a Client by Client.register_buffer: get_into into it (or into a slice of "
      "it) gets the value by the READ itself, with no copy. While registered it holds the buffer (a "
      "bytearray cannot be resized: BufferError) and the client's connection. The registration ends "
      "with unregister(), when the object is collected, or when its Client is closed. A context "
      "manager: leaving the with block unregisters it.")
      .def("unregister", &PyRegisteredBuffer::Unregister,
           "Deregisters the memory and releases the buffer; later get_into calls into it copy the value "
           "once. Unregistering again, or after the Client was closed, does nothing.")
      .def_property_readonly("registered", &PyRegisteredBuffer::registered,
                             "True until unregister() or the Client's close().")
      .def_property_readonly("buffer", &PyRegisteredBuffer::buffer, "The object that was registered.")
      .def_property_readonly("nbytes", &PyRegisteredBuffer::nbytes,
                             "The registered memory's size in bytes; 0 once unregistered.")
      .def(
          "__enter__", [](py::object self) { return self; }, "Returns the registration itself.")
      .def(
          "__exit__",
          [](PyRegisteredBuffer& self, const py::object&, const py::object&, const py::object&) {
            self.Unregister();
            return false;
          },
          "Unregisters; exceptions propagate.");

  py::class_<PyClient>(m, "Client",
                       "A connection to one rkv server or to a cluster (through its coordinators). Thread-safe: "
                       "up to `connections` calls run at once, each with the GIL released. A context "
                       "manager: leaving the with block closes it.")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, const std::string&,
                    double, int, const py::object&, const py::object&, const py::object&, bool>(),
           py::arg("server") = py::none(), py::arg("coordinators") = py::none(), py::arg("token") = py::none(),
           py::arg("token_file") = py::none(), py::arg("transport") = "auto", py::arg("timeout") = 5.0,
           py::arg("connections") = 1, py::kw_only(), py::arg("tls_ca") = py::none(),
           py::arg("tls_cert") = py::none(), py::arg("tls_key") = py::none(), py::arg("data_plane_tls") = false,
           "Connects to a server or a cluster.\n\n"
           "server: \"HOST:PORT\" of an rkv-server's data plane; or coordinators: a list of \"HOST:PORT\" "
           "(or one comma-separated str) of the cluster's coordinators (cluster mode). Exactly one.\n"
           "token: the access token (str or bytes); or token_file: a path to a file holding it "
           "(trailing whitespace stripped, as kvctl reads --token_file). Exactly one.\n"
           "transport: \"auto\", \"tcp\" or \"verbs\".\n"
           "timeout: seconds, the deadline of the connect and of every call.\n"
           "connections: 1..64, how many calls may run at once (per server in cluster mode).\n"
           "tls_ca, tls_cert, tls_key: PEM file paths for TLS on the control plane (cluster mode, as "
           "kvctl's --tls_ca, --tls_cert, --tls_key): tls_ca turns it on; tls_cert and tls_key, both or "
           "neither, are a client certificate for a cluster that checks clients'.\n"
           "data_plane_tls: TLS on the data plane too (tcp; servers started with --data_plane_tls), the "
           "servers' certificates verified against tls_ca, which it needs.\n\n"
           "Raises ValueError for bad arguments, OSError when token_file cannot be read, and the rkv.Error "
           "of the connect: Unavailable (unreachable), PermissionDenied (a server refused the token), "
           "Unauthenticated (a coordinator refused it), ResourceExhausted (no connection slot left), ...")
      .def("get", &PyClient::Get, py::arg("key"),
           "The value of key, as bytes. Raises rkv.NotFound (a KeyError) when absent. The read is "
           "linearizable.")
      .def("get_versioned", &PyClient::GetVersioned, py::arg("key"),
           "(value, version) of key. Raises rkv.NotFound when absent.")
      .def("ttl", &PyClient::Ttl, py::arg("key"),
           "Seconds until key expires, or None when it does not. Raises rkv.NotFound when absent "
           "(an expired key included).")
      .def("put", &PyClient::Put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("if_version") = py::none(), py::arg("if_absent") = false, py::arg("ttl") = py::none(),
           "Stores value under key and returns the key's new version (versions of a key grow). "
           "ttl=SECONDS: the key expires (reads as absent) that long from now, by this machine's clock. "
           "if_version=V writes only if the key's version is V (a compare-and-set: the version from "
           "get_versioned or put), if_absent=True only if the key does not exist; otherwise "
           "rkv.FailedPrecondition (reason CONDITION_FAILED, the key's version in the message) and "
           "nothing is written. "
           "rkv.InvalidArgument for a key outside 1..max_key_bytes bytes or a value over max_value_bytes "
           "(see stats()).")
      .def("delete", &PyClient::Delete, py::arg("key"), py::kw_only(), py::arg("if_version") = py::none(),
           "Removes key. Raises rkv.NotFound when it was absent. With if_version, only if the key's version is "
           "that one (a compare-and-delete): rkv.PreconditionFailed, nothing removed, when it is another or the "
           "key is absent.")
      .def("multi_get", &PyClient::MultiGet, py::arg("keys"),
           "The values of many keys with pipelined reads: a list, one item per key in order, bytes or None "
           "for an absent key. Any other error of an item raises (the first one, its message naming the "
           "item).")
      .def("multi_put", &PyClient::MultiPut, py::arg("items"),
           "Stores many pairs, given as a dict or an iterable of (key, value) pairs, with many requests in "
           "flight; returns their new versions in order. Two items of one key leave the later one's value. "
           "The first failing item's error raises, its message naming the item; the other items may have "
           "been applied.")
      .def("multi_delete", &PyClient::MultiDelete, py::arg("keys"),
           "Removes many keys: a list, one bool per key in order, True when removed, False when it was "
           "absent. Any other error of an item raises.")
      .def("members", &PyClient::Members,
           "Cluster mode: the servers of the client's cached cluster map, in join order, as dicts "
           "(server_id, epoch, state, data_address, admin_address, transport, shards, backup_shards, "
           "syncing_shards, keys, heap_bytes_used, heap_bytes, zone, draining, down_since_unix_ms). A "
           "client of one server has no map: raises rkv.FailedPrecondition.")
      .def("stats", &PyClient::Stats,
           "A dict: location_cache (enabled, entries, bytes, capacity_bytes, hits, misses, fallbacks, "
           "evictions), retries and attempts_by_server ({server: attempts}; the client's own counters), "
           "get_into_in_place and get_into_copied (get_into values the READ put into a registered "
           "buffer, and values copied into the buffer once), cluster_mode, cluster_map_version, "
           "max_key_bytes, max_value_bytes, server_epoch, transport, transport_reason; in cluster mode "
           "also servers: {server_id: {epoch, counters: {name: value}}} from each server's admin service "
           "({error: message} for one that did not answer).")
      .def("get_into", &PyClient::GetInto, py::arg("key"), py::arg("buffer"),
           "Writes the value of key into buffer, any writable contiguous bytes-like object (bytearray, "
           "memoryview, array, a C-contiguous numpy array), from its start; returns the value's size. "
           "Within a buffer registered with register_buffer (the buffer itself or a slice of it) the "
           "READ puts the value there, with no copy; elsewhere it is copied once from the client's own "
           "memory. Bytes of buffer past the value may be overwritten too (the stored block's padding, "
           "up to 63 bytes), never bytes outside buffer. Raises rkv.BufferTooSmall, whose needed "
           "attribute is the value's size, when the value does not fit, and rkv.NotFound when absent; "
           "on any error the contents of buffer are unspecified.")
      .def("register_buffer", &PyClient::RegisterBuffer, py::arg("buffer"),
           "Registers buffer, a writable contiguous bytes-like object, for get_into and returns its "
           "rkv.RegisteredBuffer (a context manager); get_into into it, or into a slice of it, then "
           "reads the value in place. The buffer is held (a bytearray cannot be resized) until the "
           "registration ends. Raises rkv.InvalidArgument for an empty buffer, rkv.AlreadyExists when "
           "it overlaps a registered buffer, TypeError or BufferError for one that is not writable and "
           "contiguous, and the transport's error when the memory cannot be registered (on verbs it is "
           "pinned: RLIMIT_MEMLOCK applies).")
      .def("close", &PyClient::Close,
           "Unregisters the buffers still registered, then disconnects. Later calls raise "
           "rkv.FailedPrecondition; closing again does nothing.")
      .def_property_readonly("closed", &PyClient::closed, "True once close() was called.")
      .def(
          "__enter__", [](py::object self) { return self; }, "Returns the client itself.")
      .def(
          "__exit__",
          [](PyClient& self, const py::object&, const py::object&, const py::object&) {
            self.Close();
            return false;
          },
          "Closes the client; exceptions propagate.");
}
