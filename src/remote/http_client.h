#pragma once
// HTTP(S) requests for model sources, through libcurl: HEAD, and GET of a
// byte range, with retries. Nothing here knows what a hub or a bucket is
// (remote/source.h builds the URLs and the credentials).
//
// Contract:
// - A range read returns exactly the bytes asked for, or throws. The answer
//   must be a 206 whose Content-Range names those bytes (or a 200 holding
//   the whole file when the range is the whole file); a server that ignores
//   Range, sends more or fewer bytes, or names another range is an error,
//   never data.
// - Retried with exponential backoff (RetryPolicy), honouring Retry-After:
//   429 and 5xx answers, dropped or refused connections, timeouts, and a
//   body that stalls (below 1 KiB/s for `stall_seconds`) or ends early. A
//   connection refused before any server has answered this client (a wrong
//   address, nothing listening) gets only `refused_attempts` tries. A
//   body cut short is resumed from the first byte not received, so what
//   arrived is kept. Any other 4xx (401, 403, 404, 416, ...) is not retried:
//   one strata::Error naming the URL (without its query, which may hold a
//   signature) and the status.
// - Redirects are followed (HF resolves LFS files to a CDN); only http and
//   https, also after a redirect. A bearer token is sent to the first host
//   only (libcurl drops Authorization when a redirect changes host); a
//   SigV4-signed request is not followed at all (its x-amz-security-token
//   header would be).
// - An exception thrown by a sink (a full disk) ends the request and is
//   rethrown by read_range; it never unwinds through libcurl.
// - Nothing is decompressed: the bytes are the file's bytes.
// - One HttpClient reuses its connections; it is not thread-safe (one per
//   thread, or a lock around it).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace strata {

struct RetryPolicy {
  int attempts = 8;            // tries in all, the first included
  // Tries of a connection refused while no server has yet answered this
  // client: a wrong address or port, or nothing listening there, is said in a
  // second instead of after every backoff (~32 s). Once a server has answered,
  // a refusal is a restart and gets `attempts`.
  int refused_attempts = 3;
  double first_delay_s = 0.25;  // doubled after each failure
  double max_delay_s = 20;      // also caps Retry-After
  double connect_timeout_s = 30;
  double stall_seconds = 30;  // a body below 1 KiB/s this long is dropped and retried
};

// How requests prove who they are.
struct HttpAuth {
  std::string bearer;  // "Authorization: Bearer ..." (Hugging Face tokens)
  // AWS Signature Version 4 (libcurl's CURLOPT_AWS_SIGV4): set when
  // access_key is not empty.
  std::string access_key, secret_key, session_token, region, service = "s3";
};

// One range of HttpClient::fetch_ranges.
struct RangeRequest {
  std::string url;
  uint64_t offset = 0, length = 0;
  std::string expect_etag;  // as read_range's
  // The bytes in order as they arrive (a retry resumes after the last byte
  // handed over). May throw: the range then fails with that message.
  std::function<void(std::span<const uint8_t>)> sink;
  // Once, at the end: "" when every byte went to `sink`, otherwise the
  // error read_range would have thrown. Must not throw.
  std::function<void(const std::string& error)> done;
};

struct HttpHead {
  long status = 0;
  // Lower-cased names; when redirects were followed, every hop's headers,
  // the later hop's value winning (HF puts X-Linked-Etag and X-Repo-Commit
  // on the first answer, before the redirect to the CDN).
  std::map<std::string, std::string> headers;
  std::optional<uint64_t> content_length;  // of the last answer

  std::string header(const std::string& lower_name) const;
};

class HttpClient {
 public:
  explicit HttpClient(HttpAuth auth = {}, RetryPolicy retry = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // HEAD, retried like a read. 2xx, 3xx (when not following), 401, 403 and
  // 404 return their status for the caller to judge; other 4xx throw.
  HttpHead head(const std::string& url, bool follow_redirects = true);
  // `length` bytes from `offset`, handed to `sink` in order as they arrive
  // (a retry resumes after the last byte handed over). length 0 reads nothing.
  // With `expect_etag`, an answer naming another ETag is refused (the file
  // was replaced at the source between two requests).
  void read_range(const std::string& url, uint64_t offset, uint64_t length,
                  const std::function<void(std::span<const uint8_t>)>& sink, const std::string& expect_etag = "");
  std::vector<uint8_t> read_range(const std::string& url, uint64_t offset, uint64_t length);
  // Many ranges at once, over libcurl's multi interface: up to
  // `max_in_flight` transfers run together (and at most that many
  // connections to one host; HTTP/2 multiplexes them over fewer), each
  // checked and retried as read_range's; one range's failure goes to its
  // done() and stops no other; while a range waits to be retried no new
  // range starts. `next` is asked for another range whenever fewer than
  // max_in_flight run (nullopt: none now). Returns once nothing
  // runs or waits for a retry and `next` has none, unless `keep_going()`
  // says to wait for more: then it asks again after wake() or a tenth of a
  // second. After cancel(), every range in hand ends "cancelled" and it
  // returns. Only the thread calling it touches this client meanwhile.
  void fetch_ranges(int max_in_flight, const std::function<std::optional<RangeRequest>()>& next,
                    const std::function<bool()>& keep_going = {});
  // From any thread: a fetch_ranges waiting for work asks `next` now.
  void wake();

  // A whole small file (config.json, ...), at most `max_bytes`; nullopt on 404.
  std::optional<std::string> read_small_file(const std::string& url, uint64_t max_bytes);

  // How many requests were retried and why (the last reason), for stats.
  int64_t retries() const { return retries_; }
  const std::string& last_retry_reason() const { return last_retry_reason_; }

  // Whether a server has answered this client (see RetryPolicy::
  // refused_attempts); mark_answered() carries it to another connection to
  // the same source.
  bool answered() const { return answered_; }
  void mark_answered() { answered_ = true; }

  // Tests: no sleeping between tries.
  // fetch_ranges calls it with each backoff and does not wait itself.
  void set_sleep(std::function<void(double seconds)> sleep) {
    sleep_ = std::move(sleep);
    custom_sleep_ = true;
  }
  // From any thread: the request in flight ends within a fraction of a
  // second with strata::Error "cancelled", and so does every later one.
  void cancel() {
    cancelled_ = true;
    wake();
  }

 private:
  struct Easy;
  struct Multi;
  std::unique_ptr<Easy> easy_;
  std::unique_ptr<Multi> multi_;
  HttpAuth auth_;
  RetryPolicy retry_;
  int64_t retries_ = 0;
  std::string last_retry_reason_;
  bool answered_ = false;  // some try got an HTTP status (see RetryPolicy::refused_attempts)
  // How many tries a request gets whose last try failed (`refused`: its
  // connection was refused).
  int tries_allowed(bool refused) const {
    return refused && !answered_ ? std::min(retry_.refused_attempts, retry_.attempts) : retry_.attempts;
  }
  std::function<void(double)> sleep_;
  bool custom_sleep_ = false;
  std::atomic<bool> cancelled_{false};
};

// The URL as shown in messages: no query string (S3 and CDN URLs carry
// signatures there), no user:password.
std::string url_for_messages(const std::string& url);

}  // namespace strata
