//===- TestSupport.h - Helpers shared by every unit test --------*- C++ -*-===//
//
// What many tests check the same way: the error a call refuses with.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <gtest/gtest.h>

#include <concepts>
#include <string>

namespace anefit::test {

/// The message of the InputError `fn` throws, or "" if it returns. Every
/// message must be one line (file, place, expected vs found); that is
/// checked here for each error a test looks at. Any other exception
/// escapes and fails the test.
template <std::invocable Fn> std::string errorOf(Fn &&fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const InputError &e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "a message of more than one line: " << what;
    return what;
  }
  return "";
}

} // namespace anefit::test
