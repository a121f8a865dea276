//===- Tokenizer.cpp - Byte-level BPE from a tokenizer.json ---------------===//
#include "io/Tokenizer.h"

#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <limits>

namespace anefit {
namespace {

using json = nlohmann::json;

/// A tokenizer.json larger than this is not a tokenizer (ours: Llama 3's is
/// 9 MB, the largest vocabularies' under 40 MB).
constexpr uint64_t kMaxTokenizerBytes = uint64_t(128) << 20;
/// The byte-level alphabet: byte b is written as code point kByteChar[b]
/// (printable Latin-1 bytes as themselves, the others from U+0100 on).
std::array<uint32_t, 256> byteChars() {
  std::array<uint32_t, 256> out{};
  std::array<bool, 256> printable{};
  for (int b = 0; b < 256; ++b)
    printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b)
    out[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
  return out;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The code point at `text[i]` and its length in bytes; a byte that does
/// not start valid UTF-8 is taken alone (as U+FFFD, a letter).
std::pair<uint32_t, size_t> codePointAt(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > text.size())
    return {0xFFFD, 1};
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80)
      return {0xFFFD, 1};
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  return {cp, n};
}

bool isSpace(uint32_t cp) {
  return cp == ' ' || (cp >= '\t' && cp <= '\r') || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool isNumber(uint32_t cp) {
  return (cp >= '0' && cp <= '9') || cp == 0xB2 || cp == 0xB3 || cp == 0xB9 ||
         (cp >= 0xBC && cp <= 0xBE);
}

/// \p{L}: exact for ASCII and Latin-1; above, every code point that is not a
/// space, a number or general punctuation (U+2010-U+205E) counts.
bool isLetter(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp < 0x100)
    return cp == 0xAA || cp == 0xB5 || cp == 0xBA || (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7);
  return !isSpace(cp) && !isNumber(cp) && !(cp >= 0x2010 && cp <= 0x205E);
}

/// A cursor over the code points of one piece of text.
struct Scan {
  std::string_view s;
  /// The code point at byte `i` (0 past the end) and its length.
  uint32_t at(size_t i) const { return i < s.size() ? codePointAt(s, i).first : 0; }
  size_t len(size_t i) const { return codePointAt(s, i).second; }
  bool end(size_t i) const { return i >= s.size(); }
  /// The end of the run of code points from `i` that satisfy `pred`, at
  /// most `most` of them.
  template <class Pred>
  size_t run(size_t i, Pred pred, size_t most = std::numeric_limits<size_t>::max()) const {
    for (size_t n = 0; !end(i) && n < most && pred(at(i)); ++n)
      i += len(i);
    return i;
  }
};

/// The length of a contraction ('s 't 're 've 'm 'll 'd) at `i`, 0 if none.
size_t contraction(const Scan &sc, size_t i, bool anyCase) {
  if (sc.at(i) != '\'')
    return 0;
  auto lower = [&](size_t k) {
    uint32_t c = sc.at(k);
    return anyCase && c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  uint32_t a = lower(i + 1), b = lower(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

/// \s+(?!\S) then \s+: a whitespace run, less its last code point when a
/// non-space follows and the run is longer than one.
size_t spaceRun(const Scan &sc, size_t i) {
  size_t e = sc.run(i, isSpace);
  if (e == i)
    return 0;
  if (!sc.end(e)) {
    size_t last = i;
    for (size_t k = i; k < e; k += sc.len(k))
      last = k;
    if (last > i)
      return last - i;
  }
  return e - i;
}

bool notSpaceLetterNumber(uint32_t c) { return !isSpace(c) && !isLetter(c) && !isNumber(c); }

/// GPT-2's pattern at `i`:
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2Match(const Scan &sc, size_t i) {
  if (size_t n = contraction(sc, i, false))
    return n;
  size_t j = sc.at(i) == ' ' ? i + 1 : i;
  for (auto cls : {isLetter, isNumber, notSpaceLetterNumber}) {
    size_t e = sc.run(j, cls);
    if (e > j)
      return e - i;
  }
  return spaceRun(sc, i);
}

/// Llama 3's pattern at `i` (Qwen 2's with `digits` 1):
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
///   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3Match(const Scan &sc, size_t i, size_t digits) {
  if (size_t n = contraction(sc, i, true))
    return n;
  uint32_t c = sc.at(i);
  if (c != '\r' && c != '\n' && !isLetter(c) && !isNumber(c)) {
    size_t e = sc.run(i + sc.len(i), isLetter);
    if (e > i + sc.len(i))
      return e - i;
  }
  if (size_t e = sc.run(i, isLetter); e > i)
    return e - i;
  if (size_t e = sc.run(i, isNumber, digits); e > i)
    return e - i;
  size_t j = c == ' ' ? i + 1 : i;
  if (size_t e = sc.run(j, notSpaceLetterNumber); e > j)
    return sc.run(e, [](uint32_t x) { return x == '\r' || x == '\n'; }) - i;
  // \s*[\r\n]+: a whitespace run up to its last line break.
  size_t e = sc.run(i, isSpace), lastBreak = 0;
  for (size_t k = i; k < e; k += sc.len(k))
    if (sc.at(k) == '\r' || sc.at(k) == '\n')
      lastBreak = k + 1;
  if (lastBreak)
    return lastBreak - i;
  return spaceRun(sc, i);
}

[[noreturn]] void unsupported(const std::string &origin, const std::string &place,
                              const std::string &found) {
  failExpected(origin, place,
               "a byte-level BPE tokenizer (model BPE; pre-tokenizer ByteLevel, Digits, or Split "
               "with the GPT-2 or Llama 3 pattern; normalizer none or NFC)",
               found);
}

std::string typeOf(const json &j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : j.dump().substr(0, 60);
}

} // namespace

Tokenizer Tokenizer::read(const std::string &path) {
  InputOptions in;
  in.maxBytes = kMaxTokenizerBytes;
  std::vector<uint8_t> bytes = readFileBytes(path, in);
  return parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()), path);
}

Tokenizer Tokenizer::parse(std::string_view text, const std::string &origin) {
  json j = parseJson(text, origin);
  if (j.is_discarded() || !j.is_object())
    failExpected(origin, "", "a tokenizer.json (a JSON object)", "text that is not one");
  Tokenizer t;
  t.origin_ = origin;
  const json &model = j["model"];
  if (!model.is_object() || typeOf(model) != "BPE")
    unsupported(origin, "model", "'" + typeOf(model) + "'");
  if (model.value("byte_fallback", false))
    unsupported(origin, "model.byte_fallback", "true (a SentencePiece-style BPE)");
  const json &norm = j.contains("normalizer") ? j["normalizer"] : json();
  if (!norm.is_null() && typeOf(norm) != "NFC")
    unsupported(origin, "normalizer", "'" + typeOf(norm) + "'");

  // Pre-tokenizers: Digits, Split and ByteLevel, alone or in a Sequence.
  const json &pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  std::vector<json> steps;
  if (typeOf(pre) == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
    steps.assign(pre["pretokenizers"].begin(), pre["pretokenizers"].end());
  else
    steps.push_back(pre);
  bool byteLevel = false;
  for (const json &p : steps) {
    std::string type = typeOf(p);
    if (type == "ByteLevel") {
      byteLevel = true;
      if (p.value("add_prefix_space", false))
        unsupported(origin, "pre_tokenizer.add_prefix_space", "true");
    } else if (type == "Digits") {
      t.splitDigits_ = p.value("individual_digits", false);
    } else if (type == "Split") {
      const json &pat = p.contains("pattern") ? p["pattern"] : json();
      std::string regex = pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()
                              ? pat["Regex"].get<std::string>()
                              : "";
      if (regex.find("\\p{N}{1,3}") != std::string::npos)
        t.pattern_ = Pattern::Llama3;
      else if (regex.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos)
        t.pattern_ = Pattern::Llama3, t.digitGroup_ = 1;
      else
        unsupported(origin, "pre_tokenizer.Split.pattern", "'" + regex.substr(0, 60) + "'");
    } else {
      unsupported(origin, "pre_tokenizer", "'" + type + "'");
    }
  }
  if (!byteLevel)
    unsupported(origin, "pre_tokenizer", "no ByteLevel step");
  t.ignoreMerges_ = model.value("ignore_merges", false);

  const json &vocab = model["vocab"];
  if (!vocab.is_object())
    failExpected(origin, "model.vocab", "an object of token -> id", typeOf(vocab));
  auto addToken = [&](const std::string &token, const json &idj, const std::string &place) {
    if (!idj.is_number_integer() || idj.get<int64_t>() < 0 || idj.get<int64_t>() >= (1 << 24))
      failExpected(origin, place, "an id from 0 to 2^24", idj.dump().substr(0, 40));
    int64_t id = idj.get<int64_t>();
    t.vocab_.emplace(token, id);
    if (static_cast<size_t>(id) >= t.byId_.size())
      t.byId_.resize(static_cast<size_t>(id) + 1);
    t.byId_[static_cast<size_t>(id)] = token;
    t.vocabSize_ = std::max(t.vocabSize_, id + 1);
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    addToken(it.key(), it.value(), "model.vocab['" + it.key().substr(0, 40) + "']");
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json &a : j["added_tokens"])
      if (a.is_object() && a.contains("id") && a.contains("content") && a["content"].is_string())
        addToken(a["content"].get<std::string>(), a["id"], "added_tokens");

  const json &merges = model["merges"];
  if (!merges.is_array())
    failExpected(origin, "model.merges", "a list of merges", typeOf(merges));
  int64_t rank = 0;
  for (const json &m : merges) {
    std::string pair;
    if (m.is_string())
      pair = m.get<std::string>();
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      pair = m[0].get<std::string>() + " " + m[1].get<std::string>();
    else
      failExpected(origin, "model.merges[" + std::to_string(rank) + "]",
                   "\"left right\" or [left, right]", m.dump().substr(0, 40));
    t.ranks_.emplace(std::move(pair), rank++);
  }
  if (t.vocab_.empty())
    failExpected(origin, "model.vocab", "at least one token", "none");
  return t;
}

std::vector<std::string_view> Tokenizer::words(std::string_view text) const {
  std::vector<std::string_view> pieces;
  // Digits(individual_digits) first: every digit is a piece of its own.
  if (splitDigits_) {
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] >= '0' && text[i] <= '9') {
        if (i > start)
          pieces.push_back(text.substr(start, i - start));
        pieces.push_back(text.substr(i, 1));
        start = i + 1;
      }
    if (start < text.size())
      pieces.push_back(text.substr(start));
  } else {
    pieces.push_back(text);
  }
  std::vector<std::string_view> out;
  for (std::string_view piece : pieces) {
    Scan sc{piece};
    for (size_t i = 0; i < piece.size();) {
      size_t n = pattern_ == Pattern::Gpt2 ? gpt2Match(sc, i) : llama3Match(sc, i, digitGroup_);
      n = std::max<size_t>(n, sc.len(i)); // every code point belongs to some word
      out.push_back(piece.substr(i, n));
      i += n;
    }
  }
  return out;
}

void Tokenizer::encodeWord(std::string_view word, std::vector<int64_t> &out) const {
  auto cached = cache_.find(std::string(word));
  if (cached != cache_.end()) {
    out.insert(out.end(), cached->second.begin(), cached->second.end());
    return;
  }
  static const std::array<uint32_t, 256> chars = byteChars();
  std::vector<std::string> symbols;
  std::string whole;
  for (unsigned char b : word) {
    std::string s;
    appendUtf8(s, chars[b]);
    whole += s;
    symbols.push_back(std::move(s));
  }
  std::vector<int64_t> ids;
  auto direct = ignoreMerges_ ? vocab_.find(whole) : vocab_.end();
  if (direct != vocab_.end()) {
    ids.push_back(direct->second);
  } else {
    // Merge the lowest-ranked adjacent pair until none is in the merges.
    while (symbols.size() > 1) {
      int64_t best = std::numeric_limits<int64_t>::max();
      size_t at = 0;
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        auto r = ranks_.find(symbols[k] + " " + symbols[k + 1]);
        if (r != ranks_.end() && r->second < best) {
          best = r->second;
          at = k;
        }
      }
      if (best == std::numeric_limits<int64_t>::max())
        break;
      symbols[at] += symbols[at + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const std::string &s : symbols) {
      auto it = vocab_.find(s);
      if (it == vocab_.end())
        failExpected(origin_, "model.vocab",
                     "every symbol the merges leave (the 256 byte symbols at least)",
                     "no token for '" + s + "'");
      ids.push_back(it->second);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  cache_.emplace(std::string(word), std::move(ids));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  for (std::string_view w : words(text))
    encodeWord(w, out);
  return out;
}

std::string Tokenizer::decode(int64_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= byId_.size())
    return "";
  static const std::array<uint32_t, 256> chars = byteChars();
  std::string out;
  const std::string &s = byId_[static_cast<size_t>(id)];
  for (size_t i = 0; i < s.size();) {
    auto [cp, n] = codePointAt(s, i);
    i += n;
    auto b = std::find(chars.begin(), chars.end(), cp);
    if (b != chars.end())
      out += static_cast<char>(b - chars.begin());
    else
      appendUtf8(out, cp); // an added token's own text
  }
  return out;
}

} // namespace anefit
