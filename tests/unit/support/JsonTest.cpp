//===- JsonTest.cpp - The JSON reader policy and writer -------------------===//
//
// Nesting is bounded before a document is built (nlohmann-json's parser,
// copy and destructor recurse: 50,000 nested arrays took the stack), strings
// are skipped whatever they hold, and what is written holds no control
// character a terminal would take (DEL and C1 included).
//
//===----------------------------------------------------------------------===//
#include "support/Json.h"

#include "TestSupport.h"
#include "support/Error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

using namespace anefit;
using anefit::test::errorOf;
using ::testing::HasSubstr;

namespace {

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(Json, DepthIsBoundedBeforeParsing) {
  EXPECT_NO_THROW(checkJsonDepth(nested(kMaxJsonDepth), "f.json"));
  EXPECT_EQ(
      errorOf([] { checkJsonDepth(nested(kMaxJsonDepth + 1), "f.json", "plan"); }),
      "f.json: plan: expected JSON nested at most 128 deep, found deeper nesting at byte 128");
  // The case that crashed: a deep first value with a key after it.
  std::string deep = "{\"a\": " + nested(50000) + ", \"b\": 1}";
  EXPECT_THAT(errorOf([&] { parseJson(deep, "obs.json"); }), HasSubstr("nested at most 128"));
  EXPECT_THAT(errorOf([&] { parseJson<nlohmann::ordered_json>(deep, "obs.json"); }),
              HasSubstr("nested at most 128"));
}

TEST(Json, BracketsInStringsDoNotCount) {
  std::string s = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  nlohmann::json j = parseJson(s, "f.json");
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[0].get<std::string>().size(), 2001u);
  // Closing brackets past the opening ones are the parser's to refuse.
  EXPECT_TRUE(parseJson("]]]" + nested(3), "f.json").is_discarded());
}

TEST(Json, WrittenTextEscapesEveryControl) {
  nlohmann::json j = {{"name", "a\x1b"
                               "b\x7f"
                               "c\xc2\x9b"
                               "d\xc2\xa0"
                               "e\xff"}};
  std::string text = dumpJson(j);
  EXPECT_EQ(text, "{\"name\":\"a\\u001bb\\u007fc\\u009bd\xc2\xa0"
                  "e\xef\xbf\xbd\"}");
  // And it reads back as the same string (the byte that is not UTF-8 aside).
  EXPECT_EQ(nlohmann::json::parse(text)["name"].get<std::string>(), "a\x1b"
                                                                    "b\x7f"
                                                                    "c\xc2\x9b"
                                                                    "d\xc2\xa0"
                                                                    "e\xef\xbf\xbd");
}

} // namespace
