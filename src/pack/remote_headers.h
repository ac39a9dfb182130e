#pragma once
// A remote model's headers in a local folder, for what needs its shapes and
// none of its weights (`strata budget hf://ORG/REPO`, runtime/budget_model.h).
//
// What is fetched (remote/source.h names the sources):
//   - a model folder: config.json and model.safetensors.index.json whole,
//     and every shard the index names (else model.safetensors) as a sparse
//     file of its size holding only its header: 8 bytes of length, then the
//     JSON;
//   - a GGUF file (SOURCE ending in /NAME.gguf): a sparse file of its size
//     holding its metadata and tensor infos, fetched in prefixes that double
//     (1 MiB first) until the file parses with its data section starting
//     inside what was fetched: a parse that read only fetched bytes read the
//     file's own, so what it found is the file's header. A file without the
//     GGUF magic or of another version is an error at once; one whose
//     header does not end within 256 MiB is one too.
// open_checkpoint() then opens `model` as it would the whole model; a weight
// read there would read zeros, so nothing may read one (shapes, dtypes,
// offsets and config only). The folder holds nothing else; the caller owns
// it (and removes it).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "remote/http_client.h"
#include "remote/source.h"

namespace strata {

// The most a small file of a model (config, index, tokenizer) may have.
inline constexpr uint64_t kRemoteSmallFileLimit = 64ull << 20;

struct RemoteHeaders {
  std::filesystem::path model;  // the folder, or the GGUF file in it
  std::string source;           // as the user gave it
  std::string commit;           // the hub commit it was pinned to ("" for other sources)
  int64_t files = 0;            // files described
  uint64_t weight_bytes = 0;    // the weight files' sizes at the source
  uint64_t fetched_bytes = 0;   // what this fetched
};

// Throws strata::Error naming the source for one that is not there, lacks
// config.json or its weights, or serves a file that is not what it says.
RemoteHeaders fetch_remote_headers(const std::string& source, const std::filesystem::path& dir,
                                   const EnvLookup& env = process_env, RetryPolicy retry = {});

// A sparse file of `size` bytes at `path` (one there is emptied first): a
// remote file's place, filled as its ranges are fetched. Throws
// strata::Error naming the path.
void create_sparse_file(const std::filesystem::path& path, uint64_t size);

// A model folder's weight files at `src`: "model.safetensors.index.json"
// then the shards its weight_map names (sorted), or just "model.safetensors"
// when there is no index. `shown` names the source in errors; a shard name
// that is not NAME.safetensors beside the index is one. `index`, when given,
// gets the index's text ("" without one).
std::vector<std::string> remote_weight_files(RemoteSource& src, const std::string& shown,
                                             std::string* index = nullptr);

}  // namespace strata
