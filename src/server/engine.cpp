#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/model.h"
#include "util/error.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
}

// --- Job --------------------------------------------------------------------

bool Job::wait(std::vector<TokenEvent>& out, int timeout_ms) {
  std::unique_lock lock(m_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty() || done_; });
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return !(done_ && out.empty());
}

bool Job::done() const {
  std::lock_guard lock(m_);
  return done_;
}

std::string Job::finish_reason() const {
  std::lock_guard lock(m_);
  return reason_;
}

std::string Job::error() const {
  std::lock_guard lock(m_);
  return error_;
}

void Job::push(TokenEvent e) {
  {
    std::lock_guard lock(m_);
    events_.push_back(std::move(e));
  }
  ++completion_tokens_;
  cv_.notify_all();
}

void Job::finish(std::string reason, std::string error) {
  {
    std::lock_guard lock(m_);
    if (done_) return;
    done_ = true;
    reason_ = std::move(reason);
    error_ = std::move(error);
  }
  cv_.notify_all();
}

// --- Engine -----------------------------------------------------------------

struct Engine::Sequence {
  GenRequest req;
  std::shared_ptr<Job> job;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Sampler> sampler;
  int64_t pos = 0;          // next position to compute
  int32_t pending = -1;     // sampled, not yet fed back
  int generated = 0;
  bool prefilled = false;
  bool finished = false;
  Clock::time_point submitted;
};

Engine::Engine(Model& model, int max_running, int max_queue)
    : model_(model), max_running_(std::max(1, max_running)), max_queue_(std::max(0, max_queue)) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& s : running_) s->job->finish("cancelled");
  for (auto& s : queue_) s->job->finish("cancelled");
}

std::shared_ptr<Job> Engine::submit(GenRequest request) {
  auto s = std::make_unique<Sequence>();
  s->job = std::make_shared<Job>();
  s->job->prompt_tokens_ = static_cast<int>(request.prompt.size());
  s->req = std::move(request);
  s->submitted = Clock::now();
  auto job = s->job;
  {
    std::lock_guard lock(m_);
    if (static_cast<int>(queue_.size()) >= max_queue_ && static_cast<int>(running_.size()) >= max_running_)
      throw QueueFull();
    queue_.push_back(std::move(s));
    ++stats_.requests;
  }
  cv_.notify_all();
  return job;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(m_);
  EngineStats s = stats_;
  s.queued = queue_.size();
  s.running = running_.size();
  return s;
}

void Engine::admit() {
  std::lock_guard lock(m_);
  while (static_cast<int>(running_.size()) < max_running_ && !queue_.empty()) {
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

void Engine::emit(Sequence& s, const float* logits) {
  const int64_t V = model_.config().vocab_size;
  const std::span<const float> row(logits, static_cast<size_t>(V));
  const int32_t token = s.sampler->next(row);
  TokenEvent e;
  e.token = token;
  if (s.req.top_logprobs >= 0) {
    const float m = row[argmax(row)];
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v - m));
    const float lse = m + static_cast<float>(std::log(sum));
    e.logprob = row[token] - lse;
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int32_t i = 0; i < V; ++i) ids[i] = i;
    const size_t k = std::min<size_t>(static_cast<size_t>(s.req.top_logprobs), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (size_t i = 0; i < k; ++i) e.top.emplace_back(ids[i], row[ids[i]] - lse);
  }
  if (s.generated == 0) {
    std::lock_guard lock(m_);
    stats_.ttft_sum_s += std::chrono::duration<double>(Clock::now() - s.submitted).count();
    ++stats_.ttft_count;
  }
  s.job->push(std::move(e));
  ++s.generated;
  {
    std::lock_guard lock(m_);
    ++stats_.generated_tokens;
  }
  s.pending = token;
  const bool eos = std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), token) != s.req.stop_ids.end();
  if (eos) {
    s.finished = true;
    s.job->finish("stop");
  } else if (s.generated >= s.req.max_tokens || s.pos >= model_.context()) {
    s.finished = true;
    s.job->finish("length");
  }
}

void Engine::prefill(Sequence& s) {
  const auto& p = s.req.prompt;
  if (p.empty() || static_cast<int64_t>(p.size()) > model_.context())
    throw Error("the prompt has " + std::to_string(p.size()) + " tokens; the context is " +
                std::to_string(model_.context()));
  validate(s.req.sampling);
  s.cache = model_.new_cache();
  s.sampler = std::make_unique<Sampler>(s.req.sampling);
  s.sampler->set_prompt(p);
  std::vector<float> logits(static_cast<size_t>(model_.config().vocab_size));
  if (!model_.prefill(p, 0, *s.cache, logits.data(), [&] { return s.job->cancelled(); })) return;
  s.pos = static_cast<int64_t>(p.size());
  s.prefilled = true;
  {
    std::lock_guard lock(m_);
    stats_.prompt_tokens += p.size();
  }
  emit(s, logits.data());
}

void Engine::decode_step() {
  std::vector<Sequence*> seqs;
  std::vector<Row> rows;
  for (auto& s : running_)
    if (s->prefilled && !s->finished && !s->job->cancelled()) {
      seqs.push_back(s.get());
      rows.push_back(Row{s->pending, s->pos, s->cache.get(), true});
    }
  if (rows.empty()) return;
  const auto t0 = Clock::now();
  std::vector<float> logits(rows.size() * static_cast<size_t>(model_.config().vocab_size));
  model_.forward(rows, logits.data());
  for (size_t i = 0; i < seqs.size(); ++i) {
    ++seqs[i]->pos;
    emit(*seqs[i], &logits[i * static_cast<size_t>(model_.config().vocab_size)]);
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  std::lock_guard lock(m_);
  ++stats_.steps;
  if (dt > 0) stats_.decode_tok_s = 0.8 * stats_.decode_tok_s + 0.2 * (static_cast<double>(rows.size()) / dt);
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) return;
    }
    admit();
    try {
      for (auto& s : running_)
        if (!s->prefilled && !s->job->cancelled()) {
          try {
            prefill(*s);
          } catch (const Error& e) {
            s->finished = true;
            s->job->finish("error", e.what());
          }
        }
      decode_step();
    } catch (const std::exception& e) {
      // A failure in a shared step (a read error, say) ends every sequence in it.
      for (auto& s : running_) {
        s->finished = true;
        s->job->finish("error", e.what());
      }
    }
    const ExpertStats xs = model_.expert_stats();  // read on this thread: the provider is not shared
    std::lock_guard lock(m_);
    stats_.expert_bytes_read = xs.bytes_read;
    stats_.expert_requests = xs.requests;
    stats_.expert_hits = xs.hits;
    std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) {
      if (s->job->cancelled() && !s->finished) s->job->finish("cancelled");
      return s->finished || s->job->cancelled();
    });
  }
}

}  // namespace strata
