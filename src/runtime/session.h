#pragma once
// Prefix reuse: a sequence's tokens and KV cache, kept between generate()
// calls (and, for the CLI, in a session file), so that a prompt extending the
// previous one only computes its new tokens. The reused positions give the
// same bits as recomputing them (the cache holds exactly what a prefill of
// those tokens writes).
//
// Where the cache can rewind (rows per position), any common prefix is
// reused. A recurrent state (Kimi K3's KDA layers) holds only its latest
// position, so such a session also keeps a snapshot of the cache at the end
// of its prompt, taken before generation started: a chat's next prompt
// repeats the previous prompt and then differs (the answer re-templated, a
// new turn), and reuses it from there. It costs one copy of the states
// (Model::cache_snapshot_bytes(), in the budget's KV share when a session is
// kept: LoadOptions::keep_session).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/kv_cache.h"

namespace strata {

class Model;

struct Session {
  std::vector<int32_t> tokens;     // tokens whose KV is in `cache`, in order
  std::unique_ptr<KvCache> cache;  // null: nothing to reuse
  // `cache` as it was at the end of the prompt (a length below tokens.size()),
  // where cache->keeps_state(); null otherwise.
  std::unique_ptr<CacheSnapshot> prompt_end;

  // How many leading tokens of `prompt` can be taken from the cache (never
  // the whole prompt: its last token must run to give logits); 0 when none.
  size_t reusable(const std::vector<int32_t>& prompt) const;
  // The cache holding exactly the first `n` tokens (n from reusable()),
  // rewound or restored to prompt_end; null when the session holds none. The
  // session is left empty.
  std::unique_ptr<KvCache> take_cache(size_t n);
  // Bytes it holds: the cache and the snapshot.
  uint64_t bytes() const;
};

// Session files: "STRATASS" v2, a fingerprint of the model (the identity of
// its weights, model/weights_identity.h, and the cache geometry), the tokens,
// the KV cache, then the prompt-end snapshot if any. load_session returns an
// empty session when the file does not exist or belongs to other weights,
// another context or file version (a note says why in `why` when given); a
// damaged file is a strata::Error.
Session load_session(const std::filesystem::path& path, const Model& model, std::string* why = nullptr);
void save_session(const std::filesystem::path& path, const Model& model, const Session& s);

}  // namespace strata
