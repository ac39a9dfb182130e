#pragma once
// A bound on the request-body bytes `strata serve` holds at once. A handler
// reserves a body's bytes (its Content-Length, or the largest body allowed
// when it comes chunked) before reading it, and keeps them until the body has
// become a prompt of token ids, bounding what bodies, their parsed JSON and
// their text cost together however many clients send at once. A reservation
// that does not fit waits for others to end.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace strata {

class BodyBudget {
 public:
  explicit BodyBudget(std::size_t bytes) : capacity_(bytes) {}
  std::size_t capacity() const { return capacity_; }

  // Waits up to `timeout` for `bytes` (at most capacity()) to fit; false if
  // they did not.
  bool acquire(std::size_t bytes, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_);
    if (!cv_.wait_for(lock, timeout, [&] { return bytes <= capacity_ - held_; })) return false;
    held_ += bytes;
    return true;
  }
  void release(std::size_t bytes) {
    {
      std::lock_guard lock(m_);
      held_ -= bytes;
    }
    cv_.notify_all();
  }

 private:
  const std::size_t capacity_;
  std::mutex m_;
  std::condition_variable cv_;
  std::size_t held_ = 0;
};

// One body's bytes, acquired, handed back when it goes (or at release()).
class BodyReservation {
 public:
  BodyReservation() = default;
  void hold(BodyBudget& budget, std::size_t bytes) {
    release();
    budget_ = &budget;
    bytes_ = bytes;
  }
  BodyReservation(const BodyReservation&) = delete;
  BodyReservation& operator=(const BodyReservation&) = delete;
  ~BodyReservation() { release(); }
  void release() {
    if (budget_) budget_->release(bytes_);
    budget_ = nullptr;
  }

 private:
  BodyBudget* budget_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace strata
