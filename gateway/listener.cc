#include "gateway/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rkv::gateway {
namespace {

rkv::Status SplitHostPort(const std::string& host_port, std::string* host, std::string* port) {
  auto bad = [&](const std::string& why) {
    return rkv::Status(rkv::StatusCode::kInvalidArgument,
                       "listen address '" + host_port + "' is not HOST:PORT: " + why);
  };
  size_t colon;
  if (!host_port.empty() && host_port[0] == '[') {
    size_t close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() || host_port[close + 1] != ':') {
      return bad("an IPv6 address is written [ADDRESS]:PORT");
    }
    *host = host_port.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = host_port.rfind(':');
    if (colon == std::string::npos) return bad("no ':PORT'");
    *host = host_port.substr(0, colon);
    if (host->find(':') != std::string::npos) return bad("an IPv6 address is written [ADDRESS]:PORT");
  }
  *port = host_port.substr(colon + 1);
  if (host->empty()) return bad("no HOST");
  if (port->empty() || port->size() > 5 || port->find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(*port) > 65535) {
    return bad("PORT must be a number from 0 to 65535");
  }
  return rkv::Status::Ok();
}

}  // namespace

rkv::StatusOr<int> Listen(const std::string& host_port, int backlog) {
  std::string host, port;
  rkv::Status split = SplitHostPort(host_port, &host, &port);
  if (!split.ok()) return split;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return rkv::Status(rkv::StatusCode::kNotFound,
                       "cannot listen on " + host_port + ": " + host + " does not resolve (" + gai_strerror(rc) + ")");
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    if (listen(fd, backlog) != 0) {
      last_error = std::string("listen: ") + std::strerror(errno);
      close(fd);
      continue;
    }
    freeaddrinfo(found);
    return fd;
  }
  freeaddrinfo(found);
  return rkv::Status(rkv::StatusCode::kUnavailable, "cannot listen on " + host_port + ": " + last_error);
}

std::string BoundAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "";
}

int BoundPort(int fd) {
  std::string address = BoundAddress(fd);
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  return std::stoi(address.substr(colon + 1));
}

}  // namespace rkv::gateway
