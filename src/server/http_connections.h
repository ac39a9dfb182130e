#pragma once
// How `strata serve`'s HTTP server (cpp-httplib) spends threads on
// connections, so that slow or departed clients cannot starve the others:
//
// - At most max_connections connections are served at once, each on a
//   thread of its own (made when first needed, then kept). One past that is
//   answered at once, on the accepting thread, with a 503 in OpenAI's error
//   shape (Retry-After: 1, Connection: close) and closed: never queued behind
//   the others, so a flood of slow clients costs its excess one write each.
// - A request's line, headers and body must arrive within request_timeout of
//   its first byte, and no read may wait longer than idle_timeout; a slower
//   client gets a 408 (where a response can still be written) and the
//   connection is closed. Sending a header line every few seconds holds a
//   thread for request_timeout at most.
// - A keep-alive connection waits idle_timeout for its next request, and
//   serves keep_alive_max requests at most.
// - A handler asks client_gone() to stop working for a client that left.
//
// httplib 0.11 reads with per-read timeouts only and queues connections
// without bound behind a fixed pool: this class replaces its connection loop
// and stream (Server::process_and_close_socket, a virtual meant for this) and
// its task queue, and keeps its request parsing, routing and responses.
#include <httplib.h>

#include <chrono>

namespace strata {

struct ConnectionLimits {
  int max_connections = 256;
  std::chrono::milliseconds request_timeout{30'000};
  std::chrono::milliseconds idle_timeout{5'000};
  std::chrono::milliseconds write_timeout{5'000};  // a client that stops reading a response
  int keep_alive_max = 100;
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);

  const ConnectionLimits& limits() const { return limits_; }

  // bind_to_port / bind_to_any_port (port 0), then a listen backlog of
  // SOMAXCONN: httplib's 5 drops the connections of a burst, whose clients
  // retry a second or more later. Returns the port, or -1.
  int bind(const std::string& host, int port);

  // On a handler's thread (false elsewhere), about the connection it serves:
  // - whether the client has closed it or reset it (what it sent is all
  //   there will be), without reading anything the client sent;
  static bool client_gone();
  // - whether reading this request ran past request_timeout (the error
  //   handler turns httplib's 400 into a 408);
  static bool request_timed_out();
  // - starts the request_timeout over: the handler waited for the server
  //   (for room to hold a body), not for the client;
  static void restart_request_timer();
  // - closes the connection after this response (a body left unread).
  static void close_after_response(httplib::Response& res);

 private:
  bool process_and_close_socket(socket_t sock) override;

  const ConnectionLimits limits_;
};

}  // namespace strata
