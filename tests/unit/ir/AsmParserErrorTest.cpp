//===- AsmParserErrorTest.cpp - Every MIL text parse error ----------------===//
//
// Each malformed text gives one InputError "FILE:LINE:COL: message"; none
// crashes, and deeply nested input is refused instead of exhausting the stack.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"

#include "TestSupport.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <string>

using namespace anefit;

namespace {

/// The parser's one-line error for `text`, or "" if it parses.
std::string parseError(const std::string &text) {
  return test::errorOf([&] { parseModelText(text, "t.mil", nullptr); });
}

/// Wraps one op line in a function so each case shows only what matters.
std::string inMain(const std::string &opLine) {
  return "main[CoreML8](%x: (2,fp32)(Tensor)) {\n  block0() {\n    " + opLine +
         "\n  } -> (%x)\n}\n";
}

struct ErrorCase {
  const char *name;
  std::string text;
  const char *message;
};

} // namespace

TEST(AsmParserErrors, EachMessage) {
  const ErrorCase cases[] = {
      {"empty", "",
       "t.mil:1:1: expected a function such as 'main[CoreML8](...) { ... }', "
       "found end of file"},
      {"bad char", "main[CoreML8]() { $ }", "t.mil:1:19: unexpected character '$'"},
      {"control byte", std::string("main\x01"), "t.mil:1:5: unexpected character byte 1"},
      {"lone percent", inMain("% = relu()"), "t.mil:3:5: expected a value name after '%'"},
      {"unterminated string", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=\"y)"),
       "t.mil:3:44: unterminated string"},
      {"bad escape", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=\"\\q\")"),
       "t.mil:3:45: unknown escape '\\q'"},
      {"bad hex escape", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=\"\\xZZ\")"),
       "t.mil:3:45: expected two hex digits after '\\x'"},
      {"undefined value", inMain("%y: (2,fp32)(Tensor) = relu(x=%nope, name=\"y\")"),
       "t.mil:3:35: undefined value '%nope'"},
      {"missing paren", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=\"y\" foo"),
       "t.mil:3:48: expected ')', found 'foo'"},
      {"missing brace", "main[CoreML8]() {\n  block0() {\n  } -> ()\n",
       "t.mil:4:1: expected '}', found end of file"},
      {"unclosed block", "main[CoreML8]() {\n  block0() {\n",
       "t.mil:3:1: expected '}' to close the block, found end of file"},
      {"function twice", "f[CoreML8]() { b() { } -> () }\nf[CoreML8]() { b() { } -> () }",
       "t.mil:2:1: function 'f' is defined twice"},
      {"bad function name", "[CoreML8]()", "t.mil:1:1: expected a function name, found '['"},
      {"bad declaration", "main[CoreML8](x: (fp32)(Scalar)) {}",
       "t.mil:1:15: expected a value such as '%x: (1, 4, fp16)(Tensor)', found 'x'"},
      {"bad dtype", "main[CoreML8](%x: (2, fp99)(Tensor)) {}",
       "t.mil:1:23: expected a dtype such as fp16 or int32, found 'fp99'"},
      {"negative dim", "main[CoreML8](%x: (-2, fp32)(Tensor)) {}",
       "t.mil:1:20: expected a dimension (a non-negative integer, a symbol, '?' or '*'), "
       "found '-2'"},
      {"bad type", "main[CoreML8](%x: fp32) {}",
       "t.mil:1:19: expected a type such as '(1, 4, fp16)(Tensor)', found 'fp32'"},
      {"second spec without key", "main[CoreML8]() {\n  b() {\n  } -> ()\n  c() {\n  } -> ()\n}",
       "t.mil:6:1: a further block of function 'main' needs an opset key"},
      {"block output", "main[CoreML8]() {\n  b() {\n  } -> (x)\n}",
       "t.mil:3:9: expected a block output such as '%x', found 'x'"},
      {"op name not string", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=y)"),
       "t.mil:3:44: expected the op name as a string, found 'y'"},
      {"param twice", inMain("%y: (2,fp32)(Tensor) = add(x=%x, x=%x, name=\"y\")"),
       "t.mil:3:38: parameter 'x' is given twice"},
      {"attr twice", inMain("%y: (2,fp32)(Tensor) = relu(x=%x, name=\"y\")[a=1, a=2]"),
       "t.mil:3:54: attribute 'a' is given twice"},
      {"bad value", inMain("%y: (2,fp32)(Tensor) = relu(x=), name=\"y\")"),
       "t.mil:3:35: expected a value (a number, True/False, a string, a list, %name, "
       "BLOBFILE(...) or HEX(...)), found ')'"},
      {"ragged list", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=[[1], [1, 2]], name=\"y\")"),
       "t.mil:3:46: ragged nested list: its items have different shapes"},
      {"mixed list", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=[1, True], name=\"y\")"),
       "t.mil:3:40: a list mixes strings, booleans and numbers"},
      {"count mismatch", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=[1.0]:(2,fp32), name=\"y\")"),
       "t.mil:3:40: expected 2 values for (2,fp32)(Tensor), found 1"},
      {"int range", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=300:uint8, name=\"y\")"),
       "t.mil:3:40: expected an integer within the range of uint8, found '300'"},
      {"int64 overflow",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=9223372036854775808:int64, name=\"y\")"),
       "expected an integer within the range of int64, found '9223372036854775808'"},
      {"negative unsigned", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=-1:uint32, name=\"y\")"),
       "expected an integer within the range of uint32, found '-1'"},
      {"float for int", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1.5:int32, name=\"y\")"),
       "t.mil:3:40: expected an integer for int32, found '1.5'"},
      {"fp32 range", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1e39, name=\"y\")"),
       "t.mil:3:40: expected a number within the range of fp32, found '1e39'"},
      {"fp8 decimal", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1.0:fp8e4m3fn, name=\"y\")"),
       "fp8e4m3fn values must be given as HEX(\"...\") bytes"},
      {"bool expected", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1:bool, name=\"y\")"),
       "t.mil:3:40: expected True or False for bool, found '1'"},
      {"number expected", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=True:fp32, name=\"y\")"),
       "t.mil:3:40: expected a number for fp32, found 'True'"},
      {"string expected", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1:string, name=\"y\")"),
       "t.mil:3:40: expected a string for (string)(Scalar), found '1'"},
      {"dtype suffix on container",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=TUPLE(1):int32, name=\"y\")"),
       "a dtype suffix needs a literal tensor; give a full type such as ':(2,int64)'"},
      {"blob needs type",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=BLOBFILE(path=\"w\", offset=64), name=\"y\")"),
       "t.mil:3:69: expected a type suffix such as ':(4, 4, fp16)' after this constant, found ','"},
      {"blob missing offset",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=BLOBFILE(path=\"w\"):(2,fp32), name=\"y\")"),
       "expected BLOBFILE(path=\"...\", offset=N), missing offset"},
      {"blob bad key",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=BLOBFILE(file=\"w\"), name=\"y\")"),
       "t.mil:3:49: expected 'path' or 'offset', found 'file'"},
      {"blob path type",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=BLOBFILE(path=1, offset=0), name=\"y\")"),
       "expected the weight file path as a string, found '1'"},
      {"blob offset", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=BLOBFILE(path=\"w\", offset=-4)"),
       "expected a non-negative integer, found '-4'"},
      {"hex odd", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=HEX(\"abc\"):(fp16), name=\"y\")"),
       "t.mil:3:44: expected an even number of hex digits, found 3"},
      {"hex digit", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=HEX(\"zz\"):(int8), name=\"y\")"),
       "t.mil:3:44: expected a hex digit, found 'z'"},
      {"hex size", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=HEX(\"00\"):(fp16), name=\"y\")"),
       "t.mil:3:40: expected 2 bytes for (fp16)(Scalar), found 1"},
      {"hex string", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=HEX(\"00\"):(string), name=\"y\")"),
       "string tensors cannot be given as HEX bytes"},
      {"hex not string", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=HEX(12), name=\"y\")"),
       "t.mil:3:44: expected a string of hex digits, found '12'"},
      {"literal with list type",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1:List[1, (int32)(Scalar)](List), name=\"y\")"),
       "t.mil:3:40: expected a tensor type for this constant, found List[1, (int32)](List)"},
      {"tuple with tensor type",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=TUPLE(1):(int32), name=\"y\")"),
       "t.mil:3:40: expected a Tuple type for this constant, found (int32)(Scalar)"},
      {"huge shape",
       inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=[]:(100000000, 100000000, 100000000, fp32), "
              "name=\"y\")"),
       "has more elements than fit in int64"},
      {"meta key", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1{what=1}, name=\"y\")"),
       "t.mil:3:42: expected 'enc' or 'doc', found 'what'"},
      {"meta enc", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1{enc=300}, name=\"y\")"),
       "t.mil:3:46: expected an encoding number below 256, found 300"},
      {"meta doc", inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=1{doc=1}, name=\"y\")"),
       "t.mil:3:46: expected a string, found '1'"},
      {"program key", "program(foo=1)", "t.mil:1:9: expected 'version' or 'doc', found 'foo'"},
      {"program version", "program(version=\"1\")",
       "t.mil:1:17: expected an integer version, found string \"1\""},
      {"program version range", "program(version=99999999999999999999)",
       "t.mil:1:17: expected an integer, found '99999999999999999999'"},
      {"program doc", "program(doc=1)", "t.mil:1:13: expected a string, found '1'"},
      {"bad header json", "// anefit model: {oops\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected JSON after '// anefit model:', found invalid JSON"},
      {"header not object", "// anefit model: [1]\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected a JSON object after '// anefit model:'"},
      {"header key", "// anefit model: {\"x\":1}\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: unknown header key 'x'"},
      {"header spec type",
       "// anefit model: {\"specificationVersion\":\"9\"}\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected an integer for 'specificationVersion', found \"9\""},
      {"header feature kind",
       "// anefit model: "
       "{\"description\":{\"input\":[{\"name\":\"x\",\"type\":{\"kind\":\"img\"}}]}}"
       "\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: unknown feature kind 'img'"},
      {"header data type",
       "// anefit model: {\"description\":{\"input\":[{\"type\":{\"dataType\":\"FP8\"}}]}}"
       "\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: unknown dataType \"FP8\""},
      {"header range pair",
       "// anefit model: {\"description\":{\"input\":[{\"type\":{\"shapeRange\":[[1]]}}]}}"
       "\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected [lower, upper] pairs in 'shapeRange', found [1]"},
      {"header raw proto",
       "// anefit model: {\"description\":{\"input\":[{\"type\":{\"rawProto\":\"abc\"}}]}}"
       "\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected an even number of hex digits in 'rawProto'"},
      {"header metadata",
       "// anefit model: {\"description\":{\"metadata\":{\"userDefined\":{\"k\":1}}}}"
       "\nmain[CoreML8]() { b() { } -> () }",
       "t.mil:1: expected a string for 'k', found 1"},
      {"header twice", "// anefit model: {}\n// anefit model: {}\n",
       "t.mil:2:1: second '// anefit model:' header; the first is on line 1"},
  };
  for (const ErrorCase &c : cases) {
    SCOPED_TRACE(c.name);
    std::string message = parseError(c.text);
    ASSERT_FALSE(message.empty()) << "parsed without error:\n" << c.text;
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "message: " << message << "\nwanted:  " << c.message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  }
}

TEST(AsmParserErrors, DeepNestingIsRefused) {
  std::string deepList = std::string(10000, '[') + "1" + std::string(10000, ']');
  EXPECT_NE(parseError(inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=" + deepList + ", name=\"y\")"))
                .find("nesting deeper than 64 levels"),
            std::string::npos);
  std::string deepType;
  for (int i = 0; i < 10000; ++i)
    deepType += "Tuple[";
  EXPECT_NE(parseError("main[CoreML8](%x: " + deepType + ") {}").find("nesting deeper than"),
            std::string::npos);
  std::string deepTuple;
  for (int i = 0; i < 10000; ++i)
    deepTuple += "TUPLE(";
  EXPECT_NE(parseError(inMain("%y: (2,fp32)(Tensor) = add(x=%x, y=" + deepTuple)).find("nesting"),
            std::string::npos);
  // Nested blocks: each cond op opens one more level. Blocks stop at the
  // depth the protobuf writers can write (ir/Verifier.h kMaxBlockNesting).
  std::string blocks = "main[CoreML8](%p: (bool)(Scalar)) {\n b() {\n";
  for (int i = 0; i < 100; ++i)
    blocks += "%c" + std::to_string(i) + ": (bool)(Scalar) = cond(pred=%p, name=\"c\")\n t() {\n";
  EXPECT_NE(parseError(blocks).find("blocks nested deeper than 32 levels"), std::string::npos);
}

TEST(AsmParserErrors, NoCrashOnTruncations) {
  // Every prefix of a valid program either parses or raises InputError.
  std::string text = R"(// anefit model: {"specificationVersion":9,"description":{}}
program(version=1)[b=DICT("k": "v")]
main[CoreML8](%x: (1, is0, fp16)(Tensor), %k: (1, 8, fp16)(State), %l: List[?, (2,fp32)(Tensor)](List)) {
  block0() {
    %w: (4, 4, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="w")
    %c: (2,fp32)(Tensor) = cond(pred=True, name="c")[a=HEX("0000"):(fp16), b=TUPLE(1, [1.5]):Tuple[(int32)(Scalar), (1,fp32)(Tensor)](Tuple)]
      c_true() {
        %a: (2,fp32)(Tensor) = add(x=[1.0, 2.0], y=-inf{enc=1, doc="d"}, name="a")
      } -> (%a)
      c_false() {
      } -> (%a2)
  } -> (%c)
}
)";
  for (size_t n = 0; n <= text.size(); ++n) {
    try {
      parseModelText(std::string_view(text).substr(0, n), "t.mil", nullptr);
    } catch (const InputError &) {
    }
  }
  SUCCEED();
}

TEST(SplitInputFile, PartsKeepTheLineNumbersOfTheFile) {
  std::vector<std::string> parts =
      splitInputFile("a\nb\n// -----\nc\n  // -----  \r\n// -----\r\nd");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "a\nb\n");
  // The marker is line 3: c is line 4, after three blank lines.
  EXPECT_EQ(parts[1], "\n\n\nc\n  // -----  \r\n");
  EXPECT_EQ(parts[2], std::string(6, '\n') + "d\n");
  EXPECT_EQ(splitInputFile("x\n"), (std::vector<std::string>{"x\n"}));
  EXPECT_EQ(splitInputFile(""), (std::vector<std::string>{""}));
  // A part that does not parse names the line of the whole file.
  try {
    parseModelText(splitInputFile("main[CoreML8]() {\n} -> ()\n// -----\n%oops\n")[1], "t.mil",
                   nullptr);
    ADD_FAILURE() << "expected a parse error";
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("t.mil:4:"), std::string::npos) << e.what();
  }
}
