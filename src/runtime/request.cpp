#include "runtime/request.h"

#include <chrono>

namespace strata {

bool Job::wait(std::vector<TokenEvent>& out, int timeout_ms) {
  std::unique_lock lock(m_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return !events_.empty() || finish_ != Finish::Running; });
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return !(finish_ != Finish::Running && out.empty());
}

bool Job::done() const {
  std::lock_guard lock(m_);
  return finish_ != Finish::Running;
}

Finish Job::finish() const {
  std::lock_guard lock(m_);
  return finish_;
}

std::string Job::error() const {
  std::exception_ptr e = exception();
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

std::exception_ptr Job::exception() const {
  std::lock_guard lock(m_);
  return error_;
}

Session Job::take_session() {
  std::lock_guard lock(m_);
  return std::move(session_);
}

void Job::push(TokenEvent e) {
  {
    std::lock_guard lock(m_);
    events_.push_back(std::move(e));
  }
  ++completion_tokens_;
  cv_.notify_all();
}

void Job::end(Finish f, std::exception_ptr error, Session session) {
  {
    std::lock_guard lock(m_);
    if (finish_ != Finish::Running) return;
    finish_ = f;
    error_ = std::move(error);
    session_ = std::move(session);
  }
  cv_.notify_all();
}

}  // namespace strata
