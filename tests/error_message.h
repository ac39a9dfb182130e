#pragma once
// Checking the errors that bad input gets: one line, naming what was read.
#include <gtest/gtest.h>

#include <string>

#include "util/error.h"

namespace strata::testfiles {

// The message of the strata::Error that `open()` throws, checked to be one
// line starting with `prefix` (e.g. the file's path and ": "); "" and a
// test failure if nothing is thrown.
template <class Open>
std::string error_message(Open&& open, const std::string& prefix = "") {
  try {
    open();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for bad input";
  return "";
}

inline void expect_phrase(const std::string& msg, const std::string& phrase) {
  EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nexpected phrase: " << phrase;
}

}  // namespace strata::testfiles
