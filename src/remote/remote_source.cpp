// RemoteSource: a source's files over HTTP(S) (remote/source.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cctype>
#include <nlohmann/json.hpp>

#include "remote/sha256.h"
#include "remote/source.h"
#include "storage/atomic_file.h"
#include "storage/write_at.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

bool is_hex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string unquoted_etag(std::string v) {
  if (v.starts_with("W/")) v = v.substr(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_file_name(const SourceLocation& where, const std::string& file) {
  if (file.empty() || file.front() == '/' || file.find("..") != std::string::npos || file.find('\\') != std::string::npos)
    throw Error(where.text + ": '" + file + "' is not a file name within the source");
}

}  // namespace

RemoteSource::RemoteSource(SourceLocation where, RetryPolicy retry, std::string commit)
    : where_(std::move(where)), retry_(retry), http_(std::make_unique<HttpClient>(where_.auth, retry)),
      commit_(std::move(commit)) {}

RemoteSource RemoteSource::another_connection() const {
  RemoteSource other(where_, retry_, commit_);
  // The source has answered: a refusal on the new connection is a restart.
  if (http_->answered()) other.http_->mark_answered();
  return other;
}

RemoteSource::RemoteSource(SourceLocation where, RetryPolicy retry)
    : where_(std::move(where)), retry_(retry), http_(std::make_unique<HttpClient>(where_.auth, retry)) {
  if (where_.kind != SourceLocation::Kind::Hub) return;
  // Pin the revision: every file of one run comes from the same commit.
  if (is_hex(where_.revision, 40)) {
    commit_ = lower(where_.revision);
    return;
  }
  const std::string probe = where_.file.empty() ? "config.json" : where_.file;
  const HttpHead h = http_->head(url(probe));
  if (h.status == 404) throw Error(where_.text + ": no " + probe + " at revision " + where_.revision);
  const std::string commit = lower(h.header("x-repo-commit"));
  if (is_hex(commit, 40)) {
    commit_ = commit;
    const size_t resolve = where_.base.rfind("/resolve/");
    where_.base = where_.base.substr(0, resolve) + "/resolve/" + commit_;
  }
}

std::string RemoteSource::url(const std::string& file) const {
  check_file_name(where_, file);
  return where_.base + "/" + encode_file_path(file);
}

namespace {
uint64_t size_field(const std::string& v, const std::string& shown) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    throw Error(shown + ": the server gives no usable length (" + v + ")");
  return std::stoull(v);
}
}  // namespace

RemoteFileInfo RemoteSource::stat(const std::string& file, bool optional) {
  const std::string u = url(file), shown = url_for_messages(u);
  // The first answer alone: a hub names an LFS file's size and sha256 there,
  // before it redirects to a CDN (huggingface_hub reads it the same way).
  HttpHead h = http_->head(u, /*follow_redirects=*/false);
  RemoteFileInfo info;
  if (h.status >= 300 && h.status <= 399 && !h.header("x-linked-size").empty()) {
    info.exists = true;
    info.size = size_field(h.header("x-linked-size"), shown);
    const std::string linked = lower(unquoted_etag(h.header("x-linked-etag")));
    if (is_hex(linked, 64)) info.sha256 = linked;
    return info;
  }
  if (h.status >= 300 && h.status <= 399) {
    if (!where_.auth.access_key.empty()) {
      const std::string region = h.header("x-amz-bucket-region");
      throw Error(shown + ": HTTP " + std::to_string(h.status) +
                  (region.empty() ? " (a signed request is not redirected)"
                                  : " (the bucket is in " + region + ": set AWS_REGION=" + region + ")"));
    }
    h = http_->head(u, /*follow_redirects=*/true);
  }
  if (h.status == 404) return info;
  if (h.status == 401 || h.status == 403) {
    // S3 answers 403 for a key that is not there when the caller may not
    // list the bucket: an optional file is taken as absent.
    if (optional && where_.kind == SourceLocation::Kind::S3) return info;
    throw Error(shown + ": HTTP " + std::to_string(h.status) + " (access denied: check the source's credentials)");
  }
  if (h.status < 200 || h.status > 299) throw Error(shown + ": HTTP " + std::to_string(h.status) + " to a HEAD request");
  info.exists = true;
  if (!h.header("x-linked-size").empty())
    info.size = size_field(h.header("x-linked-size"), shown);
  else if (h.content_length)
    info.size = *h.content_length;
  else
    throw Error(shown + ": the server does not say how long the file is");
  const std::string linked = lower(unquoted_etag(h.header("x-linked-etag")));
  if (is_hex(linked, 64)) info.sha256 = linked;
  info.etag = h.header("etag");
  return info;
}

std::vector<uint8_t> RemoteSource::read(const std::string& file, uint64_t offset, uint64_t length) {
  return http_->read_range(url(file), offset, length);
}

std::optional<std::string> RemoteSource::read_small(const std::string& file, uint64_t max_bytes) {
  return http_->read_small_file(url(file), max_bytes);
}

uint64_t RemoteSource::download(const std::string& file, const fs::path& dest,
                                const std::function<void(uint64_t)>& progress) {
  return download(file, stat(file), dest, progress);
}

uint64_t RemoteSource::download(const std::string& file, const RemoteFileInfo& info, const fs::path& dest,
                                const std::function<void(uint64_t)>& progress) {
  if (!info.exists) throw Error(url_for_messages(url(file)) + ": not found (HTTP 404)");
  const fs::path part = fs::path(dest.string() + ".part"), meta = fs::path(dest.string() + ".part.json");
  const nlohmann::json want = {{"url", url_for_messages(url(file))},
                               {"size", info.size},
                               {"etag", info.etag},
                               {"sha256", info.sha256}};
  std::error_code ec;
  uint64_t have = 0;
  bool resumable = false;
  // Resumed only when what is there can be told from another version of the
  // file: by its sha256 at the end, or by an ETag every answer must repeat.
  const bool checkable = !info.sha256.empty() || !info.etag.empty();
  if (checkable && fs::exists(part, ec) && fs::exists(meta, ec)) {
    try {
      resumable = read_json_file(meta) == want;
    } catch (const Error&) {
      resumable = false;  // a damaged record: start over
    }
    if (resumable) have = fs::file_size(part, ec);
    if (ec || have > info.size) resumable = false;
  }
  if (!resumable) {
    have = 0;
    fs::remove(part, ec);
    if (!dest.parent_path().empty()) fs::create_directories(dest.parent_path(), ec);
    write_file_atomically(meta, want.dump());
  }
  if (progress && have > 0) progress(have);
  {
    const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(part.string() + ": cannot open: " + std::strerror(errno));
    try {
      http_->read_range(
          url(file), have, info.size - have,
          [&, at = have](std::span<const uint8_t> b) mutable {
            write_all_at(fd, b, at, part);
            at += b.size();
            if (progress) progress(b.size());
          },
          info.sha256.empty() ? info.etag : std::string());
      if (::fsync(fd) != 0) throw Error(part.string() + ": cannot sync: " + std::strerror(errno));
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  if (fs::file_size(part, ec) != info.size)
    throw Error(part.string() + ": holds " + std::to_string(fs::file_size(part, ec)) + " bytes, not the " +
                std::to_string(info.size) + " of " + url_for_messages(url(file)));
  if (!info.sha256.empty()) {
    const std::string got = sha256_of_file(part);
    if (got != info.sha256) {
      fs::remove(part, ec);
      fs::remove(meta, ec);
      throw Error(url_for_messages(url(file)) + ": the download's sha256 is " + got + ", the source publishes " +
                  info.sha256 + "; it was removed (run again to fetch it anew)");
    }
  }
  fs::rename(part, dest, ec);
  if (ec) throw Error(dest.string() + ": cannot rename the finished download into place: " + ec.message());
  fs::remove(meta, ec);
  return info.size - have;
}

}  // namespace strata
