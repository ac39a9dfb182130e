#pragma once
// Prefix reuse: a sequence's tokens and KV cache, kept between generate()
// calls (and, for the CLI, in a session file), so that a prompt extending the
// previous one only computes its new tokens. The reused positions give the
// same bits as recomputing them (the cache holds exactly what a prefill of
// those tokens writes).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "backend/kv_cache.h"

namespace strata {

class Model;

struct Session {
  std::vector<int32_t> tokens;     // tokens whose KV is in `cache`, in order
  std::unique_ptr<KvCache> cache;  // null: nothing to reuse

  // How many leading tokens of `prompt` can be taken from the cache (never
  // the whole prompt: its last token must run to give logits); 0 when none.
  size_t reusable(const std::vector<int32_t>& prompt) const;
};

// Session files: "STRATASS" v1, a fingerprint of the model (the identity of
// its weights, model/weights_identity.h, and the cache geometry), the tokens,
// then the KV cache. load_session returns an empty session when the file does
// not exist or belongs to other weights, another context or file version (a
// note says why in `why` when given); a damaged file is a strata::Error.
Session load_session(const std::filesystem::path& path, const Model& model, std::string* why = nullptr);
void save_session(const std::filesystem::path& path, const Model& model, const Session& s);

}  // namespace strata
