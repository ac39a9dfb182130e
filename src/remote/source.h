#pragma once
// Where a model is fetched from, and its files over HTTP(S).
//
// SOURCE forms (parse_source):
//   hf://ORG/REPO[@REVISION]   a Hugging Face-style hub: files at
//                              {endpoint}/{ORG/REPO}/resolve/{revision}/{file};
//                              endpoint $HF_ENDPOINT (default
//                              https://huggingface.co), token as
//                              huggingface_hub reads it ($HF_TOKEN, else the
//                              file $HF_TOKEN_PATH, $HF_HOME/token or
//                              ~/.cache/huggingface/token); revision default
//                              "main", pinned to the commit the hub names
//                              (X-Repo-Commit) when the source is opened, so
//                              a push during a long download cannot mix two
//                              commits.
//   http://... or https://...  any server that honours range requests:
//                              files at {url}/{file}.
//   any of these ending in /NAME.gguf
//                              that one GGUF file of the folder (for a hub:
//                              hf://ORG/REPO[@REVISION]/NAME.gguf).
//   s3://BUCKET[/PREFIX]       an S3-compatible object store, signed with
//                              AWS Signature Version 4: credentials from
//                              $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY /
//                              $AWS_SESSION_TOKEN, else the profile
//                              ($AWS_PROFILE, default "default") in
//                              ~/.aws/credentials ($AWS_SHARED_CREDENTIALS_FILE);
//                              region $AWS_REGION, $AWS_DEFAULT_REGION, the
//                              profile's in ~/.aws/config ($AWS_CONFIG_FILE),
//                              else us-east-1; endpoint $AWS_ENDPOINT_URL_S3 or
//                              $AWS_ENDPOINT_URL (MinIO-style stores, path-style
//                              URLs {endpoint}/{bucket}/{key}), else
//                              https://{bucket}.s3.{region}.amazonaws.com/{key}.
// Environment lookups go through an injectable function so that tests see
// exactly the variables they set.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "remote/http_client.h"

namespace strata {

struct SourceLocation {
  enum class Kind { Hub, Http, S3 } kind = Kind::Http;
  std::string text;      // as the user wrote it
  std::string base;      // files are base + "/" + name (hub: before the revision is pinned)
  std::string repo;      // hub: ORG/REPO
  std::string revision;  // hub: as asked ("main" by default)
  std::string file;      // a single-file source (NAME.gguf): its name in the folder; "" = a model folder
  HttpAuth auth;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment.
std::optional<std::string> process_env(const std::string& name);

// True for the forms above; a local path is not a source.
bool is_remote_source(const std::string& text);
// Throws strata::Error naming the source for anything malformed (an empty
// repo, an empty revision, a bucket that is not a bucket name, S3 without
// credentials, user:password in a URL (it would be recorded in the pack),
// ...). A revision may hold slashes (refs/pr/1): they are encoded.
SourceLocation parse_source(const std::string& text, const EnvLookup& env = process_env);

// A file name as a URL path (RFC 3986 unreserved characters and '/' kept).
std::string encode_file_path(const std::string& file);

// What a source says of one file.
struct RemoteFileInfo {
  bool exists = false;
  uint64_t size = 0;
  std::string sha256;  // hex, when the source publishes it (hub LFS files: X-Linked-Etag)
  std::string etag;    // to notice a file replaced between two runs
};

class RemoteSource {
 public:
  explicit RemoteSource(SourceLocation where, RetryPolicy retry = {});

  // Another connection to the same source at the same pinned commit (no
  // request is made), for fetching in parallel. Once this one has been
  // answered, a refused connection on the other is a restart (all tries).
  RemoteSource another_connection() const;

  const SourceLocation& location() const { return where_; }
  // The hub commit the revision was pinned to ("" for other kinds, or a hub
  // that does not name commits).
  const std::string& commit() const { return commit_; }
  std::string url(const std::string& file) const;

  // `optional`: a file the model may lack; on S3 a 403 then means absent
  // (S3 answers 403 for a missing key to a caller that may not list).
  RemoteFileInfo stat(const std::string& file, bool optional = false);
  std::vector<uint8_t> read(const std::string& file, uint64_t offset, uint64_t length);
  // A small file whole (config.json, tokenizer.json, an index); nullopt when
  // the source does not have it.
  std::optional<std::string> read_small(const std::string& file, uint64_t max_bytes = 64ull << 20);
  // Downloads `file` to `dest`, resumably: bytes go to dest + ".part" (with
  // what was known of the file beside it in dest + ".part.json"); a later
  // call continues after the bytes already there when the file is unchanged
  // (same size, ETag and sha256) and can be checked (a published sha256, or
  // an ETag every answer must repeat), and starts over otherwise. When the source
  // publishes a sha256 the whole file must match it before it is renamed to
  // `dest`; otherwise the part is removed and the error names both hashes.
  // `progress` gets each chunk's byte count (the resumed bytes first).
  // Returns the bytes this call fetched.
  uint64_t download(const std::string& file, const std::filesystem::path& dest,
                    const std::function<void(uint64_t)>& progress = {});
  // The same with what stat() said of the file (so a record of the download
  // describes the bytes fetched).
  uint64_t download(const std::string& file, const RemoteFileInfo& info, const std::filesystem::path& dest,
                    const std::function<void(uint64_t)>& progress = {});

  HttpClient& http() { return *http_; }

 private:
  RemoteSource(SourceLocation where, RetryPolicy retry, std::string commit);
  SourceLocation where_;
  RetryPolicy retry_;
  std::unique_ptr<HttpClient> http_;
  std::string commit_;
};

}  // namespace strata
