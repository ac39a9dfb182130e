// A new user's first hour with the strata binary (issue 16): text that
// arrives as it is decided, progress on a terminal only, `serve` refusing a
// missing or broken model before it listens, a model larger than the memory
// available, the context a model was trained for, the KV caches of every
// served sequence in the budget, the demo at its sizes, one way to name the
// model in every command, and packs that weigh their drives and can move.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cli_support.h"
#include "storage/drive_rates.h"
#include "safetensors_writer.h"

namespace strata {
namespace {

using namespace clitest;
using nlohmann::json;

// Fills a pipe's buffer to the last byte: a blocking write to it then waits
// until the other end reads.
void fill_pipe(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const std::string page(4096, 'x');
  while (::write(fd, page.data(), page.size()) > 0) {
  }
  while (::write(fd, "x", 1) > 0) {
  }
  ::fcntl(fd, F_SETFL, flags);  // the child inherits a blocking descriptor
}

// Reads what is there within `ms`; false at end of file or timeout.
bool read_some(int fd, std::string& into, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return false;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n <= 0) return false;
  into.append(buf, static_cast<size_t>(n));
  return true;
}

pid_t spawn(const std::vector<std::string>& args, int out_fd, int err_fd) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// stderr is a pipe that is already full, so the child stops at its first
// write there: the stats line, after the last token. By then its stdout must
// hold the whole continuation, flushed token by token; output kept in a
// buffer until the process ends (which it cannot, here) never arrives.
TEST(FirstHour, GeneratePrintsTokensAsTheyAreDecided) {
  int out[2], err[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
  fill_pipe(err[1]);
  const pid_t pid = spawn({STRATA_BINARY, "generate", fixture("qwen_gqa").string(), "--prompt-ids", "5,6,7", "-n", "6",
                           "--ignore-eos", "--threads", "1"},
                          out[1], err[1]);
  ASSERT_GT(pid, 0);
  ::close(out[1]);
  ::close(err[1]);
  std::string text;
  while (text.find('\n') == std::string::npos && read_some(out[0], text, 60000)) {
  }
  int status = 0;
  const bool still_running = ::waitpid(pid, &status, WNOHANG) == 0;
  EXPECT_NE(text.find('\n'), std::string::npos) << "nothing on stdout while the process still ran: '" << text << "'";
  EXPECT_TRUE(still_running) << "the process should wait on its full stderr";
  if (text.find('\n') == std::string::npos) ::kill(pid, SIGKILL);
  // Reading stderr lets it finish.
  std::string rest;
  while (read_some(err[0], rest, 60000)) {
  }
  ::waitpid(pid, &status, 0);
  ::close(out[0]);
  ::close(err[0]);
  const size_t said = rest.find_first_not_of('x');  // after the bytes that filled the pipe
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << (said == std::string::npos ? "" : rest.substr(said));
  // Six ids, space-separated (this fixture has no tokenizer).
  std::istringstream ids(text);
  int id = 0, n = 0;
  while (ids >> id) ++n;
  EXPECT_EQ(n, 6) << text;
}

// The same tokens either way.
TEST(FirstHour, GenerateStreamedMatchesJson) {
  const std::string base = "generate " + fixture("qwen_gqa").string() + " --prompt-ids 5,6,7 -n 6 --ignore-eos";
  const CommandResult plain = run_strata(base), js = run_strata(base + " --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::string expect;
  const json tokens = json::parse(js.out)["tokens"];
  for (int t : tokens) expect += (expect.empty() ? "" : " ") + std::to_string(t);
  EXPECT_EQ(plain.out, expect + "\n");
}

// On a terminal stderr shows the load's progress; into a file or pipe
// (tests, scripts) nothing but the stats line.
TEST(FirstHour, ProgressShowsOnATerminalOnly) {
  const std::string model = fixture("qwen_gqa").string();
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(STRATA_BINARY, STRATA_BINARY, "generate", model.c_str(), "--prompt-ids", "5,6,7", "-n", "2", "--threads",
            "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string screen;
  while (read_some(master, screen, 60000)) {
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << screen;
  EXPECT_NE(screen.find("load ["), std::string::npos) << screen;

  const CommandResult piped = run_strata("generate " + model + " --prompt-ids 5,6,7 -n 2 --threads 1");
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("load ["), std::string::npos) << piped.err;
  EXPECT_EQ(std::count(piped.err.begin(), piped.err.end(), '\n'), 1) << piped.err;
}

// A port this test holds: a strata that tried to listen before checking
// its model would fail to, and say so.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot hold a port");
    port_ = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

TEST(FirstHour, ServeOnAMissingModelExitsBeforeListening) {
  const HeldPort held;
  const CommandResult r =
      run_strata("serve /nonexistent/strata-model --port " + std::to_string(held.port()), "timeout 60");
  expect_clean_error(r, "/nonexistent/strata-model");
  EXPECT_EQ(r.err.find("listen"), std::string::npos) << r.err;
}

TEST(FirstHour, ServeOnABrokenModelExitsBeforeListening) {
  testfiles::TempDir dir("strata-broken");
  fs::copy(fixture("qwen_gqa"), dir.path(), fs::copy_options::recursive);
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
  // Any free port: the old order listened, then failed to load, and served 500s forever.
  const CommandResult r = run_strata("serve " + dir.path().string() + " --port 0", "timeout 60");
  expect_clean_error(r, "model.safetensors");
  EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
}

// The default context is the model's trained length when that is shorter
// than 4096; more is refused unless asked for.
TEST(FirstHour, ContextBeyondTheTrainedLengthIsRefusedUnlessAllowed) {
  const std::string model = fixture("qwen_gqa").string();  // max_position_embeddings 128
  expect_clean_error(run_strata("generate " + model + " --prompt-ids 1,2 -n 2 --ctx 1000"), "max_position_embeddings");
  expect_clean_error(run_strata("serve " + model + " --port 0 --ctx 1000", "timeout 60"), "max_position_embeddings");
  const CommandResult allowed = run_strata("generate " + model + " --prompt-ids 1,2 -n 2 --ctx 1000 --allow-long-ctx");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  std::string long_prompt = "1";
  for (int i = 0; i < 199; ++i) long_prompt += ",2";
  expect_clean_error(run_strata("generate " + model + " --prompt-ids " + long_prompt + " -n 2"), "the context is 128");
}

// serve --ram holds a KV cache at the full context for each of
// --max-running sequences, and says so when that does not fit.
TEST(FirstHour, ServeBudgetsAKvCacheForEveryRunningSequence) {
  const CommandResult r =
      run_strata("serve " + fixture("qwen_gqa").string() + " --port 0 --ram 0.001 --max-running 8", "timeout 60");
  expect_clean_error(r, "each of 8 sequences");
}

// A request whose prompt and max_tokens together pass the context each
// sequence is budgeted for is a 400, not cut short.
TEST(FirstHour, ServeRefusesARequestPastTheBudgetedContext) {
  testfiles::TempDir tmp("strata-serve-ctx");
  const fs::path err = tmp / "err", out = tmp / "out";
  auto post = [&](int max_tokens) {
    return "curl -s -o " + out.string() + "." + std::to_string(max_tokens) + " -w \"%{http_code}\\n\" http://127.0.0.1:$port/v1/completions -H \"Content-Type: application/json\" -d \"{\\\"prompt\\\": [1, 2, 3], \\\"max_tokens\\\": " +
           std::to_string(max_tokens) + "}\" >>" + (tmp / "codes").string() + "; ";
  };
  const std::string script = std::string(STRATA_BINARY) + " serve " + fixture("qwen_gqa").string() +
                             " --port 0 --threads 1 --ctx 32 --max-running 2 2>" + err.string() +
                             " & pid=$!; for i in $(seq 400); do grep -q \"model loaded\" " + err.string() +
                             " && break; sleep 0.05; done; port=$(sed -n \"s/.*listening on http:\\/\\/[^:]*:\\([0-9]*\\).*/\\1/p\" " +
                             err.string() + "); " + post(40) + post(20) + "kill -TERM $pid; wait $pid";
  std::ofstream(tmp / "run.sh") << script;
  const int status = std::system(("bash " + (tmp / "run.sh").string()).c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_all(err);
  EXPECT_EQ(read_all(tmp / "codes"), "400\n200\n") << read_all(err);
  const json refused = json::parse(read_all(out.string() + ".40"));
  EXPECT_EQ(refused["error"]["code"], "context_length_exceeded") << refused.dump();
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("context of 32"), std::string::npos) << refused.dump();
}

// A model a few times the size of the memory STRATA_MEMORY_AVAILABLE
// pretends the machine has (util/process_memory.h).
class BiggerThanMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testfiles::TempDir("strata-big");
    model_ = (dir_->path() / "model").string();
    const CommandResult r =
        run_strata("synth --preset qwen3-30b-a3b --size 0.2 --format safetensors --seed 3 --out " + model_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline testfiles::TempDir* dir_ = nullptr;
  static inline std::string model_;
};

TEST_F(BiggerThanMemory, IsStreamedWithinABudgetFromTheMemoryAvailable) {
  const std::string run = "generate " + model_ + " --prompt-ids 1,2,3 -n 4 --ignore-eos --json --threads 2";
  const CommandResult in_ram = run_strata(run);
  ASSERT_EQ(in_ram.exit_code, 0) << in_ram.err;
  ASSERT_FALSE(json::parse(in_ram.out)["stats"].contains("memory")) << "ran in RAM: no budget";

  // With almost nothing available it is refused before anything is read,
  // and the refusal says what the least is that it runs in.
  const CommandResult tiny = run_strata(run, "STRATA_MEMORY_AVAILABLE=1048576");
  expect_clean_error(tiny, "of memory available");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tiny.err, m, std::regex("the least that works is ([0-9.]+) GiB"))) << tiny.err;
  const double least_gib = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(tiny.err, m, std::regex("the process itself ([0-9.]+) GiB"))) << tiny.err;
  const double process_gib = std::stod(m[1]);
  // The least is a budget, the process's own resident set included; the
  // budget derived from what is available is that set and nine tenths of
  // the rest. So this much is enough for the least (a margin for the
  // rounding of what was printed), and not enough for the whole model in
  // RAM (its weights and a 4096-row step's buffers): the run below reports
  // a budget, so it was streamed. (The process's set is large under the
  // sanitizers, so it must not be counted twice.)
  const auto available = static_cast<uint64_t>((least_gib - process_gib + 0.03) * (1ull << 30) / 0.9);

  const CommandResult streamed = run_strata(run, "STRATA_MEMORY_AVAILABLE=" + std::to_string(available));
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  // One line says so.
  EXPECT_EQ(std::count(streamed.err.begin(), streamed.err.end(), '\n'), 1) << streamed.err;
  EXPECT_NE(streamed.err.find("streaming its experts"), std::string::npos) << streamed.err;
  const json s = json::parse(streamed.out);
  ASSERT_TRUE(s["stats"].contains("memory")) << streamed.out;
  EXPECT_GT(s["stats"]["memory"]["budget"].get<uint64_t>(), 0u);
  EXPECT_LE(s["stats"]["memory"]["budget"].get<uint64_t>(),
            s["stats"]["memory"]["baseline"].get<uint64_t>() + available);
  EXPECT_EQ(s["tokens"], json::parse(in_ram.out)["tokens"]);
}

// A streamed run leaves what its reads got from the drive (storage/
// drive_rates.h), and the next budget rates the drive's prompts by it: the
// run's own bytes over its busy time, not the probe's.
TEST_F(BiggerThanMemory, ARunsReadsRateTheDriveForTheNextBudget) {
  testfiles::TempDir home("strata-rates-home");
  const std::string env = "STRATA_BUDGET_COMPUTE_MIB=16 STRATA_HOME=" + home.path().string();
  std::string ids = "1";
  for (int i = 2; i <= 64; ++i) ids += "," + std::to_string(i);
  const CommandResult run = run_strata(
      "generate " + model_ + " --ram 0.4 --ctx 256 --prompt-ids " + ids + " -n 4 --ignore-eos --json --threads 2", env);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json read = json::parse(run.out)["stats"]["experts"]["prefill"]["drives"].at(0);
  // Every expert read once: more than a handful of reads.
  ASSERT_GE(read["bytes"].get<uint64_t>(), DriveRates::kLeastRunBytes) << read.dump();
  const std::optional<DriveRates> rates = load_drive_rates(home.path() / "drive_rates.json");
  ASSERT_TRUE(rates.has_value());
  const DriveRateRecord* drive = rates->drive_for(model_);
  ASSERT_NE(drive, nullptr);
  ASSERT_EQ(drive->prefill.size(), 1u);
  EXPECT_EQ(drive->prefill[0].bytes, read["bytes"].get<uint64_t>());
  EXPECT_EQ(drive->prefill[0].busy_s, read["busy_s"].get<double>());
  EXPECT_EQ(drive->name, read["name"]);

  const CommandResult budget =
      run_strata("budget " + model_ + " --ram 0.4 --ctx 256 --prompt 64 --probe-seconds 0.2 --threads 1 --json", env);
  ASSERT_EQ(budget.exit_code, 0) << budget.err;
  const json rated = json::parse(budget.out)["machine"]["drives"].at(0);
  EXPECT_EQ(rated["prompt_runs"], 1);
  EXPECT_DOUBLE_EQ(rated["prompt_gbps"].get<double>(),
                   read["bytes"].get<double>() / read["busy_s"].get<double>() / 1e9);
}

// The expert heat only speeds up the next start: a home it cannot be written
// to (here a file where the folder should be; root may write anywhere else)
// is one warning, and the run's output and exit status are those of a run
// that keeps no heat.
TEST(CliFirstHour, AnUnwritableHeatIsAWarningNotAFailure) {
  testfiles::TempDir tmp("strata-heat-home");
  const fs::path home = tmp / "home";
  { std::ofstream(home) << "not a folder\n"; }
  const std::string args =
      "generate " + fixture("qwen_gqa").string() + " --prompt-ids 1,2,3 -n 3 --json --threads 2 " + kAmpleRam;
  const CommandResult kept = run_strata(args, "STRATA_HOME=" + home.string());
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_NE(kept.err.find("warning"), std::string::npos) << kept.err;
  EXPECT_NE(kept.err.find("expert heat"), std::string::npos) << kept.err;
  const CommandResult none = run_strata(args + " --heat none");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(json::parse(kept.out)["tokens"], json::parse(none.out)["tokens"]);
}

// A model without routed experts (the dense draft model) has nothing to
// stream: --stream runs it as in RAM, same tokens.
TEST(CliFirstHour, ADenseModelStreamsNothingAndRuns) {
  const std::string args = "generate " + fixture("trained_draft_dense").string() +
                           " --prompt-ids 5,6,7 -n 4 --ignore-eos --json --threads 2 --heat none";
  const CommandResult ram = run_strata(args), streamed = run_strata(args + " --stream");
  ASSERT_EQ(ram.exit_code, 0) << ram.err;
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(json::parse(streamed.out)["tokens"], json::parse(ram.out)["tokens"]);
}

// The demo's default budget is never below what the loader needs, at the
// smallest sizes too (0.5 GB used to be refused).
class DemoSizes : public ::testing::TestWithParam<const char*> {};

TEST_P(DemoSizes, RunWithTheirDefaultBudget) {
  testfiles::TempDir tmp("strata-demo");
  const CommandResult r = run_strata(std::string("demo --size ") + GetParam() + " --tokens 2 --threads 2 --json --dir " +
                                         (tmp / "demo").string(),
                                     "STRATA_HOME=" + (tmp / "home").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_GT(j["ram_budget_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["generated_tokens"], 2);
}

INSTANTIATE_TEST_SUITE_P(Smallest, DemoSizes, ::testing::Values("0.2", "0.5"));

// MODEL is positional in every command that reads one, --model an alias.
TEST(FirstHour, EveryCommandTakesTheModelTheSameWay) {
  for (const std::string cmd : {"generate", "serve", "pack", "tokenize"}) {
    const std::string help = run_strata(cmd + " --help").out;
    EXPECT_NE(help.find("MODEL"), std::string::npos) << cmd << ":\n" << help;
    EXPECT_NE(help.find("--model"), std::string::npos) << cmd << ":\n" << help;
  }
  // What the help says each one reads.
  EXPECT_NE(run_strata("generate --help").out.find("GGUF file, or pack"), std::string::npos);
  EXPECT_NE(run_strata("serve --help").out.find("GGUF file, or pack"), std::string::npos);
  EXPECT_NE(run_strata("compare --help").out.find("GGUF file, or pack"), std::string::npos);

  const std::string model = fixture("qwen_gqa").string(), rest = " --prompt-ids 5,6,7 -n 3 --json";
  const CommandResult positional = run_strata("generate " + model + rest), flag = run_strata("generate --model " + model + rest);
  ASSERT_EQ(positional.exit_code, 0) << positional.err;
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(json::parse(positional.out)["tokens"], json::parse(flag.out)["tokens"]);
  // The fixtures carry no tokenizer: the same clear error either way.
  expect_clean_error(run_strata("tokenize " + model + " --text hi"), "no tokenizer");
  expect_clean_error(run_strata("tokenize --model " + model + " --text hi"), "no tokenizer");
}

TEST(FirstHour, FoldersOnOneDeviceAreOneDriveForPlacement) {
  testfiles::TempDir tmp("strata-pack-dev");
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  const CommandResult r = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + (tmp / "pack").string() +
                                     " --drive " + (tmp / "a").string() + " --drive " + (tmp / "b").string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("are on the same device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("one drive for placement"), std::string::npos) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["probe"], "equal");  // one device: nothing to measure
  EXPECT_EQ(j["drive_weights"], json::array({0.5, 0.5}));
}

// Two devices and no saved probe: a short one is measured (tmpfs under
// /dev/shm is a device of its own).
TEST(FirstHour, PackWithoutAProbeMeasuresAShortOne) {
  testfiles::TempDir tmp("strata-pack-probe");
  struct stat a {}, b {};
  if (::stat("/dev/shm", &b) != 0 || ::stat(tmp.path().c_str(), &a) != 0 || a.st_dev == b.st_dev)
    GTEST_SKIP() << "needs /dev/shm on a device other than " << tmp.path();
  const fs::path shm = fs::path("/dev/shm") / tmp.path().filename();
  fs::create_directories(shm);
  fs::create_directories(tmp / "disk");
  const CommandResult r = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + (tmp / "pack").string() +
                                         " --drive " + (tmp / "disk").string() + " --drive " + shm.string() + " --json",
                                     "STRATA_HOME=" + (tmp / "home").string());
  std::error_code ec;
  fs::remove_all(shm, ec);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("measuring a short one"), std::string::npos) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["probe"], "measured");
  ASSERT_EQ(j["drive_weights"].size(), 2u);
  for (const auto& w : j["drive_weights"]) EXPECT_GT(w.get<double>(), 0.0);
  EXPECT_NE(j["drive_weights"], json::array({1.0, 1.0})) << "measured speeds, not equal weights";
}

// Pack, move the whole pack directory elsewhere: it still loads and gives
// the same tokens (the expert folder inside it is stored relative to it).
TEST(FirstHour, AMovedPackStillLoadsAndGivesTheSameTokens) {
  testfiles::TempDir tmp("strata-pack-move");
  const fs::path before = tmp / "before", after = tmp / "elsewhere" / "moved";
  fs::create_directories(before / "experts");
  const CommandResult packed = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + before.string() +
                                          " --drive " + (before / "experts").string() + " -q");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  const std::string rest = " --prompt-ids 5,6,7 -n 6 --ignore-eos --json --heat none";
  const CommandResult first = run_strata("generate " + before.string() + rest);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  fs::create_directories(after.parent_path());
  fs::rename(before, after);
  const CommandResult moved = run_strata("generate " + after.string() + rest);
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(json::parse(moved.out)["tokens"], json::parse(first.out)["tokens"]);
}

}  // namespace
}  // namespace strata
