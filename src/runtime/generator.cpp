#include "runtime/generator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "model/model.h"
#include "runtime/expert_stats.h"
#include "util/error.h"

namespace strata {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  Session none;
  return generate(model, prompt, options, none);
}

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        Session& session) {
  if (prompt.empty()) throw Error("the prompt is empty");
  const int64_t vocab = model.config().vocab_size;
  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_new_tokens <= 0) return result;

  // Reuse the session's cache for the prompt's leading tokens it already holds.
  const size_t reused = session.reusable(prompt);
  std::unique_ptr<KvCache> cache = reused > 0 ? std::move(session.cache) : model.new_cache();
  cache->set_length(static_cast<int64_t>(reused));
  result.reused_tokens = static_cast<int64_t>(reused);
  session.cache.reset();
  session.tokens.clear();
  validate(options.sampling);
  Sampler sampler(options.sampling);
  sampler.set_prompt(prompt);
  std::vector<float> logits(vocab);

  model.begin_expert_epoch();
  const ExpertStats at_start = model.expert_stats();
  auto t0 = std::chrono::steady_clock::now();
  if (static_cast<int64_t>(prompt.size()) > model.context())
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context is " +
                std::to_string(model.context()) + " (raise --ctx)");
  model.prefill(prompt, reused, *cache, logits.data());
  result.prefill_s = seconds_since(t0);
  const ExpertStats after_prefill = model.expert_stats();
  result.prefill_experts = stats_delta(after_prefill, at_start);
  model.begin_expert_epoch();

  auto t1 = std::chrono::steady_clock::now();
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int step = 0;; ++step) {
    int32_t token = sampler.next(logits);
    result.tokens.push_back(token);
    if (options.keep_logits) result.logits.push_back(logits);
    if (step == 0) t1 = std::chrono::steady_clock::now();
    const bool stop = std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) !=
                      options.stop_tokens.end();
    if (stop || static_cast<int>(result.tokens.size()) >= options.max_new_tokens) break;
    if (pos >= model.context()) {  // the context is full: stop as at max_new_tokens
      result.context_full = true;
      break;
    }
    Row row{token, pos++, cache.get(), true};
    model.forward(std::span<const Row>(&row, 1), logits.data());
  }
  result.decode_s = seconds_since(t1);
  // The tokens whose KV is now cached: the prompt and every generated token
  // but the last (it was sampled, never fed back).
  session.tokens = prompt;
  session.tokens.insert(session.tokens.end(), result.tokens.begin(), result.tokens.end() - 1);
  session.cache = std::move(cache);
  result.decode_experts = stats_delta(model.expert_stats(), after_prefill);
  return result;
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace strata
