#pragma once
// A TCP socket listening on 127.0.0.1 at a port the kernel picks, for the
// test servers (fault_http_server.h, fault_proxy.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace strata::testnet {

// The listening socket; its port in `port`.
inline int listen_on_loopback(int& port, int backlog) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  port = ntohs(a.sin_port);
  ::listen(fd, backlog);
  return fd;
}

}  // namespace strata::testnet
