// Connects to a port where nothing listens: expects a clean UNAVAILABLE,
// from the data API (rkv/client.h) and from the administration
// (rkv/admin.h).
#include <rkv/admin.h>
#include <rkv/client.h>

#include <iostream>

int main() {
  rkv::ClientOptions options;
  options.server = "127.0.0.1:1";
  options.token = "consumer-token";
  options.transport = "tcp";
  options.timeout = std::chrono::milliseconds(300);
  auto client = rkv::Client::Connect(options);
  if (client.ok()) {
    std::cerr << "connected to a port where nothing listens\n";
    return 1;
  }
  std::cout << "Connect: " << client.status() << "\n";
  if (client.status().code() != rkv::StatusCode::kUnavailable) {
    std::cerr << "expected UNAVAILABLE, got " << rkv::StatusCodeName(client.status().code()) << "\n";
    return 1;
  }

  options.server.clear();
  options.coordinator = "127.0.0.1:1";
  auto admin = rkv::ClusterAdmin::Connect(options);
  if (admin.ok()) {
    std::cerr << "an admin connected to a coordinator where nothing listens\n";
    return 1;
  }
  std::cout << "ClusterAdmin::Connect: " << admin.status() << "\n";
  if (admin.status().code() != rkv::StatusCode::kUnavailable) {
    std::cerr << "expected UNAVAILABLE, got " << rkv::StatusCodeName(admin.status().code()) << "\n";
    return 1;
  }
  return 0;
}
