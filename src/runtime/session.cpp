#include "runtime/session.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "storage/checksum.h"
#include "util/error.h"

namespace strata {

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'S'};
// v2: the prompt-end snapshot after the cache.
constexpr uint32_t kVersion = 2;

// What must match for a cache to be reused: what the weights are (not where:
// model/weights_identity.h) and the cache geometry (context, ring sizes).
uint64_t fingerprint(const Model& m) {
  nlohmann::json j = {{"weights", m.identity()}, {"context", m.context()}, {"batch", m.max_batch_rows()}};
  const std::string s = j.dump();
  return xxh3_64(s.data(), s.size());
}

}  // namespace

size_t Session::reusable(const std::vector<int32_t>& prompt) const {
  if (!cache || prompt.empty()) return 0;
  size_t n = 0;
  while (n < tokens.size() && n + 1 < prompt.size() && tokens[n] == prompt[n]) ++n;
  if (cache->can_rewind_to(static_cast<int64_t>(n))) return n;
  // A recurrent state cannot step back, but the prompt may repeat the
  // previous one, whose end was kept.
  if (prompt_end && prompt_end->length() <= static_cast<int64_t>(n) && cache->can_restore(*prompt_end))
    return static_cast<size_t>(prompt_end->length());
  return 0;
}

std::unique_ptr<KvCache> Session::take_cache(size_t n) {
  std::unique_ptr<KvCache> c = std::move(cache);
  const auto at = static_cast<int64_t>(n);
  if (!c) {
    if (n > 0) throw Error("internal: a session without a cache was asked for " + std::to_string(n) + " tokens");
  } else if (c->can_rewind_to(at)) {
    c->set_length(at);
  } else if (prompt_end && prompt_end->length() == at) {
    c->restore(*prompt_end);
  } else {
    throw Error("internal: a session's cache cannot come back to position " + std::to_string(n));
  }
  prompt_end.reset();
  tokens.clear();
  return c;
}

uint64_t Session::bytes() const { return (cache ? cache->bytes() : 0) + (prompt_end ? prompt_end->bytes() : 0); }

Session load_session(const std::filesystem::path& path, const Model& model, std::string* why) {
  Session s;
  std::ifstream in(path, std::ios::binary);
  if (!in) return s;
  char magic[8];
  uint32_t version = 0;
  uint64_t fp = 0, n = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&fp), 8);
  in.read(reinterpret_cast<char*>(&n), 8);
  if (!in || std::memcmp(magic, kMagic, 8) != 0) throw Error(path.string() + ": not a strata session file");
  if (version != kVersion || fp != fingerprint(model)) {
    if (why) *why = path.string() + " was made for other weights, another context or file version; starting afresh";
    return s;
  }
  if (n > static_cast<uint64_t>(model.context())) throw Error(path.string() + ": damaged session file");
  s.tokens.resize(n);
  in.read(reinterpret_cast<char*>(s.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
  s.cache = model.new_cache();
  try {
    s.cache->load(in);
  } catch (const Error& e) {
    throw Error(path.string() + ": damaged session file: " + e.what());
  }
  if (s.cache->length() != static_cast<int64_t>(n)) throw Error(path.string() + ": damaged session file");
  char snapshots = 0;
  in.read(&snapshots, 1);
  if (!in || (snapshots != 0 && snapshots != 1)) throw Error(path.string() + ": damaged session file");
  if (snapshots) {
    try {
      s.prompt_end = s.cache->load_snapshot(in);
    } catch (const Error& e) {
      throw Error(path.string() + ": damaged session file: " + e.what());
    }
  }
  return s;
}

void save_session(const std::filesystem::path& path, const Model& model, const Session& s) {
  if (!s.cache) return;
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t fp = fingerprint(model), n = s.tokens.size();
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&kVersion), 4);
    out.write(reinterpret_cast<const char*>(&fp), 8);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(reinterpret_cast<const char*>(s.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
    s.cache->save(out);
    const char snapshots = s.prompt_end ? 1 : 0;
    out.write(&snapshots, 1);
    if (s.prompt_end) s.prompt_end->save(out);
    out.flush();
    if (!out) throw Error(tmp + ": cannot write the session");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace strata
