#pragma once
// Running code that hostile input once crashed or exhausted, without letting
// a regression take the test binary down with it: `f` runs in a forked child
// under a memory cap (its address space may grow by `extra_bytes` at most)
// and a time limit, and the parent learns what happened. Without the fix
// such a test fails (a signal, an allocation failure, a timeout) rather
// than aborting the whole suite.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "util/error.h"

namespace strata::testing {

struct ChildOutcome {
  enum class Kind { Error, Returned, OtherException, Killed, TimedOut } kind = Kind::Killed;
  std::string message;  // Error / OtherException: what(); Killed: the signal
  double seconds = 0;
};

inline std::string describe(const ChildOutcome& o) {
  const char* kinds[] = {"strata::Error", "returned normally", "another exception", "killed", "timed out"};
  return std::string(kinds[static_cast<int>(o.kind)]) + (o.message.empty() ? "" : ": " + o.message) + " after " +
         std::to_string(o.seconds) + " s";
}

inline ChildOutcome run_bounded(const std::function<void()>& f, uint64_t extra_bytes = uint64_t{1} << 30,
                                int time_limit_s = 30) {
  int fds[2];
  if (::pipe(fds) != 0) ADD_FAILURE() << "pipe failed";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    uint64_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlimit cap{pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + extra_bytes, RLIM_INFINITY};
    ::setrlimit(RLIMIT_AS, &cap);
    ::alarm(static_cast<unsigned>(time_limit_s));
    char code = 'R';
    std::string message;
    try {
      f();
    } catch (const Error& e) {
      code = 'E';
      message = e.what();
    } catch (const std::exception& e) {
      code = 'X';
      message = e.what();
    }
    message.insert(message.begin(), code);
    ssize_t ignored = ::write(fds[1], message.data(), message.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ChildOutcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFSIGNALED(status)) {
    o.kind = WTERMSIG(status) == SIGALRM ? ChildOutcome::Kind::TimedOut : ChildOutcome::Kind::Killed;
    o.message = strsignal(WTERMSIG(status));
    return o;
  }
  if (got.empty()) return o;
  o.kind = got[0] == 'E' ? ChildOutcome::Kind::Error
           : got[0] == 'X' ? ChildOutcome::Kind::OtherException
                           : ChildOutcome::Kind::Returned;
  o.message = got.substr(1);
  return o;
}

// `f` must end in one strata::Error: one line, starting with `prefix`,
// containing `phrase`, within `max_seconds`.
inline void expect_bounded_error(const std::function<void()>& f, const std::string& prefix, const std::string& phrase,
                                 double max_seconds = 5) {
  const ChildOutcome o = run_bounded(f);
  ASSERT_EQ(o.kind, ChildOutcome::Kind::Error) << describe(o);
  EXPECT_EQ(o.message.rfind(prefix, 0), 0u) << o.message;
  EXPECT_EQ(o.message.find('\n'), std::string::npos) << o.message;
  EXPECT_NE(o.message.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << o.message;
  EXPECT_LT(o.seconds, max_seconds) << describe(o);
}

}  // namespace strata::testing
