#pragma once
// `strata pull SOURCE --out DIR --full`: a model from a hub, an HTTP(S)
// server or an S3-compatible store (remote/source.h) installed as a pack.
//
// What is fetched: config.json (required), the tokenizer and chat-template
// files a model may have (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, generation_config.json, chat_template.jinja,
// tiktoken.model), and the weights: the shards model.safetensors.index.json
// names, else model.safetensors. Each file is downloaded resumably and,
// where the source publishes a sha256 (hub LFS files), verified whole
// (RemoteSource::download); every expert blob then carries strata's own
// checksum as in any pack.
//
// How: the files go to DIR/.strata-pull/, several at once (kept across runs until the pack
// is complete), then pack_model() packs them into DIR exactly as
// `strata pack` would, with the source recorded as SOURCE and the hub
// commit (so the same source and options give the same pack byte for byte,
// wherever it is written). The staging folder is removed at the end; it
// needs as much free space as the weights until then (the straight-to-pack
// path, range reads per layer, is not built yet).
//
// Resuming: killed at any moment, a re-run continues: finished files are
// kept (a finished file's size and ETag, or the pinned commit, must still be
// what the source says), a partial one resumes after its bytes, the pack
// resumes after its last finished layer. A finished install records what it
// was made from in DIR/pull.json; a re-run that finds the source's files
// unchanged (one HEAD per file) does nothing, and one that finds them
// changed, or a pack not pulled from SOURCE in DIR, is refused before
// anything is fetched. One pull at a time per DIR (a lock in the staging
// folder).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

// The staging folder pull_full uses inside DIR.
inline constexpr const char* kPullStaging = ".strata-pull";
inline constexpr const char* kPullRecord = "pull.json";

}  // namespace strata
