#pragma once
// A fault-injecting HTTP proxy for the install tests: on 127.0.0.1 and a
// free port, it passes each request as it came (Host and signature headers
// untouched, so an S3 signature still holds) to an upstream server started
// by the test (nginx, s3rver), and passes the answer back, except that
// every `every`-th GET answer with a body (counted in the order they come
// back; 0: none) is spoiled, by the given kinds in turn, the way a broken
// server or proxy spoils it:
//   Status503 / Status429  the request is refused (Retry-After: 0)
//   CutBody                half the body, then the connection is dropped
//   Truncate               half the body, with a Content-Length that says
//                          so (a complete answer that holds too few bytes)
//   WrongBytes             the whole body with one byte changed
//   Stall                  half the body, then nothing until the client
//                          hangs up
// Every answer is sent with "Connection: close"; one thread per connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loopback_listener.h"

namespace strata::testnet {

enum class ProxyFault { None, Status503, Status429, CutBody, Truncate, WrongBytes, Stall };

inline const char* fault_name(ProxyFault f) {
  switch (f) {
    case ProxyFault::None: return "none";
    case ProxyFault::Status503: return "503";
    case ProxyFault::Status429: return "429";
    case ProxyFault::CutBody: return "cut body";
    case ProxyFault::Truncate: return "truncated";
    case ProxyFault::WrongBytes: return "wrong bytes";
    case ProxyFault::Stall: return "stall";
  }
  return "?";
}

class FaultProxy {
 public:
  FaultProxy(int upstream_port, int every, std::vector<ProxyFault> kinds)
      : upstream_(upstream_port), every_(every), kinds_(std::move(kinds)) {
    fd_ = listen_on_loopback(port_, 64);
    accept_ = std::thread([this] { serve(); });
  }
  ~FaultProxy() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    accept_.join();
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ts.swap(threads_);
    }
    for (std::thread& t : ts) t.join();
  }
  int port() const { return port_; }
  // "http://127.0.0.1:PORT" + what followed the upstream's host and port.
  std::string url(const std::string& path = "") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  void set_every(int every) {
    std::lock_guard<std::mutex> lock(mu_);
    every_ = every;
  }
  std::map<ProxyFault, int> injected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }
  int spoiled() const {
    int n = 0;
    for (const auto& [f, k] : injected()) n += f == ProxyFault::None ? 0 : k;
    return n;
  }

 private:
  static bool send_all(int c, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(c, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  static bool send_all(int c, const std::string& s) { return send_all(c, s.data(), s.size()); }
  static std::string lower(std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }
  // The value of header `name` (lower case) in `head`, or "".
  static std::string header(const std::string& head, const std::string& name) {
    const std::string l = lower(head);
    const size_t at = l.find("\r\n" + name + ":");
    if (at == std::string::npos) return "";
    size_t b = at + 2 + name.size() + 1;
    const size_t e = head.find("\r\n", b);
    while (b < e && head[b] == ' ') ++b;
    return head.substr(b, e - b);
  }
  // Replaces (or adds) header `name` in a head that ends with "\r\n\r\n".
  static std::string with_header(std::string head, const std::string& name, const std::string& value) {
    const std::string l = lower(head);
    const size_t at = l.find("\r\n" + lower(name) + ":");
    if (at != std::string::npos) head.erase(at, head.find("\r\n", at + 2) - at);
    head.insert(head.size() - 2, name + ": " + value + "\r\n");
    return head;
  }

  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      threads_.emplace_back([this, c] {
        handle(c);
        ::close(c);
      });
    }
  }

  // Reads until "\r\n\r\n"; false on a closed connection.
  bool read_head(int c, std::string& in, size_t& head_end) {
    for (;;) {
      head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        head_end += 4;
        return true;
      }
      char buf[8192];
      const ssize_t r = ::recv(c, buf, sizeof buf, 0);
      if (r <= 0) return false;
      in.append(buf, static_cast<size_t>(r));
    }
  }

  void handle(int c) {
    std::string in;
    size_t head_end = 0;
    if (!read_head(c, in, head_end)) return;
    std::string head = in.substr(0, head_end);
    const size_t body_len = static_cast<size_t>(std::atoll(header(head, "content-length").c_str()));
    while (in.size() < head_end + body_len) {
      char buf[8192];
      const ssize_t r = ::recv(c, buf, sizeof buf, 0);
      if (r <= 0) return;
      in.append(buf, static_cast<size_t>(r));
    }
    const bool get = head.starts_with("GET ");
    head = with_header(head, "Connection", "close");
    const std::string request = head + in.substr(head_end, body_len);

    // The upstream's whole answer (it closes the connection after it).
    const int u = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_));
    std::string answer;
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && send_all(u, request)) {
      char buf[65536];
      for (ssize_t r; (r = ::recv(u, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<size_t>(r));
    }
    ::close(u);
    size_t answer_head = answer.find("\r\n\r\n");
    if (answer_head == std::string::npos) return;  // the client sees a dropped connection
    answer_head += 4;
    std::string ahead = with_header(answer.substr(0, answer_head), "Connection", "close");
    std::string body = answer.substr(answer_head);
    const bool ok = ahead.starts_with("HTTP/1.1 200") || ahead.starts_with("HTTP/1.1 206") ||
                    ahead.starts_with("HTTP/1.0 200") || ahead.starts_with("HTTP/1.0 206");

    ProxyFault f = ProxyFault::None;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (get && ok && body.size() >= 2 && !header(ahead, "content-length").empty() && !kinds_.empty() &&
          every_ > 0 && ++answers_ % every_ == 0)
        f = kinds_[turn_++ % kinds_.size()];
      if (get && ok) ++injected_[f];
    }
    const size_t half = body.size() / 2;
    switch (f) {
      case ProxyFault::None:
        send_all(c, ahead + body);
        return;
      case ProxyFault::Status503:
      case ProxyFault::Status429:
        send_all(c, std::string(f == ProxyFault::Status503 ? "HTTP/1.1 503 Service Unavailable"
                                                            : "HTTP/1.1 429 Too Many Requests") +
                        "\r\nRetry-After: 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
      case ProxyFault::CutBody:
        send_all(c, ahead + body.substr(0, half));
        return;
      case ProxyFault::Truncate:
        send_all(c, with_header(ahead, "Content-Length", std::to_string(half)) + body.substr(0, half));
        return;
      case ProxyFault::WrongBytes: {
        std::lock_guard<std::mutex> lock(mu_);
        body[(answers_ * 7919) % body.size()] ^= 0x5a;
      }
        send_all(c, ahead + body);
        return;
      case ProxyFault::Stall:
        send_all(c, ahead + body.substr(0, half));
        for (char b; !stop_;) {
          pollfd p{c, POLLIN, 0};
          if (::poll(&p, 1, 100) > 0 && ::recv(c, &b, 1, 0) <= 0) break;
        }
        return;
    }
  }

  int upstream_ = 0, port_ = 0, fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  int every_ = 0;
  uint64_t answers_ = 0, turn_ = 0;
  std::vector<ProxyFault> kinds_;
  std::map<ProxyFault, int> injected_;
  std::thread accept_;
  std::vector<std::thread> threads_;
};

}  // namespace strata::testnet
