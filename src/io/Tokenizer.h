//===- Tokenizer.h - Byte-level BPE from a tokenizer.json -------*- C++ -*-===//
//
// Measuring a language model on real text (perplexity, top-1) needs the
// text's token ids. This reads the Hugging Face `tokenizer.json` of the
// byte-level BPE family (GPT-2, SmolLM, Llama 3, Qwen 2: model type "BPE",
// a ByteLevel pre-tokenizer, optionally after Digits or a Split with the
// GPT-2 or Llama 3 pattern) and encodes plain text as those tokenizers do:
// the text is split into words by the pattern, each word's UTF-8 bytes are
// mapped to the byte-level alphabet, and the merges are applied lowest rank
// first. No special token is added (no BOS): the ids are the text's own.
//
// What is approximated: the patterns' \p{L} and \p{N} classes are exact
// for ASCII; every non-ASCII code point counts as a letter, except the
// Unicode spaces, which count as whitespace. Normalizers other than none
// and NFC are refused; so are other models (Unigram, WordPiece) and
// pre-tokenizers (Metaspace): one line naming what was found.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace anefit {

class Tokenizer {
public:
  /// Reads `path`. Throws InputError naming the file and the place for a
  /// malformed or unsupported tokenizer.
  static Tokenizer read(const std::string &path);
  /// Parses the text of a tokenizer.json (`origin` names it in messages).
  static Tokenizer parse(std::string_view json, const std::string &origin);

  /// The ids of `text`.
  std::vector<int64_t> encode(std::string_view text) const;
  /// The text of `id` (its bytes, decoded from the byte-level alphabet);
  /// "" for an id the vocabulary does not have.
  std::string decode(int64_t id) const;
  /// 1 + the largest id of the vocabulary and the added tokens.
  int64_t vocabSize() const { return vocabSize_; }
  const std::string &origin() const { return origin_; }

private:
  enum class Pattern { Gpt2, Llama3 };
  /// Splits `text` into the words the pattern gives.
  std::vector<std::string_view> words(std::string_view text) const;
  /// The ids of one word (merges applied to its byte-level symbols).
  void encodeWord(std::string_view word, std::vector<int64_t> &out) const;

  std::string origin_;
  Pattern pattern_ = Pattern::Gpt2;
  bool splitDigits_ = false;
  /// Llama 3 splits numbers in groups of up to 3 digits, Qwen 2 digit by digit.
  size_t digitGroup_ = 3;
  /// A word the vocabulary holds whole is one token (Llama 3).
  bool ignoreMerges_ = false;
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> byId_;
  /// "left right" -> rank (lower merges first).
  std::unordered_map<std::string, int64_t> ranks_;
  int64_t vocabSize_ = 0;
  /// Words already encoded (a text repeats its words).
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

} // namespace anefit
