// The expert heat file (model/expert_heat.h): selection counts and the
// guesses on record, saved and loaded, the user's file refused rather than
// written over, a hint's damage ignored.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "model/expert_heat.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(Heat, PersistsAndPinsTheHottest) {
  testfiles::TempDir tmp("strata-heat");
  ExpertHeat h(3, 8);
  h.add(1, 5, 10);
  h.add(2, 0, 3);
  h.save(tmp / "h.json", "m");
  const ExpertHeat back = ExpertHeat::load(tmp / "h.json", "m", 3, 8);
  EXPECT_EQ(back.count(1, 5), 10);
  EXPECT_EQ(back.hottest(1), (std::vector<std::pair<int64_t, int64_t>>{{1, 5}}));
  // Heat of another model is ignored, not an error.
  EXPECT_EQ(ExpertHeat::load(tmp / "h.json", "other", 3, 8).total(), 0);
  EXPECT_THROW(ExpertHeat::load(tmp / "missing.json", "", 3, 8, /*strict=*/true), Error);
  // A file the user named (--heat FILE), which the run writes when it ends:
  // missing is a fresh start; this model's heat is read; anything else is an
  // error rather than written over.
  EXPECT_EQ(ExpertHeat::load_given(tmp / "new.json", "m", 3, 8).total(), 0);
  EXPECT_EQ(ExpertHeat::load_given(tmp / "h.json", "m", 3, 8).count(1, 5), 10);
  const auto refused = [&](const fs::path& p, const std::string& model, const std::string& phrase) {
    try {
      ExpertHeat::load_given(p, model, 3, 8);
      ADD_FAILURE() << p << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  // Another model's heat (the weights that were there before) and an empty
  // file start afresh, as the default path does.
  EXPECT_EQ(ExpertHeat::load_given(tmp / "h.json", "other", 3, 8).total(), 0);
  std::ofstream(tmp / "empty.json").close();
  EXPECT_EQ(ExpertHeat::load_given(tmp / "empty.json", "m", 3, 8).total(), 0);
  std::ofstream(tmp / "typed.json") << R"({"version": "1", "model": 7, "layers": {}})";
  refused(tmp / "typed.json", "m", "not a strata heat file");
  std::ofstream(tmp / "notes.txt") << "my notes";
  refused(tmp / "notes.txt", "m", "not a strata heat file");
  std::ofstream(tmp / "config.json") << R"({"hidden_size": 64})";
  refused(tmp / "config.json", "m", "not a strata heat file");
  EXPECT_THROW(ExpertHeat::load_given(tmp / "h.json", "m", 4, 8), Error);  // another shape
}

// A decode token's guesses on record travel with the heat: saved, loaded
// (also as the user's --heat file), added up over runs; a record that
// cannot be counts is refused where the file is the user's and left out
// (the counts kept) where it is a hint.
TEST(Heat, KeepsTheGuessesOnRecord) {
  testfiles::TempDir tmp("strata-heat-guesses");
  ExpertHeat h(3, 8);
  h.add(1, 5, 10);
  EXPECT_EQ(h.guesses().predicted, 0);
  h.save(tmp / "none.json", "m");
  std::ifstream none(tmp / "none.json");
  const std::string text{std::istreambuf_iterator<char>(none), std::istreambuf_iterator<char>()};
  EXPECT_EQ(text.find("guesses"), std::string::npos);  // none yet: none written
  h.add_guesses(40, 0);
  h.add_guesses(0, 25);
  h.save(tmp / "h.json", "m");
  ExpertHeat back = ExpertHeat::load(tmp / "h.json", "m", 3, 8);
  EXPECT_EQ(back.guesses().predicted, 40);
  EXPECT_EQ(back.guesses().right, 25);
  EXPECT_EQ(ExpertHeat::load_given(tmp / "h.json", "m", 3, 8).guesses().right, 25);
  back.merge(h);
  EXPECT_EQ(back.guesses().predicted, 80);
  EXPECT_EQ(back.guesses().right, 50);
  // The wrong ones by expert, too (files without them load with none).
  h.add_wrong(1, 2, 9);
  h.add_wrong(2, 7, 6);
  h.save(tmp / "wrong.json", "m");
  for (const ExpertHeat& w :
       {ExpertHeat::load(tmp / "wrong.json", "m", 3, 8), ExpertHeat::load_given(tmp / "wrong.json", "m", 3, 8)}) {
    EXPECT_EQ(w.wrong(1, 2), 9);
    EXPECT_EQ(w.wrong(2, 7), 6);
    EXPECT_EQ(w.wrong_total(), 15);
  }
  EXPECT_EQ(back.wrong_total(), 0);
  back.merge(h);
  EXPECT_EQ(back.wrong(1, 2), 9);
  for (const char* bad : {R"("guesses": {"predicted": 4, "right": 5})", R"("guesses": {"predicted": -1, "right": 0})",
                          R"("guesses": {"predicted": "4", "right": 1})", R"("guesses": [4, 1])",
                          R"("guesses": {"predicted": 4, "right": 1, "wrong": [[], [1]]})",
                          R"("guesses": {"predicted": 4, "right": 1, "wrong": [[], [0, 0, 0, 0, 0, -3, 0, 0], []]})",
                          R"("guesses": {"predicted": 4, "right": 1, "wrong": {"1": 3}})",
                          R"("guesses": {"predicted": 4, "right": 1, "wrong": [[], [0, 0, 0, 0, 0, 4, 0, 0], []]})"}) {
    SCOPED_TRACE(bad);
    std::ofstream(tmp / "bad.json") << R"({"version": 1, "model": "m", "layers": [[], [0, 0, 0, 0, 0, 7, 0, 0], []], )"
                                    << bad << "}";
    EXPECT_THROW(ExpertHeat::load_given(tmp / "bad.json", "m", 3, 8), Error);
    const ExpertHeat hint = ExpertHeat::load(tmp / "bad.json", "m", 3, 8);
    if (std::string(bad).find("wrong") == std::string::npos) {
      EXPECT_EQ(hint.guesses().predicted, 0);
    }
    EXPECT_EQ(hint.wrong_total(), 0);  // a wrong record left out whole
    EXPECT_EQ(hint.count(1, 5), 7);
  }
  // Wrong guesses without totals that hold them are left out of a hint.
  std::ofstream(tmp / "orphan.json")
      << R"({"version": 1, "model": "m", "layers": [[], [0, 0, 0, 0, 0, 7, 0, 0], []], )"
      << R"("guesses": {"right": 1, "wrong": [[], [0, 0, 0, 0, 0, 1, 0, 0], []]}})";
  EXPECT_EQ(ExpertHeat::load(tmp / "orphan.json", "m", 3, 8).wrong_total(), 0);
}

// A heat file without its arrays, or with fields of the wrong type, is
// refused where it is the user's and ignored as a hint: never a crash or an
// exception of the JSON library.
TEST(Heat, MissingOrMistypedFieldsAreRefusedOrIgnored) {
  testfiles::TempDir tmp("strata-heat-fields");
  for (const char* text : {R"({"version": 1, "model": "m"})", R"({"version": "1", "model": "m", "layers": []})",
                           R"({"version": 1, "model": "m", "layers": [[], "x", []]})",
                           R"({"version": 1, "model": "m", "layers": {"0": []}})"}) {
    SCOPED_TRACE(text);
    std::ofstream(tmp / "h.json") << text;
    EXPECT_EQ(ExpertHeat::load(tmp / "h.json", "m", 3, 8).total(), 0);
    EXPECT_THROW(ExpertHeat::load(tmp / "h.json", "m", 3, 8, /*strict=*/true), Error);
    EXPECT_THROW(ExpertHeat::load_given(tmp / "h.json", "m", 3, 8), Error);
  }
}

}  // namespace
}  // namespace strata
