#include "remote/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "util/error.h"

namespace strata {

namespace {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl could not be initialised");
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*").
struct ContentRange {
  uint64_t first = 0, last = 0;
};
std::optional<ContentRange> parse_content_range(const std::string& v) {
  if (!v.starts_with("bytes ")) return std::nullopt;
  const std::string_view rest = std::string_view(v).substr(6);
  const size_t dash = rest.find('-'), slash = rest.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return std::nullopt;
  const auto first = parse_u64(rest.substr(0, dash)), last = parse_u64(rest.substr(dash + 1, slash - dash - 1));
  if (!first || !last || *last < *first) return std::nullopt;
  return ContentRange{*first, *last};
}

// A failure worth another try, and why.
struct Transient {
  std::string why;
  double retry_after_s = -1;
  bool refused = false;  // the connection was refused (or could not be made)
};

// Notes that a server answered (the try got an HTTP status) however the try
// ends: judge_try throws for a final answer (404, 403, ...).
struct NoteAnswer {
  bool& answered;
  const long& status;
  NoteAnswer(bool& a, const long& s) : answered(a), status(s) {}
  NoteAnswer(const NoteAnswer&) = delete;
  NoteAnswer& operator=(const NoteAnswer&) = delete;
  ~NoteAnswer() { answered = answered || status > 0; }
};

bool retryable_curl_code(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long s) { return s == 408 || s == 429 || (s >= 500 && s <= 599); }

}  // namespace

std::string url_for_messages(const std::string& url) {
  std::string u = url.substr(0, url.find_first_of("?#"));
  const size_t scheme = u.find("://");
  if (scheme != std::string::npos) {
    const size_t host = scheme + 3, slash = u.find('/', host), at = u.find('@', host);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) u.erase(host, at + 1 - host);
  }
  return u;
}

std::string HttpHead::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

struct HttpClient::Easy {
  CURL* curl = nullptr;
  Easy() {
    init_curl_once();
    curl = curl_easy_init();
    if (!curl) throw Error("libcurl could not create a request handle");
  }
  ~Easy() { curl_easy_cleanup(curl); }
};

struct HttpClient::Multi {
  CURLM* multi = nullptr;
  Multi() {
    init_curl_once();
    multi = curl_multi_init();
    if (!multi) throw Error("libcurl could not create a transfer set");
  }
  ~Multi() { curl_multi_cleanup(multi); }
};

namespace {

// One request, one try: what came back.
struct Exchange {
  // In: the range still wanted (GET), or none (HEAD).
  bool head = false;
  bool follow = true;       // follow redirects
  std::string expect_etag;  // refuse an answer whose ETag differs (a file replaced mid-download)
  uint64_t offset = 0, length = 0;
  const std::function<void(std::span<const uint8_t>)>* sink = nullptr;
  // Out.
  std::map<std::string, std::string> headers, last_hop;
  uint64_t delivered = 0;
  std::string refused;  // set by the write callback: the answer is not the range asked for
  std::string error_body;
  bool checked = false;
  CURL* curl = nullptr;
  // An exception from the sink: kept here (it must not unwind through
  // libcurl's C frames) and rethrown once curl_easy_perform has returned.
  std::exception_ptr thrown;
  const std::atomic<bool>* cancelled = nullptr;
};

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* x = static_cast<const Exchange*>(user);
  return x->cancelled && *x->cancelled ? 1 : 0;  // non-zero aborts the transfer
}

// Anything but printable text becomes a space: messages stay one line.
std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    x->last_hop.clear();
    x->checked = false;
  } else if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    const std::string name = lower(std::string(line.substr(0, colon)));
    const std::string value = trim(line.substr(colon + 1));
    x->last_hop[name] = value;
    x->headers[name] = value;
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200 && status != 206) {
    if (x->error_body.size() < 512) x->error_body.append(data, std::min<size_t>(bytes, 512 - x->error_body.size()));
    return bytes;
  }
  if (!x->checked) {
    x->checked = true;
    if (status == 206) {
      const auto it = x->last_hop.find("content-range");
      const auto r = it == x->last_hop.end() ? std::nullopt : parse_content_range(it->second);
      if (!r || r->first != x->offset || r->last != x->offset + x->length - 1) {
        x->refused = "answered another range (" + (it == x->last_hop.end() ? std::string("no Content-Range") : printable(it->second)) +
                     ") than bytes " + std::to_string(x->offset) + "-" + std::to_string(x->offset + x->length - 1);
        return 0;
      }
    } else if (x->offset != 0) {
      x->refused = "ignored the range request (200 instead of 206)";
      return 0;
    }
    // Refused before any byte is handed over: an answer longer than the range.
    if (const auto it = x->last_hop.find("content-length"); it != x->last_hop.end()) {
      const auto n = parse_u64(it->second);
      if (n && *n > x->length) {
        x->refused = status == 200 ? "ignored the range request (200 with more bytes than asked for)"
                                   : "sent more bytes than the range holds";
        return 0;
      }
    }
    if (!x->expect_etag.empty()) {
      const auto it = x->last_hop.find("etag");
      if (it == x->last_hop.end() || it->second != x->expect_etag) {
        x->refused = "holds another version of the file now (ETag " +
                     (it == x->last_hop.end() ? std::string("none") : printable(it->second)) + ", not " +
                     x->expect_etag + "): it changed at the source";
        return 0;
      }
    }
  }
  const uint64_t room = x->length - x->delivered;
  if (bytes > room) {
    x->refused = status == 200 ? "ignored the range request (200 with more bytes than asked for)"
                               : "sent more bytes than the range holds";
    return 0;
  }
  try {
    (*x->sink)(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), bytes));
  } catch (...) {
    x->thrown = std::current_exception();
    return 0;
  }
  x->delivered += bytes;
  return bytes;
}

}  // namespace

HttpClient::HttpClient(HttpAuth auth, RetryPolicy retry)
    : easy_(std::make_unique<Easy>()), multi_(std::make_unique<Multi>()), auth_(std::move(auth)), retry_(retry) {
  // In slices, so that cancel() is heard during a backoff too.
  sleep_ = [this](double s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
    while (!cancelled_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
}

HttpClient::~HttpClient() = default;

namespace {

// Sets the handle up for one request; `headers` must outlive the request.
void prepare(CURL* c, const std::string& url, const HttpAuth& auth, const RetryPolicy& retry, curl_slist*& headers,
             Exchange& x) {
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  // A signed S3 request is not followed anywhere: libcurl would forward
  // x-amz-security-token (a custom header) to another host.
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, x.follow && auth.access_key.empty() ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(retry.connect_timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(std::lround(retry.stall_seconds))));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "strata");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  if (!auth.bearer.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + auth.bearer).c_str());
  if (!auth.access_key.empty()) {
    const std::string sigv4 = "aws:amz:" + auth.region + ":" + auth.service;
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERNAME, auth.access_key.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, auth.secret_key.c_str());
    // S3 refuses a SigV4 request without the payload's hash; libcurl signs
    // the value given here (these requests have no body: the empty hash).
    if (auth.service == "s3")
      headers = curl_slist_append(
          headers, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    if (!auth.session_token.empty())
      headers = curl_slist_append(headers, ("x-amz-security-token: " + auth.session_token).c_str());
  }
  if (x.head) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else {
    const std::string range = std::to_string(x.offset) + "-" + std::to_string(x.offset + x.length - 1);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());  // copied by libcurl
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
}

double retry_after_seconds(const std::map<std::string, std::string>& h) {
  const auto it = h.find("retry-after");
  if (it == h.end()) return -1;
  const auto v = parse_u64(it->second);  // an HTTP date is left to the backoff
  return v ? static_cast<double>(*v) : -1;
}

}  // namespace

namespace {
// What one try of `x` at `url` came to, once libcurl is done with it:
// nullopt when done (HEAD answered, or every byte delivered); a Transient to
// try again; throws when final.
std::optional<Transient> judge_try(CURL* c, const std::string& url, CURLcode code, const char* err, Exchange& x,
                                   long& status) {
  if (x.thrown) std::rethrow_exception(x.thrown);
  if (x.cancelled && *x.cancelled) throw Error(url_for_messages(url) + ": cancelled");
  status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  const std::string shown = url_for_messages(url);
  if (!x.refused.empty()) throw Error(shown + ": the server " + x.refused);
  if (code != CURLE_OK) {
    const std::string why =
        std::string(curl_easy_strerror(code)) + (err[0] ? " (" + printable(trim(err)) + ")" : std::string());
    if (retryable_curl_code(code)) return Transient{why, -1, code == CURLE_COULDNT_CONNECT};
    throw Error(shown + ": " + why);
  }
  if (retryable_status(status)) return Transient{"HTTP " + std::to_string(status), retry_after_seconds(x.last_hop)};
  if (x.head) return std::nullopt;
  if (status == 404) throw Error(shown + ": not found (HTTP 404)");
  if (status == 401 || status == 403)
    throw Error(shown + ": HTTP " + std::to_string(status) + " (access denied: check the source's credentials)");
  if (status != 200 && status != 206) {
    std::string body = printable(trim(x.error_body));
    if (body.size() > 200) body = body.substr(0, 200) + "...";
    throw Error(shown + ": HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + body));
  }
  if (x.delivered < x.length)
    return Transient{"the answer ended after " + std::to_string(x.delivered) + " of " + std::to_string(x.length) + " bytes"};
  return std::nullopt;
}

// Nothing libcurl keeps may point at a request's header list or error
// buffer once the request is done.
void release_request(CURL* c, curl_slist*& headers) {
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  headers = nullptr;
}

// One try, performed on this thread.
std::optional<Transient> run_once(CURL* c, const std::string& url, const HttpAuth& auth, const RetryPolicy& retry,
                                  Exchange& x, long& status) {
  curl_slist* headers = nullptr;
  x.curl = c;
  char err[CURL_ERROR_SIZE] = {0};
  CURLcode code;
  {
    struct Release {
      CURL* c;
      curl_slist*& h;
      ~Release() { release_request(c, h); }
    } release{c, headers};
    prepare(c, url, auth, retry, headers, x);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    code = curl_easy_perform(c);
  }
  return judge_try(c, url, code, err, x, status);
}
}  // namespace

HttpHead HttpClient::head(const std::string& url, bool follow_redirects) {
  double delay = retry_.first_delay_s;
  for (int attempt = 1;; ++attempt) {
    if (cancelled_) throw Error(url_for_messages(url) + ": cancelled");
    Exchange x;
    x.head = true;
    x.follow = follow_redirects;
    x.cancelled = &cancelled_;
    long status = 0;
    const NoteAnswer note{answered_, status};
    const std::optional<Transient> t = run_once(easy_->curl, url, auth_, retry_, x, status);
    if (!t) {
      if (status >= 400 && status != 401 && status != 403 && status != 404)
        throw Error(url_for_messages(url) + ": HTTP " + std::to_string(status));
      HttpHead h;
      h.status = status;
      h.headers = std::move(x.headers);
      if (const auto it = x.last_hop.find("content-length"); it != x.last_hop.end()) h.content_length = parse_u64(it->second);
      return h;
    }
    if (attempt >= tries_allowed(t->refused))
      throw Error(url_for_messages(url) + ": " + t->why + ", after " + std::to_string(attempt) + " tries");
    ++retries_;
    last_retry_reason_ = t->why;
    sleep_(t->retry_after_s >= 0 ? std::min(t->retry_after_s, retry_.max_delay_s) : delay);
    delay = std::min(delay * 2, retry_.max_delay_s);
  }
}

void HttpClient::read_range(const std::string& url, uint64_t offset, uint64_t length,
                            const std::function<void(std::span<const uint8_t>)>& sink, const std::string& expect_etag) {
  if (length == 0) return;
  if (offset + length < offset) throw Error(url_for_messages(url) + ": a range past 2^64 bytes");
  uint64_t done = 0;
  double delay = retry_.first_delay_s;
  int failures = 0, tries = 0;  // failures since the last MiB of progress; tries in all
  // Progress earns a fresh count of failures only when it is real (a MiB),
  // so a server that trickles a byte per connection is still given up on.
  constexpr uint64_t kProgress = 1 << 20;
  while (done < length) {
    if (cancelled_) throw Error(url_for_messages(url) + ": cancelled");
    Exchange x;
    x.cancelled = &cancelled_;
    x.offset = offset + done;
    x.length = length - done;
    x.sink = &sink;
    x.expect_etag = expect_etag;
    long status = 0;
    const NoteAnswer note{answered_, status};
    const std::optional<Transient> t = run_once(easy_->curl, url, auth_, retry_, x, status);
    done += x.delivered;
    ++tries;
    if (!t || done >= length) continue;
    if (x.delivered >= kProgress) {
      failures = 0;
      delay = retry_.first_delay_s;
    }
    if (++failures >= tries_allowed(t->refused))
      throw Error(url_for_messages(url) + ": " + t->why + ", after " + std::to_string(tries) + " tries");
    ++retries_;
    last_retry_reason_ = t->why;
    sleep_(t->retry_after_s >= 0 ? std::min(t->retry_after_s, retry_.max_delay_s) : delay);
    delay = std::min(delay * 2, retry_.max_delay_s);
  }
}

std::vector<uint8_t> HttpClient::read_range(const std::string& url, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> out;
  out.reserve(length);
  read_range(url, offset, length, [&](std::span<const uint8_t> b) { out.insert(out.end(), b.begin(), b.end()); });
  return out;
}

void HttpClient::wake() { curl_multi_wakeup(multi_->multi); }

void HttpClient::fetch_ranges(int max_in_flight, const std::function<std::optional<RangeRequest>()>& next,
                              const std::function<bool()>& keep_going) {
  using Clock = std::chrono::steady_clock;
  struct Job {
    RangeRequest r;
    uint64_t done = 0;
    int failures = 0, tries = 0;  // as in read_range
    double delay = 0;
    Clock::time_point not_before{};
  };
  struct Slot {
    CURL* curl = nullptr;
    Exchange x;
    curl_slist* headers = nullptr;
    char err[CURL_ERROR_SIZE] = {0};
    std::unique_ptr<Job> job;  // null: free
    ~Slot() {
      if (curl) curl_easy_cleanup(curl);
    }
  };
  constexpr uint64_t kProgress = 1 << 20;
  CURLM* m = multi_->multi;
  max_in_flight = std::max(1, max_in_flight);
  curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(max_in_flight));
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < max_in_flight; ++i) slots.push_back(std::make_unique<Slot>());
  std::vector<std::unique_ptr<Job>> waiting;  // backing off before another try
  int active = 0;

  auto finish = [](Job& j, const std::string& error) {
    if (j.r.done) j.r.done(error);
  };
  // Starts `j` in `s`; a range libcurl cannot take fails alone.
  auto start = [&](Slot& s, std::unique_ptr<Job> j) {
    try {
      if (!s.curl) {
        init_curl_once();
        s.curl = curl_easy_init();
        if (!s.curl) throw Error("libcurl could not create a request handle");
      }
      s.x = Exchange{};
      s.x.cancelled = &cancelled_;
      s.x.offset = j->r.offset + j->done;
      s.x.length = j->r.length - j->done;
      s.x.sink = &j->r.sink;
      s.x.expect_etag = j->r.expect_etag;
      s.x.curl = s.curl;
      s.err[0] = 0;
      prepare(s.curl, j->r.url, auth_, retry_, s.headers, s.x);
      curl_easy_setopt(s.curl, CURLOPT_ERRORBUFFER, s.err);
      curl_easy_setopt(s.curl, CURLOPT_PRIVATE, &s);
      if (curl_multi_add_handle(m, s.curl) != CURLM_OK) throw Error("libcurl could not start the request");
    } catch (const std::exception& e) {
      if (s.curl) release_request(s.curl, s.headers);
      finish(*j, url_for_messages(j->r.url) + ": " + e.what());
      return;
    }
    s.job = std::move(j);
    ++active;
  };
  auto stop = [&](Slot& s) {
    curl_multi_remove_handle(m, s.curl);
    release_request(s.curl, s.headers);
    --active;
    return std::move(s.job);
  };
  auto settle = [&](Slot& s, CURLcode code) {
    std::unique_ptr<Job> j = stop(s);
    long status = 0;
    const NoteAnswer note{answered_, status};
    std::optional<Transient> t;
    try {
      t = judge_try(s.curl, j->r.url, code, s.err, s.x, status);
    } catch (const std::exception& e) {
      finish(*j, e.what());
      return;
    } catch (...) {
      finish(*j, url_for_messages(j->r.url) + ": failed");
      return;
    }
    j->done += s.x.delivered;
    ++j->tries;
    if (!t || j->done >= j->r.length) return finish(*j, "");
    if (s.x.delivered >= kProgress) {
      j->failures = 0;
      j->delay = retry_.first_delay_s;
    }
    if (++j->failures >= tries_allowed(t->refused))
      return finish(*j, url_for_messages(j->r.url) + ": " + t->why + ", after " + std::to_string(j->tries) + " tries");
    ++retries_;
    last_retry_reason_ = t->why;
    double d = t->retry_after_s >= 0 ? std::min(t->retry_after_s, retry_.max_delay_s) : j->delay;
    j->delay = std::min(j->delay * 2, retry_.max_delay_s);
    if (custom_sleep_) {
      sleep_(d);
      d = 0;
    }
    j->not_before = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(d));
    waiting.push_back(std::move(j));
  };
  // Ends everything in hand with `error`.
  auto abandon = [&](const std::string& error) {
    for (auto& s : slots)
      if (s->job) finish(*stop(*s), error);
    for (auto& j : waiting) finish(*j, error);
    waiting.clear();
  };
  // The next range to start: a retry that is due, else a new one, but no
  // new one while a retry waits (the server asked us to slow down, or is
  // failing: new requests would not help it).
  auto take = [&]() -> std::unique_ptr<Job> {
    const auto now = Clock::now();
    for (auto it = waiting.begin(); it != waiting.end(); ++it)
      if ((*it)->not_before <= now) {
        std::unique_ptr<Job> j = std::move(*it);
        waiting.erase(it);
        return j;
      }
    if (!waiting.empty()) return nullptr;
    std::optional<RangeRequest> r = next();
    if (!r) return nullptr;
    auto j = std::make_unique<Job>();
    j->r = std::move(*r);
    j->delay = retry_.first_delay_s;
    return j;
  };

  // Starts what it can; whether anything started.
  auto fill = [&] {
    bool any = false;
    for (auto& s : slots) {
      if (s->job) continue;
      for (;;) {
        std::unique_ptr<Job> j = take();
        if (!j) return any;
        if (j->r.length == 0) {
          finish(*j, "");
        } else if (j->r.offset + j->r.length < j->r.offset) {
          finish(*j, url_for_messages(j->r.url) + ": a range past 2^64 bytes");
        } else {
          start(*s, std::move(j));
          if (!s->job) continue;  // it failed at once
          any = true;
          break;
        }
      }
    }
    return any;
  };

  try {
    for (;;) {
      if (cancelled_) return abandon("cancelled");
      fill();
      int running = 0;
      curl_multi_perform(m, &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Slot* s = nullptr;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &s);
        settle(*s, msg->data.result);
      }
      if (active == 0 && waiting.empty() && !fill() && (!keep_going || !keep_going())) return;
      // Woken by any transfer's progress; by a retry falling due only when
      // a slot is free for it.
      int timeout_ms = 100;
      if (!waiting.empty() && active < max_in_flight) {
        auto soonest = waiting.front()->not_before;
        for (const auto& j : waiting) soonest = std::min(soonest, j->not_before);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, timeout_ms));
      }
      if (active > 0 || !waiting.empty() || (keep_going && keep_going()))
        curl_multi_poll(m, nullptr, 0, timeout_ms, nullptr);
    }
  } catch (...) {
    abandon("stopped");
    throw;
  }
}

std::optional<std::string> HttpClient::read_small_file(const std::string& url, uint64_t max_bytes) {
  const HttpHead h = head(url);
  if (h.status == 404) return std::nullopt;
  if (h.status == 401 || h.status == 403)
    throw Error(url_for_messages(url) + ": HTTP " + std::to_string(h.status) +
                " (access denied: check the source's credentials)");
  if (h.status < 200 || h.status > 299)
    throw Error(url_for_messages(url) + ": HTTP " + std::to_string(h.status) + " to a HEAD request");
  if (!h.content_length) throw Error(url_for_messages(url) + ": the server does not say how long the file is");
  if (*h.content_length > max_bytes)
    throw Error(url_for_messages(url) + ": " + std::to_string(*h.content_length) + " bytes, more than the " +
                std::to_string(max_bytes) + " such a file may have");
  const std::vector<uint8_t> bytes = read_range(url, 0, *h.content_length);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace strata
