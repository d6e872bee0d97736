// Connects to a port where nothing listens: expects a clean UNAVAILABLE.
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
  return 0;
}
