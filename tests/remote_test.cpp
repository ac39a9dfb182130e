// Model sources over HTTP (src/remote): range reads against nginx, a hub
// layout with pinned commits and published sha256 (checked against
// coreutils' sha256sum), resumable downloads, and every fault of
// fault_http_server.h ending in a retry that gives the right bytes or in one
// clear error. SOURCE parsing with the environment each form reads.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "fault_http_server.h"
#include "local_nginx.h"
#include "sha256sum.h"
#include "remote/http_client.h"
#include "remote/sha256.h"
#include "remote/source.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

using testfiles::sha256sum;

namespace fs = std::filesystem;
using testnet::Fault;
using testnet::FaultHttpServer;
using testnet::LocalNginx;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(g());
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}


EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// No waiting between tries; a stall is 5 s (so that a loaded machine is not
// taken for a stalled server), 1 s where a test stalls on purpose.
RetryPolicy quick(double stall_seconds = 5) {
  RetryPolicy r;
  r.attempts = 4;
  r.first_delay_s = 0;
  r.stall_seconds = stall_seconds;
  return r;
}

TEST(RemoteHttp, RangesAndWholeFilesFromNginx) {
  testfiles::TempDir root("strata-remote-root");
  const std::string body = random_bytes(300000, 1);
  root.write("blob.bin", body);
  LocalNginx nginx(root.path());
  ASSERT_TRUE(nginx.running()) << nginx.log();
  HttpClient http({}, quick());
  const std::string url = nginx.url() + "/blob.bin";
  const HttpHead h = http.head(url);
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.content_length, body.size());
  for (const auto& [offset, length] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}, {12345, 4096}, {299999, 1}, {0, 300000}}) {
    const std::vector<uint8_t> got = http.read_range(url, offset, length);
    EXPECT_EQ(std::string(got.begin(), got.end()), body.substr(offset, length)) << offset << "+" << length;
  }
  EXPECT_EQ(http.read_small_file(url, 1 << 20), body);
  EXPECT_FALSE(http.read_small_file(nginx.url() + "/absent.json", 1 << 20).has_value());
  EXPECT_NE(error_of([&] { http.read_small_file(url, 1000); }).find("more than the 1000"), std::string::npos);
  EXPECT_NE(error_of([&] { http.read_range(nginx.url() + "/absent.bin", 0, 10); }).find("not found (HTTP 404)"),
            std::string::npos);
  // Past the end: nginx answers 416, which is final, not retried.
  EXPECT_NE(error_of([&] { http.read_range(url, 300000, 10); }).find("HTTP 416"), std::string::npos);
  EXPECT_EQ(http.retries(), 0);
}

TEST(RemoteHttp, TransientFaultsAreRetriedAndTheBytesAreRight) {
  const std::string body = random_bytes(200000, 2);
  for (Fault f : {Fault::Status503, Fault::Status429, Fault::CutBody, Fault::Stall}) {
    SCOPED_TRACE(static_cast<int>(f));
    FaultHttpServer server(body);
    server.then(f, 2);
    HttpClient http({}, quick(1));
    const std::vector<uint8_t> got = http.read_range(server.url(), 1000, 150000);
    EXPECT_EQ(std::string(got.begin(), got.end()), body.substr(1000, 150000));
    EXPECT_EQ(http.retries(), 2);
    EXPECT_EQ(server.gets(), 3);
    // A stalled body is dropped for being too slow, not for ending.
    if (f == Fault::Stall) {
      EXPECT_NE(http.last_retry_reason().find("too slow"), std::string::npos) << http.last_retry_reason();
    }
    if (f == Fault::CutBody) {
      // Each retry asks only for what had not arrived.
      const auto ranges = server.ranges();
      ASSERT_EQ(ranges.size(), 3u);
      EXPECT_EQ(ranges[0], "bytes=1000-150999");
      EXPECT_EQ(ranges[1], "bytes=" + std::to_string(1000 + 75000) + "-150999");
    }
  }
}

// Retry-After is waited for (capped by the policy), not the backoff.
TEST(RemoteHttp, RetryAfterIsHonoured) {
  const std::string body = random_bytes(1000, 7);
  FaultHttpServer server(body, /*retry_after=*/3);
  server.then(Fault::Status429);
  server.then(Fault::Status503);
  RetryPolicy policy = quick();
  policy.first_delay_s = 0.5;
  policy.max_delay_s = 2;
  HttpClient http({}, policy);
  std::vector<double> slept;
  http.set_sleep([&](double s) { slept.push_back(s); });
  const std::vector<uint8_t> got = http.read_range(server.url(), 0, 1000);
  EXPECT_EQ(std::string(got.begin(), got.end()), body);
  EXPECT_EQ(slept, (std::vector<double>{2, 2}));  // 3 s asked, capped at 2
  FaultHttpServer plain(body);
  plain.then(Fault::Status503, 2);
  HttpClient backoff({}, policy);
  slept.clear();
  backoff.set_sleep([&](double s) { slept.push_back(s); });
  backoff.read_range(plain.url(), 0, 10);
  EXPECT_EQ(slept, (std::vector<double>{0, 0}));  // Retry-After: 0 is honoured too
}

// A file replaced at the source between two requests of one download: an
// answer naming another ETag than the one expected is refused.
TEST(RemoteHttp, AnotherVersionOfTheFileIsRefused) {
  const std::string body = random_bytes(5000, 8);
  FaultHttpServer server(body);
  server.then(Fault::NewEtag);
  HttpClient http({}, quick());
  std::string got;
  const std::string e = error_of([&] {
    http.read_range(server.url(), 100, 1000, [&](std::span<const uint8_t> b) { got.append(b.begin(), b.end()); },
                    "\"v1\"");
  });
  EXPECT_NE(e.find("changed at the source"), std::string::npos) << e;
  EXPECT_TRUE(got.empty()) << "no byte of the other version is handed over";
  const std::vector<uint8_t> ok = http.read_range(server.url(), 100, 1000);  // and with the same ETag, read
  EXPECT_EQ(std::string(ok.begin(), ok.end()), body.substr(100, 1000));
}

// A sink that throws (a full disk) ends the read with its error.
TEST(RemoteHttp, ASinkErrorEndsTheReadCleanly) {
  const std::string body = random_bytes(300000, 9);
  FaultHttpServer server(body);
  HttpClient http({}, quick());
  const std::string e = error_of([&] {
    http.read_range(server.url(), 0, body.size(), [](std::span<const uint8_t>) { throw Error("disk full (test)"); });
  });
  EXPECT_EQ(e, "disk full (test)");
  const std::vector<uint8_t> after = http.read_range(server.url(), 10, 10);  // the client still works
  EXPECT_EQ(std::string(after.begin(), after.end()), body.substr(10, 10));
}

TEST(RemoteHttp, WrongAnswersAreOneClearErrorNeverData) {
  const std::string body = random_bytes(50000, 3);
  struct Case {
    Fault fault;
    const char* says;
  };
  for (const Case& c : {Case{Fault::WrongRange, "another range"}, Case{Fault::IgnoreRange, "ignored the range"},
                        Case{Fault::Status403, "HTTP 403"}}) {
    SCOPED_TRACE(c.says);
    FaultHttpServer server(body);
    server.then(c.fault);
    HttpClient http({}, quick());
    const std::string e = error_of([&] { http.read_range(server.url(), 100, 1000); });
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
    EXPECT_EQ(server.gets(), 1) << "not retried";
  }
  // A server that keeps failing: given up after the policy's tries.
  FaultHttpServer server(body);
  server.then(Fault::Status503, 10);
  HttpClient http({}, quick());
  const std::string e = error_of([&] { http.read_range(server.url(), 0, 10); });
  EXPECT_NE(e.find("HTTP 503, after 4 tries"), std::string::npos) << e;
}

// fetch_ranges hands out ranges from a list and records how each ended.
struct RangeBatch {
  struct Result {
    std::string bytes, error;
    bool ended = false;
  };
  std::vector<RangeRequest> todo;
  std::vector<Result> results;
  size_t next = 0;
  void add(const std::string& url, uint64_t offset, uint64_t length) {
    const size_t i = todo.size();
    RangeRequest r;
    r.url = url;
    r.offset = offset;
    r.length = length;
    r.sink = [this, i](std::span<const uint8_t> b) { results[i].bytes.append(b.begin(), b.end()); };
    r.done = [this, i](const std::string& e) {
      EXPECT_FALSE(results[i].ended) << "range " << i << " ended twice";
      results[i].ended = true;
      results[i].error = e;
    };
    todo.push_back(std::move(r));
    results.emplace_back();
  }
  std::function<std::optional<RangeRequest>()> feed() {
    return [this]() -> std::optional<RangeRequest> {
      if (next >= todo.size()) return std::nullopt;
      return todo[next++];
    };
  }
};

// Many ranges at once over the multi interface: every byte right, a range
// that fails (absent file, past the end) fails alone.
TEST(RemoteHttp, ManyRangesAtOnceFromNginx) {
  testfiles::TempDir root("strata-remote-root");
  const std::string body = random_bytes(3 << 20, 11);
  root.write("blob.bin", body);
  LocalNginx nginx(root.path());
  ASSERT_TRUE(nginx.running()) << nginx.log();
  HttpClient http({}, quick());
  RangeBatch batch;
  std::mt19937 g(5);
  std::vector<std::pair<uint64_t, uint64_t>> asked;
  for (int i = 0; i < 60; ++i) {
    const uint64_t off = g() % body.size(), len = 1 + g() % std::min<uint64_t>(body.size() - off, 400000);
    batch.add(nginx.url() + "/blob.bin", off, len);
    asked.emplace_back(off, len);
  }
  batch.add(nginx.url() + "/absent.bin", 0, 10);
  batch.add(nginx.url() + "/blob.bin", body.size(), 10);
  batch.add(nginx.url() + "/blob.bin", 5, 0);  // nothing: ends at once
  http.fetch_ranges(8, batch.feed());
  for (size_t i = 0; i < asked.size(); ++i) {
    ASSERT_TRUE(batch.results[i].ended) << i;
    EXPECT_EQ(batch.results[i].error, "") << i;
    EXPECT_TRUE(batch.results[i].bytes == body.substr(asked[i].first, asked[i].second)) << i;
  }
  EXPECT_NE(batch.results[60].error.find("not found (HTTP 404)"), std::string::npos) << batch.results[60].error;
  EXPECT_NE(batch.results[61].error.find("HTTP 416"), std::string::npos) << batch.results[61].error;
  EXPECT_TRUE(batch.results[62].ended);
  EXPECT_EQ(batch.results[62].error, "");
  EXPECT_EQ(http.retries(), 0);
  // The client still reads one range at a time afterwards.
  const std::vector<uint8_t> after = http.read_range(nginx.url() + "/blob.bin", 7, 9);
  EXPECT_EQ(std::string(after.begin(), after.end()), body.substr(7, 9));
}

// In a batch, each range is retried on its own faults, and a wrong answer
// fails only its range (never data).
TEST(RemoteHttp, ManyRangesRetryEachOnItsOwn) {
  const std::string body = random_bytes(400000, 12);
  FaultHttpServer server(body);
  server.then(Fault::Status503);
  server.then(Fault::CutBody);
  server.then(Fault::WrongRange);
  server.then(Fault::Status429);
  HttpClient http({}, quick(1));
  RangeBatch batch;
  for (int i = 0; i < 6; ++i) batch.add(server.url(), 1000 + i * 50000u, 40000);
  http.fetch_ranges(4, batch.feed());
  int wrong = 0;
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(batch.results[i].ended) << i;
    if (!batch.results[i].error.empty()) {
      EXPECT_NE(batch.results[i].error.find("answered another range"), std::string::npos) << batch.results[i].error;
      ++wrong;
      continue;
    }
    EXPECT_TRUE(batch.results[i].bytes == body.substr(1000 + i * 50000u, 40000)) << i;
  }
  EXPECT_EQ(wrong, 1);
  EXPECT_EQ(http.retries(), 3);
}

// A port nothing listens on: bound for a moment to learn a free one, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw Error("cannot bind a socket on the loopback");
  ::close(fd);
  return ntohs(a.sin_port);
}

// A refused connection before any server has answered is a wrong address (or
// nothing listening there): given up on after refused_attempts tries, not after
// the ~32 s of every backoff. Once a server has answered this client, a refusal
// is a restart and gets every try.
TEST(RemoteHttp, ARefusedConnectionIsGivenUpOnSoonUntilAServerHasAnswered) {
  RetryPolicy policy;  // the defaults: 8 tries, 3 while refused on first contact
  HttpClient http({}, policy);
  std::vector<double> slept;
  http.set_sleep([&](double s) { slept.push_back(s); });
  const std::string nowhere = "http://127.0.0.1:" + std::to_string(closed_port()) + "/blob.bin";
  std::string e = error_of([&] { http.read_range(nowhere, 0, 10); });
  EXPECT_NE(e.find("after 3 tries"), std::string::npos) << e;
  EXPECT_NE(e.find("onnect"), std::string::npos) << e;  // curl's "Couldn't connect to server"
  EXPECT_EQ(slept, (std::vector<double>{0.25, 0.5}));
  e = error_of([&] { http.head(nowhere); });
  EXPECT_NE(e.find("after 3 tries"), std::string::npos) << e;
  {
    RangeBatch first;
    first.add(nowhere, 0, 10);
    http.fetch_ranges(2, first.feed());
    ASSERT_TRUE(first.results[0].ended);
    EXPECT_NE(first.results[0].error.find("after 3 tries"), std::string::npos) << first.results[0].error;
  }

  const std::string body = random_bytes(5000, 14);
  FaultHttpServer server(body);
  const std::vector<uint8_t> got = http.read_range(server.url(), 0, 100);
  EXPECT_EQ(std::string(got.begin(), got.end()), body.substr(0, 100));
  EXPECT_TRUE(http.answered());
  slept.clear();
  e = error_of([&] { http.read_range(nowhere, 0, 10); });
  EXPECT_NE(e.find("after 8 tries"), std::string::npos) << e;
  EXPECT_EQ(slept.size(), 7u);
  RangeBatch batch;
  batch.add(nowhere, 0, 10);
  http.fetch_ranges(2, batch.feed());
  ASSERT_TRUE(batch.results[0].ended);
  EXPECT_NE(batch.results[0].error.find("after 8 tries"), std::string::npos) << batch.results[0].error;

  // Any answer counts, a HEAD's, a batch's, or one that is an error (a 404).
  testfiles::TempDir root("strata-refused-root");
  root.write("blob.bin", body);
  LocalNginx nginx(root.path());
  ASSERT_TRUE(nginx.running()) << nginx.log();
  auto answered_by = [&](const std::function<void(HttpClient&)>& ask) {
    HttpClient fresh({}, policy);
    fresh.set_sleep([](double) {});
    try {
      ask(fresh);
    } catch (const Error&) {
    }
    return fresh.answered();
  };
  EXPECT_TRUE(answered_by([&](HttpClient& h) { h.head(nginx.url() + "/blob.bin"); }));
  EXPECT_TRUE(answered_by([&](HttpClient& h) { h.read_range(nginx.url() + "/absent.bin", 0, 10); }));
  EXPECT_TRUE(answered_by([&](HttpClient& h) {
    RangeBatch one;
    one.add(nginx.url() + "/absent.bin", 0, 10);
    h.fetch_ranges(1, one.feed());
  }));
  EXPECT_FALSE(answered_by([&](HttpClient& h) { h.head(nowhere); }));
}

// cancel() from another thread ends a batch stuck on a stalled server at once.
TEST(RemoteHttp, ABatchIsCancelledPromptly) {
  const std::string body = random_bytes(300000, 13);
  FaultHttpServer server(body);
  server.then(Fault::Stall, 10);
  HttpClient http({}, quick(30));
  RangeBatch batch;
  for (int i = 0; i < 3; ++i) batch.add(server.url(), i * 1000u, 100000);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    http.cancel();
  });
  const auto t0 = std::chrono::steady_clock::now();
  http.fetch_ranges(2, batch.feed(), [] { return true; });  // would wait for more forever
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  canceller.join();
  EXPECT_LT(s, 5.0);
  for (const auto& r : batch.results)
    if (r.ended) {
      EXPECT_NE(r.error.find("cancelled"), std::string::npos) << r.error;
    }
  EXPECT_TRUE(batch.results[0].ended);
}

TEST(RemoteHttp, UrlsInMessagesLoseTheirSecrets) {
  EXPECT_EQ(url_for_messages("https://u:p@h.example/a/b?X-Amz-Signature=abc#f"), "https://h.example/a/b");
  EXPECT_EQ(url_for_messages("http://h/a"), "http://h/a");
}

// A hub layout as nginx serves it: {repo}/resolve/{commit}/{file}, "main"
// a link to the commit, and the headers a hub adds (X-Repo-Commit on every
// file, X-Linked-Etag/Size on LFS files).
class RemoteHub : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path commit_dir = root_.path() / "org" / "model" / "resolve" / kCommit;
    fs::create_directories(commit_dir);
    fs::create_directory_symlink(kCommit, root_.path() / "org" / "model" / "resolve" / "main");
    weights_ = random_bytes(1 << 20, 4);
    testfiles::write_file(commit_dir / "model.safetensors", weights_);
    testfiles::write_file(commit_dir / "config.json", "{\"model_type\": \"qwen3_moe\"}");
    sha_ = sha256sum(commit_dir / "model.safetensors");
    ASSERT_EQ(sha_.size(), 64u);
  }
  std::string locations(const std::string& published_sha) const {
    return "    location ~ ^/org/model/resolve/[^/]+/model.safetensors$ {\n"
           "      add_header X-Repo-Commit " + std::string(kCommit) + ";\n"
           "      add_header X-Linked-Etag '\"" + published_sha + "\"';\n"
           "      add_header X-Linked-Size " + std::to_string(weights_.size()) + ";\n    }\n"
           "    location /org/ { add_header X-Repo-Commit " + std::string(kCommit) + "; }\n";
  }
  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
  testfiles::TempDir root_{"strata-hub-root"};
  std::string weights_, sha_;
};

TEST_F(RemoteHub, PinsTheRevisionAndVerifiesThePublishedSha256) {
  LocalNginx nginx(root_.path(), locations(sha_));
  ASSERT_TRUE(nginx.running()) << nginx.log();
  RemoteSource src(parse_source("hf://org/model", env_of({{"HF_ENDPOINT", nginx.url()}})), quick());
  EXPECT_EQ(src.commit(), kCommit);
  EXPECT_EQ(src.url("model.safetensors"), nginx.url() + "/org/model/resolve/" + kCommit + "/model.safetensors");
  const RemoteFileInfo info = src.stat("model.safetensors");
  EXPECT_TRUE(info.exists);
  EXPECT_EQ(info.size, weights_.size());
  EXPECT_EQ(info.sha256, sha_);
  EXPECT_FALSE(src.stat("absent.json").exists);
  EXPECT_EQ(src.read_small("config.json"), "{\"model_type\": \"qwen3_moe\"}");

  testfiles::TempDir out("strata-hub-out");
  uint64_t seen = 0;
  src.download("model.safetensors", out / "model.safetensors", [&](uint64_t n) { seen += n; });
  EXPECT_EQ(read_file(out / "model.safetensors"), weights_);
  EXPECT_EQ(seen, weights_.size());
  EXPECT_FALSE(fs::exists(out / "model.safetensors.part"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.part.json"));
}

TEST_F(RemoteHub, ADownloadResumesAfterTheBytesItHas) {
  LocalNginx nginx(root_.path(), locations(sha_));
  ASSERT_TRUE(nginx.running()) << nginx.log();
  RemoteSource src(parse_source("hf://org/model@main", env_of({{"HF_ENDPOINT", nginx.url()}})), quick());
  testfiles::TempDir out("strata-hub-out");
  const fs::path dest = out / "model.safetensors";
  // An earlier run stopped a third of the way: its part and record.
  const nlohmann::json record = {{"url", url_for_messages(src.url("model.safetensors"))},
                                 {"size", weights_.size()},
                                 {"etag", src.stat("model.safetensors").etag},
                                 {"sha256", sha_}};
  testfiles::write_file(fs::path(dest.string() + ".part"), weights_.substr(0, weights_.size() / 3));
  testfiles::write_file(fs::path(dest.string() + ".part.json"), record.dump());
  std::vector<uint64_t> progress;
  src.download("model.safetensors", dest, [&](uint64_t n) { progress.push_back(n); });
  EXPECT_EQ(read_file(dest), weights_);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front(), weights_.size() / 3) << "the bytes it had count first";

  // A part whose bytes are not the file's: the whole-file hash refuses it,
  // and the part is gone so the next run starts clean.
  fs::remove(dest);
  std::string bad = weights_.substr(0, weights_.size() / 2);
  bad[100] = static_cast<char>(bad[100] ^ 1);
  testfiles::write_file(fs::path(dest.string() + ".part"), bad);
  testfiles::write_file(fs::path(dest.string() + ".part.json"), record.dump());
  const std::string e = error_of([&] { src.download("model.safetensors", dest); });
  EXPECT_NE(e.find("the source publishes " + sha_), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(fs::exists(fs::path(dest.string() + ".part")));
  src.download("model.safetensors", dest);
  EXPECT_EQ(read_file(dest), weights_);
}

TEST_F(RemoteHub, AFileThatIsNotWhatTheHubPublishesIsRefused) {
  std::string other = sha_;
  other[0] = other[0] == 'a' ? 'b' : 'a';
  LocalNginx nginx(root_.path(), locations(other));
  ASSERT_TRUE(nginx.running()) << nginx.log();
  RemoteSource src(parse_source("hf://org/model", env_of({{"HF_ENDPOINT", nginx.url()}})), quick());
  testfiles::TempDir out("strata-hub-out");
  const std::string e = error_of([&] { src.download("model.safetensors", out / "m.safetensors"); });
  EXPECT_NE(e.find("sha256 is " + sha_ + ", the source publishes " + other), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out / "m.safetensors"));
}

// The SigV4 signature libcurl puts on a request is the one botocore (the AWS
// SDK's signer) computes for it, with and without a session token.
TEST(RemoteS3, SignaturesAreWhatBotocoreComputes) {
  for (const std::string token : {"", "FQoGZXIvYXdzEXAMPLETOKEN"}) {
    SCOPED_TRACE(token);
    FaultHttpServer server(random_bytes(100, 6));
    HttpAuth auth;  // the values the source below is given
    auth.access_key = "AKIDEXAMPLE";
    auth.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    auth.session_token = token;
    auth.region = "eu-west-3";
    // Through the S3 source, with a key that needs encoding.
    RemoteSource src(parse_source("s3://models/kimi k3+x%/v1",
                                  env_of({{"AWS_ENDPOINT_URL_S3", server.url("")},
                                          {"AWS_ACCESS_KEY_ID", auth.access_key},
                                          {"AWS_SECRET_ACCESS_KEY", auth.secret_key},
                                          {"AWS_SESSION_TOKEN", token},
                                          {"AWS_REGION", auth.region}})),
                     quick());
    const std::string url = src.url("model 00001+of%2.safetensors");
    EXPECT_EQ(url, server.url("/models/kimi%20k3%2Bx%25/v1/model%2000001%2Bof%252.safetensors"));
    src.read("model 00001+of%2.safetensors", 10, 50);
    src.stat("model 00001+of%2.safetensors");    testfiles::TempDir tmp("strata-sigv4");
    for (const std::string& request : server.requests()) {
      const fs::path file = tmp.write("request", request);
      std::string out;
      const std::string cmd = "python3 " STRATA_TESTS_DIR "/sigv4_reference.py " + file.string() + " '" + url + "' '" +
                              auth.secret_key + "' " + auth.region + (token.empty() ? "" : " " + token) + " 2>&1";
      FILE* pipe = ::popen(cmd.c_str(), "r");
      char buf[512];
      while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
      const int status = pipe ? ::pclose(pipe) : -1;
      EXPECT_EQ(status, 0) << out << "\n" << request;
      EXPECT_EQ(out, "ok\n") << request;
    }
    EXPECT_EQ(server.requests().size(), 2u);
  }
}

TEST(RemoteSourceParse, HubFormsTokensAndEndpoints) {
  testfiles::TempDir home("strata-hub-home");
  fs::create_directories(home / ".cache" / "huggingface");
  testfiles::write_file(home / ".cache" / "huggingface" / "token", "hf_file_token\n");
  SourceLocation l = parse_source("hf://org/model@v1.0", env_of({{"HOME", home.path().string()}}));
  EXPECT_EQ(l.kind, SourceLocation::Kind::Hub);
  EXPECT_EQ(l.base, "https://huggingface.co/org/model/resolve/v1.0");
  EXPECT_EQ(l.auth.bearer, "hf_file_token");
  l = parse_source("hf://org/model", env_of({{"HOME", home.path().string()}, {"HF_TOKEN", "hf_env"},
                                             {"HF_ENDPOINT", "http://mirror.local:8080/"}}));
  EXPECT_EQ(l.base, "http://mirror.local:8080/org/model/resolve/main");
  EXPECT_EQ(l.auth.bearer, "hf_env");
  EXPECT_EQ(parse_source("hf://org/model@refs/pr/1", env_of({})).base,
            "https://huggingface.co/org/model/resolve/refs%2Fpr%2F1");
  for (const char* bad : {"hf://", "hf:///model", "hf://a/b/c", "hf://org/mo del", "hf://org/model@", "hf://../x"})
    EXPECT_NE(error_of([&] { parse_source(bad, env_of({})); }).find(bad), std::string::npos) << bad;
  EXPECT_NE(error_of([&] { parse_source("hf://o/m", env_of({{"HF_ENDPOINT", "ftp://x"}})); }).find("HF_ENDPOINT"),
            std::string::npos);
}

TEST(RemoteSourceParse, S3CredentialsRegionAndEndpoint) {
  const auto keys = std::map<std::string, std::string>{{"AWS_ACCESS_KEY_ID", "AK"}, {"AWS_SECRET_ACCESS_KEY", "SK"}};
  SourceLocation l = parse_source("s3://models/kimi/k3/", env_of(keys));
  EXPECT_EQ(l.kind, SourceLocation::Kind::S3);
  EXPECT_EQ(l.base, "https://models.s3.us-east-1.amazonaws.com/kimi/k3");
  EXPECT_EQ(l.auth.access_key, "AK");
  EXPECT_EQ(l.auth.region, "us-east-1");
  auto with = keys;
  with["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9000/";
  with["AWS_REGION"] = "eu-west-3";
  l = parse_source("s3://models/k3", env_of(with));
  EXPECT_EQ(l.base, "http://127.0.0.1:9000/models/k3");
  EXPECT_EQ(l.auth.region, "eu-west-3");
  EXPECT_EQ(parse_source("s3://my.models/x", env_of(keys)).base, "https://s3.us-east-1.amazonaws.com/my.models/x");

  // The shared files, as the AWS tools write them.
  testfiles::TempDir home("strata-aws-home");
  fs::create_directories(home / ".aws");
  testfiles::write_file(home / ".aws" / "credentials",
                        "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[work]\n"
                        "aws_access_key_id=W\naws_secret_access_key=WS\naws_session_token = WT\n");
  testfiles::write_file(home / ".aws" / "config", "[default]\nregion = us-west-2\n[profile work]\nregion=ap-south-1\n");
  l = parse_source("s3://bucket", env_of({{"HOME", home.path().string()}}));
  EXPECT_EQ(l.auth.access_key, "D");
  EXPECT_EQ(l.auth.region, "us-west-2");
  l = parse_source("s3://bucket", env_of({{"HOME", home.path().string()}, {"AWS_PROFILE", "work"}}));
  EXPECT_EQ(l.auth.access_key, "W");
  EXPECT_EQ(l.auth.secret_key, "WS");
  EXPECT_EQ(l.auth.session_token, "WT");
  EXPECT_EQ(l.auth.region, "ap-south-1");

  EXPECT_NE(error_of([&] { parse_source("s3://bucket", env_of({})); }).find("no AWS credentials"), std::string::npos);
  EXPECT_TRUE(parse_source("s3://bucket", env_of({{"AWS_NO_SIGN_REQUEST", "true"}})).auth.access_key.empty());
  for (const char* bad : {"s3://", "s3://B", "s3://ab", "s3://bucket//x", "s3://-bucket"})
    EXPECT_NE(error_of([&] { parse_source(bad, env_of(keys)); }).find("s3://"), std::string::npos) << bad;
}

TEST(RemoteSourceParse, OtherFormsAndLocalPaths) {
  EXPECT_EQ(parse_source("https://models.example/k3/", env_of({})).base, "https://models.example/k3");
  EXPECT_NE(error_of([&] { parse_source("https://h/x?sig=1", env_of({})); }).find("query"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_source("/models/k3", env_of({})); }).find("not a source"), std::string::npos);
  SourceLocation g = parse_source("hf://org/model@v2/model-Q4_K.gguf", env_of({}));
  EXPECT_EQ(g.file, "model-Q4_K.gguf");
  EXPECT_EQ(g.base, "https://huggingface.co/org/model/resolve/v2");
  EXPECT_EQ(parse_source("https://h/m/x.gguf", env_of({})).base, "https://h/m");
  EXPECT_NE(error_of([&] { parse_source("https://h/.gguf", env_of({})); }).find("NAME.gguf"), std::string::npos);
  EXPECT_FALSE(is_remote_source("/models/k3"));
  EXPECT_FALSE(is_remote_source("models/hf:/x"));
  EXPECT_TRUE(is_remote_source("hf://org/model"));
  EXPECT_TRUE(is_remote_source("s3://bucket/x"));
}

TEST(RemoteSha256, MatchesSha256sum) {
  testfiles::TempDir dir("strata-sha");
  for (size_t n : {size_t{0}, size_t{1}, size_t{3 << 20}}) {
    const fs::path p = dir.write("f" + std::to_string(n), random_bytes(n, 5));
    EXPECT_EQ(sha256_of_file(p), sha256sum(p)) << n;
  }
}

}  // namespace
}  // namespace strata
