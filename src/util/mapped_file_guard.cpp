#include "util/mapped_file_guard.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace strata::detail {

namespace {

// One live mapping. `begin` is 0 while the entry is free; it is set last and
// cleared first, so the handler never pairs a range with another file's path.
struct Entry {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<char*> path{nullptr};  // owned; replaced (and freed) when the entry is reused
};

// A model maps one file per shard (a few hundred at most); beyond this many
// at once a mapping is simply not named by the handler.
constexpr size_t kEntries = 4096;
Entry g_entries[kEntries];
std::mutex g_mutex;  // serialises guard/unguard (never taken by the handler)
struct sigaction g_previous;

// Appends `s` to buf at *n (up to cap), async-signal-safe.
void put(char* buf, size_t cap, size_t* n, const char* s) {
  while (*s && *n < cap) buf[(*n)++] = *s++;
}
void put(char* buf, size_t cap, size_t* n, uint64_t v) {
  char digits[24];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) != 0);
  while (k > 0 && *n < cap) buf[(*n)++] = digits[--k];
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Entry& e : g_entries) {
    const uintptr_t begin = e.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at >= e.end.load(std::memory_order_relaxed)) continue;
    const char* path = e.path.load(std::memory_order_relaxed);
    const uint64_t offset = at - begin, was = e.end.load(std::memory_order_relaxed) - begin;
    char msg[1024];
    size_t n = 0;
    put(msg, sizeof msg, &n, "strata: error: ");
    put(msg, sizeof msg, &n, path);
    put(msg, sizeof msg, &n, ": byte ");
    put(msg, sizeof msg, &n, offset);
    struct stat st {};
    if (::stat(path, &st) == 0 && static_cast<uint64_t>(st.st_size) <= offset) {
      put(msg, sizeof msg, &n, " cannot be read: the file shrank to ");
      put(msg, sizeof msg, &n, static_cast<uint64_t>(st.st_size));
      put(msg, sizeof msg, &n, " bytes after it was opened (it had ");
      put(msg, sizeof msg, &n, was);
      put(msg, sizeof msg, &n, "); a model's files must not change while strata runs\n");
    } else {
      put(msg, sizeof msg, &n, " cannot be read: the file changed after it was opened, or its drive failed to read it\n");
    }
    if (n == sizeof msg) msg[n - 1] = '\n';
    ssize_t unused = ::write(STDERR_FILENO, msg, n);
    (void)unused;
    ::_exit(1);
  }
  // Not a mapped file's page: whatever handled SIGBUS before us does.
  const bool plain = g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN;
  if (!plain && (g_previous.sa_flags & SA_SIGINFO)) return g_previous.sa_sigaction(sig, info, context);
  if (!plain) return g_previous.sa_handler(sig);
  // Returning re-runs the faulting access, which now gets the default action
  // (ignoring it would fault forever).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGBUS, &dfl, nullptr);
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

void guard_mapping(const void* data, size_t size, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  std::lock_guard lock(g_mutex);
  for (Entry& e : g_entries) {
    if (e.begin.load(std::memory_order_relaxed) != 0) continue;
    char* copy = ::strdup(path.c_str());
    if (!copy) return;
    ::free(e.path.exchange(copy));
    const auto b = reinterpret_cast<uintptr_t>(data);
    e.end.store(b + size, std::memory_order_relaxed);
    e.begin.store(b, std::memory_order_release);
    return;
  }
}

void unguard_mapping(const void* data) {
  std::lock_guard lock(g_mutex);
  const auto b = reinterpret_cast<uintptr_t>(data);
  for (Entry& e : g_entries)
    if (e.begin.load(std::memory_order_relaxed) == b) {
      e.begin.store(0, std::memory_order_release);
      return;
    }
}

}  // namespace strata::detail
