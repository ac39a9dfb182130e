#pragma once
// nginx (Debian's), started by a test on 127.0.0.1 and a free port, serving
// a folder as static files; stopped when the object goes. It runs in the
// foreground as one process (no master, no user switch), with every path it
// writes inside its own temporary folder. `extra_locations` is pasted into
// the server block (a location that adds hub headers, say).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "loopback_listener.h"
#include "safetensors_writer.h"

namespace strata::testnet {

// A port nothing listens on now (bound, read, released).
inline int free_port() {
  int port = 0;
  ::close(listen_on_loopback(port, 1));
  return port;
}

inline bool accepts(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

class LocalNginx {
 public:
  LocalNginx(const std::filesystem::path& root, const std::string& extra_locations = "")
      : work_("strata-nginx"), port_(free_port()) {
    const std::filesystem::path w = work_.path();
    std::ofstream(w / "nginx.conf") << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                                    << "pid " << (w / "nginx.pid").string() << ";\n"
                                    << "error_log " << (w / "error.log").string() << " warn;\n"
                                    << "events { worker_connections 256; }\n"
                                    << "http {\n  access_log off;\n  default_type application/octet-stream;\n"
                                    << "  client_body_temp_path " << (w / "body").string() << ";\n"
                                    << "  proxy_temp_path " << (w / "proxy").string() << ";\n"
                                    << "  fastcgi_temp_path " << (w / "fastcgi").string() << ";\n"
                                    << "  uwsgi_temp_path " << (w / "uwsgi").string() << ";\n"
                                    << "  scgi_temp_path " << (w / "scgi").string() << ";\n"
                                    << "  server {\n    listen 127.0.0.1:" << port_ << ";\n"
                                    << "    root " << std::filesystem::absolute(root).string() << ";\n"
                                    << extra_locations << "  }\n}\n";
    const std::string conf = (w / "nginx.conf").string(), prefix = w.string() + "/", log = (w / "error.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Ends with the test process, however that ends.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      ::execlp("nginx", "nginx", "-e", log.c_str(), "-p", prefix.c_str(), "-c", conf.c_str(), static_cast<char*>(nullptr));
      // Debian installs it in /usr/sbin, which a non-root PATH may lack.
      ::execl("/usr/sbin/nginx", "nginx", "-e", log.c_str(), "-p", prefix.c_str(), "-c", conf.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 400 && pid_ > 0 && !accepts(port_); ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it exited (the port was taken, say)
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~LocalNginx() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  LocalNginx(const LocalNginx&) = delete;
  LocalNginx& operator=(const LocalNginx&) = delete;

  bool running() const { return pid_ > 0 && accepts(port_); }
  // Why it is not running, for a failed assertion.
  std::string log() const {
    std::ifstream f(work_.path() / "error.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  testfiles::TempDir work_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace strata::testnet
