// One client connection of rkv-gateway, seen from the event loop: the
// protocol it speaks (RESP2 on --redis_listen, the memcached text protocol
// on --memcached_listen) behind one interface, so the loop moves bytes and
// knows nothing of commands, and each protocol is tested without sockets.
//
// The loop owns the connection's input and output buffers. It appends what
// the socket delivers to the input and calls Serve with all of it; Serve
// takes the complete requests from the front, executes each on the
// gateway's rkv::Client, appends each reply to *out in request order, and
// returns how many input bytes it consumed. A request that has not fully
// arrived stays in the input for the next call (so a pipeline split
// anywhere across reads is served the same).
//
// Back-pressure: Serve stops before a request once *out holds
// `out_limit` bytes or more, so a client that sends a pipeline and never
// reads cannot make the gateway hold unbounded replies; the loop stops
// reading that socket until it has written the output below the limit, then
// calls Serve again. A request whose size would exceed the protocol's
// bounds (Limits) is answered with the protocol's error and, where the
// protocol cannot resynchronise, close is set: the loop writes what *out
// holds, then closes.
//
// Rounds: a session made with its loop thread's Round may defer the rkv
// calls of its requests instead of making them: it queues them in the
// Round, consumes those requests, and returns with `deferred` set, having
// appended no reply of theirs nor served any request after them. The loop
// gathers the deferred work of every connection it served in one pass over
// its ready connections, runs it with one Round::Execute (so one MultiGet
// serves the GETs of many connections), then calls each deferred session's
// Serve again, even with no input left: that call first appends the
// deferred requests' replies, in order, then serves on. Until Execute ran,
// Serve of a deferred session consumes nothing and returns deferred again.
// The Round owns what was queued, so a session (or its connection) may go
// away while deferred.
//
// Thread safety: a Session is used by one loop thread at a time; the
// rkv::Client it holds is shared by every session (it is thread-safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace rkv {
class Client;
}

namespace rkv::gateway {

struct ServeResult {
  size_t consumed = 0;    // input bytes taken (whole requests only)
  bool close = false;     // write *out, then close the connection
  bool deferred = false;  // waits for its Round's Execute (see the file comment)
};

// The rkv calls that the sessions of one loop thread deferred during one
// pass of the loop over its ready connections (see the file comment).
// Thread safety: used by its loop thread only.
class Round {
 public:
  virtual ~Round() = default;
  // True when some session deferred work since the last Execute.
  virtual bool pending() const = 0;
  // Executes the deferred work; afterwards each deferred session's next
  // Serve appends its replies. The results of one Execute are kept until
  // the next.
  virtual void Execute() = 0;
};

class Session {
 public:
  virtual ~Session() = default;
  // See the file comment. `in` is the unconsumed input; `out` the pending
  // output, appended to.
  virtual ServeResult Serve(std::string_view in, std::string* out, size_t out_limit) = 0;
};

// What every session of a gateway shares.
struct Limits {
  size_t max_key_bytes = 0;    // rkv's (the server's AcceptData / client's)
  size_t max_value_bytes = 0;  // rkv's
};

}  // namespace rkv::gateway
