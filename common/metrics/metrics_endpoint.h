// GET /metrics over HTTP (cpp-httplib's server on its own thread), for
// Prometheus to scrape: each request calls `collect` and answers the
// families it returns, rendered (common/metrics/exposition.h), with
// Content-Type kContentType. Values are read when a scrape asks for them;
// nothing polls in the background. Every other path answers 404.
//
// The process's own flag (--metrics_listen) names the address; an empty
// flag starts no endpoint. The address is bound without SO_REUSEPORT, so
// a port another process listens on is an error at Start, not a second
// listener sharing the scrapes.
//
// Thread safety: `collect` is called from the endpoint's threads (one
// scrape at a time per connection, scrapes of several connections
// concurrently): it must be thread-safe, and it and what it reads must
// outlive Stop. Stop may be called from any thread, once at a time; the
// destructor calls it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/exposition.h"
#include "common/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace rkv::metrics {

class MetricsEndpoint {
 public:
  using Collect = std::function<std::vector<MetricFamily>()>;

  // Binds `listen` (HOST:PORT; port 0 picks a free one) and serves
  // GET /metrics until Stop. INVALID_ARGUMENT for a malformed address or
  // no `collect`; UNAVAILABLE, naming the address (and the system's
  // reason when it gives one), when the address cannot be bound (in use,
  // or not an address of this host).
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen, Collect collect);

  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Closes the listening socket, lets requests in progress finish and
  // joins the endpoint's threads; a later request is refused. Idempotent.
  void Stop();

  // "HOST:PORT" actually bound (the real port when 0 was asked).
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint() = default;

  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  // Set when the serving thread's listen loop has returned.
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;  // runs server_'s listen loop; joined by Stop
};

}  // namespace rkv::metrics
