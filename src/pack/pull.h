#pragma once
// `strata pull SOURCE --out DIR --full`: a model from a hub, an HTTP(S)
// server or an S3-compatible store (remote/source.h) installed as a pack.
//
// What is fetched: config.json (required), the tokenizer and chat-template
// files a model may have (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, generation_config.json, chat_template.jinja,
// tiktoken.model), and the weights: the shards model.safetensors.index.json
// names, else model.safetensors (or the one NAME.gguf of a GGUF source).
// Where the source publishes a sha256 (hub LFS files) every file is checked
// against it before any of it is packed; every expert blob then carries
// strata's own checksum as in any pack.
//
// How: small files (and a GGUF file) are downloaded whole into
// DIR/.strata-pull/files, several at once (RemoteSource::download). A
// safetensors checkpoint's shards arrive while pack_model() packs them
// (pack/shard_feed.h: each layer's bytes are freed once it is packed, the
// trunk is packed last), so the source never sits whole beside its pack.
// The pack records SOURCE and the hub commit as its source, so the same
// source and options give the same pack byte for byte wherever it is
// written (another server of the same files gives other expert file names
// when it publishes no sha256).
//
// Resuming: killed at any moment, a re-run continues: finished files are
// kept while the source says the same of them, partial ones resume, shards
// after their synced bytes, the pack after its last finished layer; a
// source changed since (or whose record is gone) starts the pack over. A
// finished install records what it was made from in DIR/pull.json; a re-run
// that finds the source's files unchanged (one HEAD per file) does nothing,
// and one that finds them changed, or a pack in DIR not pulled from SOURCE
// (finished or in the making), is refused before anything is fetched. One
// pull at a time per DIR (DIR/.strata-pull.lock).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "pack/dir_lock.h"
#include "pack/packer.h"
#include "remote/http_client.h"
#include "remote/source.h"

namespace strata {

struct PullOptions {
  std::string source;
  std::filesystem::path out;
  std::vector<std::filesystem::path> drives;  // as for pack; empty: DIR
  std::filesystem::path probe;
  bool progress = false;
  std::function<void(const std::string&)> notice;
  int connections = 4;  // files fetched at once, one connection each
  RetryPolicy retry;
  EnvLookup env = process_env;
};

struct PullReport {
  std::string source;  // as recorded in the manifest (with the hub commit)
  std::string commit;
  int64_t files = 0;
  uint64_t bytes = 0;          // the files' bytes in all
  uint64_t fetched_bytes = 0;  // fetched by this run
  bool already_pulled = false;
  PackReport pack;
  double seconds = 0;
};

PullReport pull_full(const PullOptions& options);

// `strata pull SOURCE --out DIR --streaming`: the model folder as a
// streaming install (remote/remote_mirror.h): config, tokenizer and
// template files whole, every shard a sparse file holding its header and
// the trunk's tensors; the routed experts are fetched from the source as
// decoding first needs them, into their place in the shards. Resumable (the
// record of what is present is appended as it lands); a DIR holding a pack,
// or a streaming install of another source or of this source as it was
// before it changed, is refused.
PullReport pull_streaming(const PullOptions& options);

// The staging folder pull_full uses inside DIR.
inline constexpr const char* kPullStaging = ".strata-pull";
inline constexpr const char* kPullRecord = "pull.json";

}  // namespace strata
