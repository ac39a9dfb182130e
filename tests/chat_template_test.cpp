// The chat-template interpreter (src/template/) against python3-jinja2 set up
// as transformers renders chat templates (tools/make_chat_template_fixtures.py):
//  * cases.json: the real templates in tests/fixtures/chat_templates/ (DeepSeek
//    V3 / V3.1 / V3.2, Kimi K2 / K2-Instruct / K2-Thinking / K3, Qwen3,
//    Qwen3-Coder, gpt-oss) on varied conversations; byte-identical output, or
//    an error where python raised one;
//  * snippets.json: expressions, filters, tests, statements and whitespace
//    control one at a time, same rule;
// plus error reporting (kinds, line numbers) and robustness: truncated and
// mutated templates, deep nesting and runaway loops end in a strata::Error,
// never a crash or a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "bounded_child.h"
#include "template/chat_template.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

fs::path fixtures() { return fs::path(STRATA_FIXTURES_DIR) / "chat_templates"; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ojson& load(const std::string& name) {
  static std::map<std::string, ojson> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, ojson::parse(read_file(fixtures() / name))).first;
  return it->second;
}

// The fixtures pin datetime.now() to 2025-01-15 09:30:05.
std::tm fixed_clock() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  timegm(&tm);  // fills in the weekday and day of the year
  return tm;
}

std::string show(const std::string& s) { return ojson(s).dump(); }

struct Outcome {
  bool ok = false;
  std::string text;  // output, or the error message
};

Outcome run(const ChatTemplate& t, const ojson& context) {
  try {
    return {true, t.render(context)};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

TEST(ChatTemplateReference, RealTemplatesMatchTransformers) {
  const ojson& doc = load("cases.json");
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  int passed = 0, failed = 0, expected_errors = 0;
  for (const ojson& c : doc.at("cases")) {
    const std::string name = c.at("name");
    const std::string tname = c.at("template");
    auto& slot = templates[tname];
    if (!slot) {
      slot = std::make_unique<ChatTemplate>(read_file(fixtures() / (tname + ".jinja")));
      slot->set_clock(fixed_clock);
    }
    const Outcome got = run(*slot, c.at("context"));
    bool good;
    if (c.contains("error")) {
      ++expected_errors;
      good = !got.ok;
      if (!good) ADD_FAILURE() << name << ": python raised " << c.at("error") << " but we rendered " << show(got.text);
    } else {
      const std::string want = c.at("expected");
      good = got.ok && got.text == want;
      if (!good)
        ADD_FAILURE() << name << ":\n  want " << show(want) << "\n  got  " << (got.ok ? show(got.text) : "ERROR " + got.text);
    }
    (good ? passed : failed)++;
  }
  std::cout << "[chat templates] " << passed << "/" << passed + failed << " cases identical to transformers ("
            << expected_errors << " where python raises)\n";
  EXPECT_EQ(failed, 0);
  EXPECT_GE(passed, 300);
}

TEST(ChatTemplateReference, SnippetsMatchJinja2) {
  const ojson& doc = load("snippets.json");
  const ojson& context = doc.at("context");
  int passed = 0, failed = 0;
  for (const ojson& c : doc.at("cases")) {
    const std::string src = c.at("template");
    Outcome got;
    try {
      ChatTemplate t(src);
      t.set_clock(fixed_clock);
      got = run(t, context);
    } catch (const Error& e) {
      got = {false, e.what()};
    }
    bool good;
    if (c.contains("error")) {
      good = !got.ok;
      if (!good) ADD_FAILURE() << show(src) << ": python raised " << c.at("error") << " but we rendered " << show(got.text);
    } else {
      const std::string want = c.at("expected");
      good = got.ok && got.text == want;
      if (!good)
        ADD_FAILURE() << show(src) << ":\n  want " << show(want) << "\n  got  " << (got.ok ? show(got.text) : "ERROR " + got.text);
    }
    (good ? passed : failed)++;
  }
  std::cout << "[chat templates] " << passed << "/" << passed + failed << " snippets identical to jinja2\n";
  EXPECT_EQ(failed, 0);
}

// ---------------------------------------------------------------- errors

ChatTemplateError syntax_error_of(const std::string& src) {
  try {
    ChatTemplate t(src);
  } catch (const ChatTemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no syntax error for " << show(src);
  return ChatTemplateError(ChatTemplateError::Kind::Render, "none");
}

ChatTemplateError render_error_of(const std::string& src, const ojson& context = ojson::object()) {
  ChatTemplate t(src);
  try {
    t.render(context);
  } catch (const ChatTemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no render error for " << show(src);
  return ChatTemplateError(ChatTemplateError::Kind::Syntax, "none");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameTheLine) {
  const auto e = syntax_error_of("line 1\nline 2 {% if x %}\nline 3\n{% endfor %}\n");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
  EXPECT_EQ(e.line(), 4);
  EXPECT_NE(std::string(e.what()).find("line 4"), std::string::npos) << e.what();

  const auto f = syntax_error_of("a\nb\n{{ messages | no_such_filter }}");
  EXPECT_EQ(f.line(), 3);
  EXPECT_NE(f.message().find("no_such_filter"), std::string::npos);

  EXPECT_EQ(syntax_error_of("{{ x is no_such_test }}").kind(), ChatTemplateError::Kind::Syntax);
  EXPECT_EQ(syntax_error_of("{% for x in y %}").line(), 1);
  EXPECT_EQ(syntax_error_of("\n\n{{ 'abc }}").line(), 3);
  EXPECT_EQ(syntax_error_of("{% break %}").kind(), ChatTemplateError::Kind::Syntax);
  EXPECT_EQ(syntax_error_of("{% macro m() %}{% break %}{% endmacro %}").kind(), ChatTemplateError::Kind::Syntax);
  // Inside {% if %} an unknown filter is only an error when it runs (jinja2).
  ChatTemplate lazy("{% if x %}{{ x | from_json }}{% endif %}ok");
  EXPECT_EQ(lazy.render(ojson::object()), "ok");
  EXPECT_EQ(render_error_of("{% if x %}{{ x | from_json }}{% endif %}", {{"x", 1}}).kind(), ChatTemplateError::Kind::Render);
}

TEST(ChatTemplateErrors, RenderErrorsNameTheLine) {
  const auto e = render_error_of("ok\n{{ messages[0].content.upper() }}\n", {{"messages", ojson::array()}});
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Render);
  EXPECT_EQ(e.line(), 2);
  const auto u = render_error_of("{% for m in messages %}\n{{ m.missing.deeper }}\n{% endfor %}",
                                 {{"messages", ojson::array({ojson::object()})}});
  EXPECT_EQ(u.line(), 2);
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessage) {
  const auto e = render_error_of("{{ raise_exception('Conversation roles must alternate user/assistant') }}");
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Raised);
  EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant");
  // It is a strata::Error, as every user-facing failure.
  EXPECT_THROW(ChatTemplate("{{ raise_exception('x') }}").render(ojson::object()), Error);
}

TEST(ChatTemplateErrors, SandboxForbidsMutation) {
  const auto e = render_error_of("{% set l = [] %}{{ l.append(1) }}");
  EXPECT_NE(e.message().find("unsafe"), std::string::npos) << e.what();
  EXPECT_EQ(ChatTemplate("{% set l = [1, 2] %}{{ l.pop() }}{{ l }}").render(ojson::object()), "2[1]");
}

TEST(ChatTemplateErrors, ContextMustBeAnObject) {
  ChatTemplate t("x");
  EXPECT_THROW(t.render(ojson::array()), ChatTemplateError);
  EXPECT_THROW(t.render(nlohmann::json(3)), ChatTemplateError);
}

// ---------------------------------------------------------------- API

TEST(ChatTemplateApi, KeyOrderFollowsTheContext) {
  ChatTemplate t("{{ tools | tojson }}");
  const ojson ordered = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}]})");
  EXPECT_EQ(t.render(ordered), R"([{"type": "function", "function": {"name": "f"}}])");
  // nlohmann::json keeps keys sorted; the template sees them that way.
  EXPECT_EQ(t.render(nlohmann::json::parse(ordered.dump())), R"([{"function": {"name": "f"}, "type": "function"}])");
}

TEST(ChatTemplateApi, UndefinedIsNotNone) {
  ChatTemplate t("{{ tools is defined }} {{ tools is none }} {% if tools %}T{% else %}F{% endif %}");
  EXPECT_EQ(t.render(ojson::object()), "False False F");
  EXPECT_EQ(t.render(ojson{{"tools", nullptr}}), "True True F");
}

TEST(ChatTemplateApi, ClockIsInjectable) {
  ChatTemplate t("{{ strftime_now('%d %b %Y') }}");
  t.set_clock(fixed_clock);
  EXPECT_EQ(t.render(ojson::object()), "15 Jan 2025");
  t.set_clock(nullptr);  // back to the wall clock
  EXPECT_EQ(t.render(ojson::object()).size(), 11u);
}

TEST(ChatTemplateApi, RendersConcurrently) {
  ChatTemplate t(read_file(fixtures() / "Qwen-Qwen3-0.6B.jinja"));
  const ojson ctx = {{"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}, {"add_generation_prompt", true}};
  const std::string want = t.render(ctx);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k)
        if (t.render(ctx) != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// ---------------------------------------------------------------- robustness

ojson rich_context() {
  const ojson& doc = load("cases.json");
  for (const ojson& c : doc.at("cases"))
    if (c.at("name") == "Qwen3-Coder/tool_call_with_content/agp=1") return c.at("context");
  return ojson::object();
}

// Renders `src`; anything but success or a strata::Error fails the test.
void must_not_crash(const std::string& src, const ojson& context, const ChatTemplate::Limits& limits) {
  try {
    ChatTemplate t(src);
    t.set_clock(fixed_clock);
    t.set_limits(limits);
    (void)t.render(context);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-strata exception " << e.what() << " for " << show(src.substr(0, 200));
  }
}

TEST(ChatTemplateRobustness, TruncatedAndMutatedTemplates) {
  std::mt19937 rng(1234);
  const ojson context = rich_context();
  ChatTemplate::Limits limits;
  limits.max_steps = 200000;
  int runs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& entry : fs::directory_iterator(fixtures())) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string src = read_file(entry.path());
    for (int k = 0; k < 150; ++k) {
      const std::size_t cut = std::uniform_int_distribution<std::size_t>(0, src.size())(rng);
      must_not_crash(src.substr(0, cut), context, limits);
      std::string mutated = src;
      const int edits = std::uniform_int_distribution<int>(1, 6)(rng);
      for (int e = 0; e < edits; ++e) {
        const std::size_t pos = std::uniform_int_distribution<std::size_t>(0, mutated.size() - 1)(rng);
        switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
          case 0: mutated.erase(pos, std::uniform_int_distribution<std::size_t>(1, 20)(rng)); break;
          case 1: mutated.insert(pos, 1, "{}%#-+()[]|.'\"~*\n"[std::uniform_int_distribution<int>(0, 16)(rng)]); break;
          case 2: mutated[pos] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng)); break;
          default: {
            const std::size_t from = std::uniform_int_distribution<std::size_t>(0, src.size() - 1)(rng);
            mutated.insert(pos, src.substr(from, std::uniform_int_distribution<std::size_t>(1, 40)(rng)));
          }
        }
        if (mutated.empty()) mutated = "x";
      }
      must_not_crash(mutated, context, limits);
      runs += 2;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[chat templates] " << runs << " truncated / mutated templates in " << secs << " s, none crashed\n";
  EXPECT_GE(runs, 3000);
}

TEST(ChatTemplateRobustness, NestingAndRunawayWorkAreBounded) {
  const ojson ctx = ojson::object();
  ChatTemplate::Limits limits;
  limits.max_steps = 100000;
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::vector<std::string> hostile = {
      "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}",
      "{{ " + repeat("[", 100000) + " }}",
      "{{ 1" + repeat(" + 1", 100000) + " }}",
      "{{ 'x'" + repeat("|upper", 100000) + " }}",
      "{{ x" + repeat(".a", 100000) + " }}",
      "{{ " + repeat("not ", 100000) + "x }}",
      "{{ " + repeat("-", 100000) + "1 }}",
      repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000),
      repeat("{% for i in [1] %}", 5000),
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      "{{ 'x' * 1000000000 }}",
      "{{ [1] * 1000000000 }}",
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
      "{% set ns = namespace(x=none) %}{% set ns.x = ns %}{{ ns }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{{ range(10**9) }}",
      "{{ 2 ** 64 }}",
      "{{ '%999999999d' % 1 }}",
      "{{ '{:999999999}'.format(1) }}",
      "{{ 'a'.center(10**12) }}",
      "{{ 'é'|tojson(indent=10**12) }}",
  };
  for (const std::string& src : hostile) {
    const auto start = std::chrono::steady_clock::now();
    must_not_crash(src, ctx, limits);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(secs, 10.0) << show(src.substr(0, 80));
  }
  // Each of these is an error, not a result.
  EXPECT_THROW(ChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(ctx), ChatTemplateError);
  EXPECT_THROW(ChatTemplate("{{ " + repeat("[", 100000) + " }}"), ChatTemplateError);
  ChatTemplate loops("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  loops.set_limits(limits);
  EXPECT_THROW(loops.render(ctx), ChatTemplateError);
}

// The parser bounds a template's own nesting, but recursion multiplies it:
// a macro calling itself from inside 200 nested ifs, a filter chain 300
// long around a recursive call, a recursive loop calling loop() on a fresh
// list forever. Each overflowed the C++ stack (a segfault) before
// RenderLimits::max_nesting; now each is one render error.
TEST(ChatTemplateRobustness, RecursionThroughMacrosAndLoopsCannotOverflowTheStack) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::vector<std::string> hostile = {
      "{% macro m(n) %}" + repeat("{% if true %}", 200) + "{{ m(n) }}" + repeat("{% endif %}", 200) +
          "{% endmacro %}{{ m(1) }}",
      "{% macro m(n) %}{{ m(n)" + repeat("|string", 300) + " }}{% endmacro %}{{ m(1) }}",
      "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
  };
  for (const std::string& src : hostile) {
    SCOPED_TRACE(src.substr(0, 60));
    testing::expect_bounded_error([&] { (void)ChatTemplate(src).render(ojson::object()); }, "chat template",
                                  "maximum recursion depth exceeded", 10);
  }
  // Recursion a real template does (a JSON schema walked by a macro) stays
  // well inside the bound.
  ChatTemplate walk("{% macro w(v, d) %}{% if v is mapping %}{% for k in v %}{{ k }}({{ w(v[k], d + 1) }}){% endfor %}"
                    "{% else %}{{ d }}{% endif %}{% endmacro %}{{ w(schema, 0) }}");
  ojson schema = 1;
  for (int i = 0; i < 60; ++i) schema = ojson{{"p", schema}};
  EXPECT_EQ(walk.render(ojson{{"schema", schema}}), repeat("p(", 60) + "60" + repeat(")", 60));
}

TEST(ChatTemplateRobustness, MalformedUtf8PassesThrough) {
  ChatTemplate t("[{{ s }}|{{ s|length }}|{{ s[::-1]|length }}|{{ s|tojson|length > 0 }}]");
  ojson ctx;
  ctx["s"] = std::string("a\xff\xc3(b");
  // nlohmann refuses to dump invalid UTF-8 but holds it; the template passes it on.
  const std::string out = t.render(ctx);
  EXPECT_EQ(out.substr(0, 7), std::string("[a\xff\xc3(b|"));
}

}  // namespace
}  // namespace strata
