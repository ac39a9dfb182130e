#pragma once
// A deliberately bad HTTP/1.1 file server for the remote tests, on
// 127.0.0.1 and a free port: it serves one file (any path) with HEAD and
// single-range GET, one connection at a time, and misbehaves as told for
// the next requests: answers 503 or 429, cuts the body short and drops the
// connection, stalls mid-body (until the client hangs up), names another
// range, ignores the range, or answers with another ETag (the file replaced). Raw sockets, so that each fault is exactly what a broken
// server or proxy sends (a library server would correct some of them).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "loopback_listener.h"

namespace strata::testnet {

enum class Fault { None, Status503, Status429, CutBody, Stall, WrongRange, IgnoreRange, Status403, NewEtag };

class FaultHttpServer {
 public:
  // `retry_after`: the Retry-After of its 503 and 429 answers.
  explicit FaultHttpServer(std::string body, int retry_after = 0) : body_(std::move(body)), retry_after_(retry_after) {
    fd_ = listen_on_loopback(port_, 16);
    thread_ = std::thread([this] { serve(); });
  }
  ~FaultHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }

  std::string url(const std::string& path = "/file") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  // The next GET requests (HEADs are always answered well) get these faults, in order.
  void then(Fault f, int times = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < times; ++i) faults_.push_back(f);
  }
  int gets() const { return gets_; }
  // Every request's method line and headers, as received, in order.
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // The Range header of every GET, in order.
  std::vector<std::string> ranges() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      handle(c);
      ::close(c);
    }
  }

  static void send_all(int c, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::send(c, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  void handle(int c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req.substr(0, req.find("\r\n\r\n")));
    }
    const bool head = req.starts_with("HEAD ");
    std::string range;
    for (const char* name : {"\r\nRange: ", "\r\nrange: "})
      if (const size_t at = req.find(name); at != std::string::npos)
        range = req.substr(at + std::strlen(name), req.find("\r\n", at + 2) - at - std::strlen(name));
    const std::string total = std::to_string(body_.size());
    if (head) {
      send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: " + total + "\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n");
      return;
    }
    ++gets_;
    Fault f = Fault::None;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranges_.push_back(range);
      if (!faults_.empty()) {
        f = faults_.front();
        faults_.pop_front();
      }
    }
    if (f == Fault::Status503 || f == Fault::Status429 || f == Fault::Status403) {
      const std::string status = f == Fault::Status503 ? "503 Service Unavailable"
                                 : f == Fault::Status429 ? "429 Too Many Requests" : "403 Forbidden";
      send_all(c, "HTTP/1.1 " + status + "\r\nRetry-After: " + std::to_string(retry_after_) +
                      "\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy");
      return;
    }
    uint64_t first = 0, last = body_.size() - 1;
    if (range.starts_with("bytes=")) {
      const size_t dash = range.find('-');
      first = std::stoull(range.substr(6, dash - 6));
      last = std::min<uint64_t>(std::stoull(range.substr(dash + 1)), body_.size() - 1);
    }
    std::string part = body_.substr(first, last - first + 1);
    if (f == Fault::IgnoreRange) {
      send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: " + total + "\r\nConnection: close\r\n\r\n" + body_);
      return;
    }
    uint64_t shown_first = first;
    if (f == Fault::WrongRange) shown_first = first + 1;
    const std::string header = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(shown_first) +
                               "-" + std::to_string(shown_first + part.size() - 1) + "/" + total +
                               "\r\nContent-Length: " + std::to_string(part.size()) + "\r\nETag: " +
                               (f == Fault::NewEtag ? "\"v2\"" : "\"v1\"") + "\r\nConnection: close\r\n\r\n";
    if (f == Fault::CutBody) {
      send_all(c, header + part.substr(0, part.size() / 2));
      return;
    }
    if (f == Fault::Stall) {
      // A third of the body, then nothing until the client gives up.
      send_all(c, header + part.substr(0, part.size() / 3));
      for (int i = 0; i < 600 && !stop_; ++i) {
        pollfd p{c, POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) break;
        if (p.revents & POLLIN) {
          char b;
          if (::recv(c, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) break;
        }
      }
      return;
    }
    send_all(c, header + part);
  }

  std::string body_;
  int retry_after_ = 0;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> gets_{0};
  mutable std::mutex mu_;
  std::deque<Fault> faults_;
  std::vector<std::string> ranges_, requests_;
  std::thread thread_;
};

}  // namespace strata::testnet
