#include "server/http_connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// poll() on one socket; > 0 ready, 0 timed out, < 0 failed (EINTR retried).
int poll_one(int sock, short events, milliseconds wait, short* revents = nullptr) {
  pollfd p{sock, events, 0};
  const auto until = Clock::now() + wait;
  while (true) {
    const auto left = std::chrono::ceil<milliseconds>(until - Clock::now());
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    if (revents) *revents = p.revents;
    return r;
  }
}

// Whether the peer has closed (or reset) the connection, without taking
// anything it sent: a pipelined request still waiting there is not a close.
bool peer_closed(int sock) {
  short revents = 0;
  if (poll_one(sock, POLLIN | POLLRDHUP, milliseconds(0), &revents) <= 0) return false;
  if (revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(sock, sa, &len) : ::getsockname(sock, sa, &len)) != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return;
  ip = host;
  port = std::atoi(serv);
}

// One connection's reads and writes, with the limits of the header.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, const ConnectionLimits& limits) : sock_(sock), limits_(limits) {}

  // Waits for the first byte of the next request: idle_timeout at most, and
  // no longer than the server runs.
  bool wait_for_request(const std::atomic<socket_t>& server_socket) {
    if (off_ < len_) return true;  // pipelined
    const auto until = Clock::now() + limits_.idle_timeout;
    while (server_socket != INVALID_SOCKET && Clock::now() < until) {
      const auto slice = std::min(milliseconds(100), std::chrono::ceil<milliseconds>(until - Clock::now()));
      const int r = poll_one(sock_, POLLIN, slice);
      if (r < 0) return false;
      if (r > 0) return true;  // a close reads as the end of the request line
    }
    return false;
  }
  void start_request() {
    deadline_ = Clock::now() + limits_.request_timeout;
    timed_out_ = false;
  }
  void restart_request_timer() { deadline_ = Clock::now() + limits_.request_timeout; }
  bool timed_out() const { return timed_out_; }
  bool must_close() const { return must_close_; }
  void close_after_response() { must_close_ = true; }
  bool client_gone() const { return peer_closed(sock_); }

  bool is_readable() const override { return off_ < len_ || poll_one(sock_, POLLIN, milliseconds(0)) > 0; }
  bool is_writable() const override {
    return poll_one(sock_, POLLOUT, milliseconds(0)) > 0 && !peer_closed(sock_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < len_) return take(ptr, size);
    if (!wait_readable()) return -1;
    // Small reads (httplib reads a request line byte by byte) go through the buffer.
    char* into = size >= sizeof buf_ ? ptr : buf_;
    ssize_t n;
    do n = ::recv(sock_, into, into == ptr ? size : sizeof buf_, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
      must_close_ = true;
      return n;
    }
    if (into == ptr) return n;
    off_ = 0;
    len_ = static_cast<size_t>(n);
    return take(ptr, size);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (poll_one(sock_, POLLOUT, limits_.write_timeout) <= 0) {
      must_close_ = true;
      return -1;
    }
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) must_close_ = true;
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t take(char* ptr, size_t size) {
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }
  // Until data arrives, the request's deadline passes, or idle_timeout goes by without a byte.
  bool wait_readable() {
    const auto now = Clock::now();
    const auto until = std::min(deadline_, now + limits_.idle_timeout);
    const int r = poll_one(sock_, POLLIN, std::chrono::ceil<milliseconds>(until - now));
    if (r > 0) return true;
    if (r == 0) timed_out_ = true;
    must_close_ = true;
    return false;
  }

  const int sock_;
  const ConnectionLimits& limits_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false, must_close_ = false;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// The connection the calling thread serves, if any.
thread_local ConnectionStream* t_connection = nullptr;
// Set while the accepting thread hands a connection past the bound to be refused.
thread_local bool t_refusing = false;

// A 503 written at once and the socket closed; what the client already sent
// is read away first, so that it gets a FIN it can read the answer before,
// not a reset.
void refuse(int sock) {
  static const std::string body =
      R"({"error":{"message":"the server is serving its maximum number of connections; retry shortly",)"
      R"("type":"server_error","param":null,"code":"too_many_connections"}})";
  const std::string response = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                               "Content-Length: " + std::to_string(body.size()) +
                               "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  (void)::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  char drain[4096];
  while (::recv(sock, drain, sizeof drain, MSG_DONTWAIT) > 0) {
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// httplib's task queue: one thread per connection up to the bound (made as
// needed, then kept), the excess refused on the accepting thread.
class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(int max_connections) : max_(static_cast<size_t>(std::max(1, max_connections))) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> serve) override {
    {
      std::lock_guard lock(m_);
      if (busy_ < max_ && !stopping_) {
        try {
          // busy_ counts connections waiting or served; each needs a thread.
          if (threads_.size() <= busy_) threads_.emplace_back([this] { work(); });
          jobs_.push_back(std::move(serve));
          ++busy_;
          cv_.notify_one();
          return;
        } catch (const std::system_error&) {
          // No thread to be had: refused like any excess.
        }
      }
    }
    t_refusing = true;
    serve();  // httplib's closure: process_and_close_socket, which refuses
    t_refusing = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> serve;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        serve = std::move(jobs_.front());
        jobs_.pop_front();
      }
      serve();
      std::lock_guard lock(m_);
      --busy_;
    }
  }

  const size_t max_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t busy_ = 0;
  bool stopping_ = false;
};

}  // namespace

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits) : limits_(limits) {
  new_task_queue = [this] { return new ConnectionPool(limits_.max_connections); };
}

int GuardedHttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound >= 0) ::listen(svr_sock_, SOMAXCONN);  // again, on the listening socket: only the backlog changes
  return bound;
}

bool GuardedHttpServer::client_gone() { return t_connection && t_connection->client_gone(); }
bool GuardedHttpServer::request_timed_out() { return t_connection && t_connection->timed_out(); }
void GuardedHttpServer::restart_request_timer() {
  if (t_connection) t_connection->restart_request_timer();
}
void GuardedHttpServer::close_after_response(httplib::Response& res) {
  res.set_header("Connection", "close");
  if (t_connection) t_connection->close_after_response();
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  if (t_refusing) {
    refuse(sock);
    return false;
  }
  ConnectionStream stream(sock, limits_);
  t_connection = &stream;
  bool ok = false;
  for (int served = 0; served < std::max(1, limits_.keep_alive_max); ++served) {
    if (!stream.wait_for_request(svr_sock_)) break;
    stream.start_request();
    bool client_closes = false;
    ok = process_request(stream, served + 1 == limits_.keep_alive_max, client_closes, nullptr);
    if (!ok || client_closes || stream.must_close()) break;
  }
  t_connection = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace strata
