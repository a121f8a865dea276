//===- Error.cpp - Errors raised by malformed user input ------------------===//
#include "support/Error.h"

namespace anefit {

InputError InputError::at(const std::string &file, const std::string &place,
                          const std::string &message) {
  std::string text;
  if (!file.empty())
    text += file + ": ";
  if (!place.empty())
    text += place + ": ";
  text += message;
  return InputError(text);
}

void failExpected(const std::string &file, const std::string &place, const std::string &expected,
                  const std::string &found) {
  throw InputError::at(file, place, "expected " + expected + ", found " + found);
}

} // namespace anefit
