#include "common/metrics/metrics_endpoint.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include <httplib.h>

#include "common/net_address.h"

namespace rkv::metrics {
namespace {

// Threads serving requests: a scrape is short, but a keep-alive
// connection (Prometheus keeps one per target) holds its thread between
// scrapes, so a few let a person's curl through beside it.
constexpr size_t kServingThreads = 4;
// A client that stalls mid-request or mid-response is dropped after this.
constexpr time_t kIoTimeoutS = 10;

std::string JoinAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen, Collect collect) {
  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(listen, &host, &port));
  if (!collect) return InvalidArgument("no collect function");

  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] { return new httplib::ThreadPool(kServingThreads); };
  server->set_read_timeout(kIoTimeoutS);
  server->set_write_timeout(kIoTimeoutS);
  // SO_REUSEADDR only: a restart may bind a port whose old connections
  // linger in TIME_WAIT, but (unlike httplib's default, which adds
  // SO_REUSEPORT) never one another process listens on.
  server->set_socket_options([](int sock) {
    const int on = 1;
    (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  });
  server->Get("/metrics", [collect = std::move(collect)](const httplib::Request&, httplib::Response& res) {
    StatusOr<std::string> text = Render(collect());
    if (!text.ok()) {
      res.status = 500;
      res.set_content(text.status().ToString() + "\n", "text/plain; charset=utf-8");
      return;
    }
    res.set_content(*text, kContentType);
  });

  errno = 0;
  int bound = port;
  if (port == 0) {
    bound = server->bind_to_any_port(host);
  } else if (!server->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    // httplib keeps no error of its own; errno is the failed call's when
    // it was a socket call (bind: EADDRINUSE), 0 when the host did not
    // resolve.
    const int err = errno;
    std::string why = "cannot listen on " + listen + " (the port is in use, or the host is not an address of this "
                      "machine)";
    if (err != 0) why += ": " + PosixError("bind", err).message();
    return Unavailable(why);
  }
  endpoint->address_ = JoinAddress(host, bound);
  endpoint->server_ = std::move(server);
  MetricsEndpoint* const self = endpoint.get();
  endpoint->thread_ = std::thread([self] {
    (void)self->server_->listen_after_bind();
    // Release: Start's wait reads it with acquire.
    self->listen_returned_.store(true, std::memory_order_release);
  });
  // httplib's stop() acts only once the listen loop runs (is_running()):
  // wait for it, so that a Stop right after Start cannot miss the loop and
  // leave its join waiting forever. The loop starts at once; this bounds
  // nothing but the thread's start-up.
  while (!self->server_->is_running() && !self->listen_returned_.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return endpoint;
}

void MetricsEndpoint::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

MetricsEndpoint::~MetricsEndpoint() { Stop(); }

}  // namespace rkv::metrics
