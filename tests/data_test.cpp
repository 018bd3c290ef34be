// The data path on small hand-worked examples: word and char tokenizers
// (splitting, vocabulary order, decode, errors), the sequential and random
// loaders (window order, wrap-around, rank sharding, resume) and the
// train/validation split. Expected values are written out literally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "model/dataloader.h"
#include "model/rng.h"
#include "model/tokenizer.h"
#include "train/data/corpus.h"
#include "train/data/prepare.h"
#include "train/data/shards.h"
#include "train/run/trainer.h"
#include "util/files.h"
#include "util/hash.h"
#include "util/json.h"

namespace gpt2 {
namespace {

using Ids = std::vector<int32_t>;
using Vocab = std::vector<std::string>;

// Runs f and returns the message of the E it throws ("" if none, so the
// EXPECT on the message fails visibly).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------- word tokenizer

TEST(WordTokenizer, LetterDigitRunsAreOneToken) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "abc123 def");
  EXPECT_EQ(tok.vocab(), (Vocab{"abc123", "def", "[EOS]"}));
  EXPECT_EQ(tok.encode("abc123 def"), (Ids{0, 1}));
  EXPECT_EQ(tok.size(), 3);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST(WordTokenizer, PiecesConcatenateToTheDecodedText) {
  // What generate streams, a piece per token, is what decode gives for the whole sequence.
  for (TokenizerKind kind : {TokenizerKind::kWord, TokenizerKind::kChar}) {
    const std::string text = "the cat, said \"hello\" to 2 dogs. The end!";
    const Tokenizer tok = Tokenizer::build(kind, text);
    const std::vector<int32_t> ids = tok.encode(text);
    std::string streamed;
    for (size_t i = 0; i < ids.size(); ++i) streamed += tok.piece(ids[i], i);
    EXPECT_EQ(streamed, tok.decode(ids));
  }
}

TEST(WordTokenizer, PunctuationIsOneTokenPerByte) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "Hello, world! don't... x");
  EXPECT_EQ(tok.vocab(), (Vocab{"Hello", ",", "world", "!", "don", "'", "t", ".", "x", "[EOS]"}));
  EXPECT_EQ(tok.encode("don't"), (Ids{4, 5, 6}));
  EXPECT_EQ(tok.encode("..."), (Ids{7, 7, 7}));
  EXPECT_EQ(tok.encode("Hello,world!"), (Ids{0, 1, 2, 3}));
}

TEST(WordTokenizer, CaseIsKept) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "The the THE");
  EXPECT_EQ(tok.vocab(), (Vocab{"The", "the", "THE", "[EOS]"}));
  EXPECT_EQ(tok.encode("the The"), (Ids{1, 0}));
}

TEST(WordTokenizer, WhitespaceIsDropped) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "a\tb\nc  \r\n d\v\fe");
  EXPECT_EQ(tok.vocab(), (Vocab{"a", "b", "c", "d", "e", "[EOS]"}));
  EXPECT_EQ(tok.encode("\n\n a  b\t"), (Ids{0, 1}));
  EXPECT_EQ(tok.encode(" \t\n"), Ids{});
}

TEST(WordTokenizer, VocabularyInFirstOccurrenceOrderEosLast) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "b a b c a");
  EXPECT_EQ(tok.vocab(), (Vocab{"b", "a", "c", "[EOS]"}));
  EXPECT_EQ(tok.token(3), "[EOS]");
  Tokenizer empty = Tokenizer::build(TokenizerKind::kWord, "  \n");
  EXPECT_EQ(empty.vocab(), (Vocab{"[EOS]"}));
}

TEST(WordTokenizer, TokenizeCorpusAppendsEos) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "a b a");
  EXPECT_EQ(tokenize_corpus(tok, "a b a", "corpus.txt"), (Ids{0, 1, 0, 2}));
}

TEST(WordTokenizer, NonAsciiBytesAreTokensOfTheirOwn) {
  // "café" is c a f 0xC3 0xA9 in UTF-8: the ASCII run "caf", then one token per
  // byte of the two-byte sequence. Decode puts no space before either byte, so
  // the word comes back whole.
  const std::string text = "caf\xc3\xa9 au lait";
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, text);
  EXPECT_EQ(tok.vocab(), (Vocab{"caf", "\xc3", "\xa9", "au", "lait", "[EOS]"}));
  EXPECT_EQ(tok.encode(text), (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(WordTokenizer, DecodeJoinsWithSpacesButNoneBeforePunctuation) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "Hello , world !");
  EXPECT_EQ(tok.vocab(), (Vocab{"Hello", ",", "world", "!", "[EOS]"}));
  EXPECT_EQ(tok.decode(Ids{0, 1, 2, 3}), "Hello, world!");
  EXPECT_EQ(tok.decode(Ids{1, 0}), ", Hello");  // no space at the start
  EXPECT_EQ(tok.decode(Ids{0, 4}), "Hello [EOS]");
  EXPECT_EQ(tok.decode(Ids{}), "");
}

TEST(WordTokenizer, RoundTripOfASentence) {
  const std::string text = "the cat sat. the dog, too!";
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, text);
  EXPECT_EQ(tok.vocab(), (Vocab{"the", "cat", "sat", ".", "dog", ",", "too", "!", "[EOS]"}));
  const Ids ids = tok.encode(text);
  EXPECT_EQ(ids, (Ids{0, 1, 2, 3, 0, 4, 5, 6, 7}));
  EXPECT_EQ(tok.decode(ids), "the cat sat. the dog, too!");
}

TEST(WordTokenizer, DecodeIsLossyAfterAnApostrophe) {
  // The reproduced project's join rule only looks at the token being added:
  // "don't" -> don ' t -> "don' t". Kept as is, for equivalence.
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "don't");
  EXPECT_EQ(tok.decode(tok.encode("don't")), "don' t");
}

TEST(WordTokenizer, UnknownTokenNamesSourceLineAndColumn) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "the cat");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { tok.encode("the cat\nthe dog", "prompt.txt"); }),
            "prompt.txt:2:5: token 'dog' is not in the vocabulary (3 tokens)");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { tok.encode("cat!"); }),
            "<text>:1:4: token '!' is not in the vocabulary (3 tokens)");
}

TEST(WordTokenizer, TokenIdOutOfRange) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "a b c d");
  EXPECT_EQ(error_of<std::out_of_range>([&] { tok.token(5); }),
            "token id 5 is out of range for a vocabulary of 5 tokens");
  EXPECT_THROW(tok.token(-1), std::out_of_range);
  EXPECT_THROW(tok.decode(Ids{0, 7}), std::out_of_range);
}

// ---------------------------------------------------------------- char tokenizer

TEST(CharTokenizer, EveryByteIsATokenSpacesAndNewlinesIncluded) {
  const std::string text = "ab a\nb";
  Tokenizer tok = Tokenizer::build(TokenizerKind::kChar, text);
  EXPECT_EQ(tok.vocab(), (Vocab{"a", "b", " ", "\n", "[EOS]"}));
  EXPECT_EQ(tok.encode(text), (Ids{0, 1, 2, 0, 3, 1}));
  EXPECT_EQ(tok.decode(Ids{1, 2, 2, 0}), "b  a");
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tokenize_corpus(tok, "ba", "x"), (Ids{1, 0, 4}));
}

TEST(CharTokenizer, RoundTripIsExact) {
  const std::string text = "  Hi,\tthere!\r\n\n don't...  caf\xc3\xa9 ";
  Tokenizer tok = Tokenizer::build(TokenizerKind::kChar, text);
  EXPECT_EQ(tok.encode(text).size(), text.size());
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(CharTokenizer, UnknownByteIsEscapedInTheMessage) {
  Tokenizer tok = Tokenizer::build(TokenizerKind::kChar, "ab");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { tok.encode("ab\nabc", "p"); }),
            "p:1:3: token '\\n' is not in the vocabulary (3 tokens)");
  Tokenizer tok2 = Tokenizer::build(TokenizerKind::kChar, "ab\n");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { tok2.encode("ab\nabc", "p"); }),
            "p:2:3: token 'c' is not in the vocabulary (4 tokens)");
}

// ---------------------------------------------------------------- fixed vocabularies

TEST(FromVocab, AcceptsAValidVocabulary) {
  Tokenizer tok = Tokenizer::from_vocab(TokenizerKind::kWord, {"x", "y", ",", "[EOS]"});
  EXPECT_EQ(tok.encode("y x, y"), (Ids{1, 0, 2, 1}));
  EXPECT_EQ(tok.eos_id(), 3);
  Tokenizer built = Tokenizer::build(TokenizerKind::kWord, "x y,");
  EXPECT_EQ(built.vocab(), tok.vocab());
  EXPECT_EQ(built.vocab_hash(), tok.vocab_hash());
}

TEST(FromVocab, DefaultIsAnEosOnlyWordTokenizer) {
  Tokenizer tok;
  EXPECT_EQ(tok.kind(), TokenizerKind::kWord);
  EXPECT_EQ(tok.vocab(), (Vocab{"[EOS]"}));
  EXPECT_EQ(tok.eos_id(), 0);
}

TEST(FromVocab, RejectsBadVocabularies) {
  EXPECT_EQ(
      error_of<std::invalid_argument>([] { Tokenizer::from_vocab(TokenizerKind::kWord, {}); }),
      "tokenizer vocabulary: empty, expected at least '[EOS]'");
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              Tokenizer::from_vocab(TokenizerKind::kWord, {"a", "b"});
            }),
            "tokenizer vocabulary: last entry must be '[EOS]', got 'b'");
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              Tokenizer::from_vocab(TokenizerKind::kWord, {"a", "b", "a", "[EOS]"});
            }),
            "tokenizer vocabulary: entry 'a' appears twice (ids 0 and 2)");
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              Tokenizer::from_vocab(TokenizerKind::kWord, {"[EOS]", "a", "[EOS]"});
            }),
            "tokenizer vocabulary: entry '[EOS]' appears twice (ids 0 and 2)");
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              Tokenizer::from_vocab(TokenizerKind::kChar, {"a", "bc", "[EOS]"});
            }),
            "tokenizer vocabulary: char entry 1 must be one byte, got 'bc'");
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              Tokenizer::from_vocab(TokenizerKind::kWord, {"a", "", "[EOS]"});
            }),
            "tokenizer vocabulary: entry 1 is empty");
}

TEST(FromVocab, UnknownTokenIsAnError) {
  Tokenizer tok = Tokenizer::from_vocab(TokenizerKind::kWord, {"the", "cat", "[EOS]"});
  EXPECT_EQ(error_of<std::invalid_argument>([&] { tok.encode("the  cat\n\n  xyz cat", "in.txt"); }),
            "in.txt:3:3: token 'xyz' is not in the vocabulary (3 tokens)");
}

TEST(Kinds, ParseAndPrint) {
  EXPECT_EQ(parse_tokenizer_kind("word"), TokenizerKind::kWord);
  EXPECT_EQ(parse_tokenizer_kind("char"), TokenizerKind::kChar);
  EXPECT_EQ(to_string(TokenizerKind::kWord), "word");
  EXPECT_EQ(to_string(TokenizerKind::kChar), "char");
  EXPECT_EQ(error_of<std::invalid_argument>([] { parse_tokenizer_kind("bpe"); }),
            "data.tokenizer: expected 'word', 'char' or 'gpt2', got 'bpe'");
  EXPECT_EQ(parse_loader_kind("sequential"), LoaderKind::kSequential);
  EXPECT_EQ(parse_loader_kind("random"), LoaderKind::kRandom);
  EXPECT_EQ(to_string(LoaderKind::kSequential), "sequential");
  EXPECT_EQ(to_string(LoaderKind::kRandom), "random");
  EXPECT_EQ(error_of<std::invalid_argument>([] { parse_loader_kind("shuffled"); }),
            "data.loader: expected 'sequential' or 'random', got 'shuffled'");
}

TEST(VocabHash, KnownValuesAndSensitivity) {
  // FNV-1a 64 of "word\0" "\x01\0\0\0" "a" "\x05\0\0\0" "[EOS]", computed
  // independently (Python, 8 lines); likewise with "char".
  Tokenizer word = Tokenizer::from_vocab(TokenizerKind::kWord, {"a", "[EOS]"});
  Tokenizer chr = Tokenizer::from_vocab(TokenizerKind::kChar, {"a", "[EOS]"});
  EXPECT_EQ(word.vocab_hash(), 0x02ba8583e6ed1f19ull);
  EXPECT_EQ(chr.vocab_hash(), 0x34242582d3b00199ull);
  // Order and entry boundaries both matter.
  const uint64_t ab = Tokenizer::from_vocab(TokenizerKind::kWord, {"a", "b", "[EOS]"}).vocab_hash();
  const uint64_t ba = Tokenizer::from_vocab(TokenizerKind::kWord, {"b", "a", "[EOS]"}).vocab_hash();
  const uint64_t joined = Tokenizer::from_vocab(TokenizerKind::kWord, {"ab", "[EOS]"}).vocab_hash();
  EXPECT_NE(ab, ba);
  EXPECT_NE(ab, joined);
}

// ---------------------------------------------------------------- loaders

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

struct Batch {
  Ids inputs, targets;
};

Batch next_batch(DataLoader& dl) {
  Batch b{Ids(static_cast<size_t>(dl.rows() * dl.T())),
          Ids(static_cast<size_t>(dl.rows() * dl.T()))};
  dl.next(b.inputs.data(), b.targets.data());
  return b;
}

TEST(SequentialLoader, WindowOrderAndWrapAround) {
  // N = 23, B = 2, T = 3: a batch spans B*T = 6 tokens and needs 7 (the last
  // target). Starts 0, 6, 12; then pos = 18 and 18 + 7 > 23, so back to 0.
  const Ids tokens = iota_tokens(23);
  DataLoader dl(tokens, 2, 3, LoaderKind::kSequential, 0);
  EXPECT_EQ(dl.rows(), 2);
  EXPECT_EQ(dl.B(), 2);
  EXPECT_EQ(dl.T(), 3);

  Batch b = next_batch(dl);
  EXPECT_EQ(b.inputs, (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets, (Ids{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(dl.position(), 6);
  EXPECT_EQ(dl.batches_served(), 1);

  b = next_batch(dl);
  EXPECT_EQ(b.inputs, (Ids{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.targets, (Ids{7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(dl.position(), 12);

  b = next_batch(dl);
  EXPECT_EQ(b.inputs, (Ids{12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(b.targets, (Ids{13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(dl.position(), 0);  // wrapped
  EXPECT_EQ(dl.batches_served(), 3);

  b = next_batch(dl);
  EXPECT_EQ(b.inputs, (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets, (Ids{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(dl.position(), 6);
}

TEST(SequentialLoader, ExactFitUsesTheLastTokenBeforeWrapping) {
  // N = 13: the batch at 6 needs tokens 6..12, exactly the stream's end.
  const Ids tokens = iota_tokens(13);
  DataLoader dl(tokens, 2, 3, LoaderKind::kSequential, 0);
  next_batch(dl);
  EXPECT_EQ(dl.position(), 6);
  Batch b = next_batch(dl);
  EXPECT_EQ(b.inputs, (Ids{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.targets, (Ids{7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(dl.position(), 0);
}

TEST(SequentialLoader, RankShardsAreRowsOfTheSerialBatch) {
  const Ids tokens = iota_tokens(23);
  DataLoader rank0(tokens, 2, 3, LoaderKind::kSequential, 0, 0, 1);
  DataLoader rank1(tokens, 2, 3, LoaderKind::kSequential, 0, 1, 1);
  DataLoader rest(tokens, 2, 3, LoaderKind::kSequential, 0, 1);  // rows = -1: rows [1, B)
  EXPECT_EQ(rank1.rows(), 1);
  EXPECT_EQ(rest.rows(), 1);
  const std::vector<Ids> row0 = {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {0, 1, 2}};
  const std::vector<Ids> row1 = {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {3, 4, 5}};
  const std::vector<Ids> row1_targets = {{4, 5, 6}, {10, 11, 12}, {16, 17, 18}, {4, 5, 6}};
  for (size_t s = 0; s < row0.size(); ++s) {
    EXPECT_EQ(next_batch(rank0).inputs, row0[s]) << "step " << s;
    Batch b = next_batch(rank1);
    EXPECT_EQ(b.inputs, row1[s]) << "step " << s;
    EXPECT_EQ(b.targets, row1_targets[s]) << "step " << s;
    EXPECT_EQ(next_batch(rest).inputs, row1[s]) << "step " << s;
  }
}

TEST(SequentialLoader, RestoreReproducesTheContinuation) {
  const Ids tokens = iota_tokens(23);
  DataLoader first(tokens, 2, 3, LoaderKind::kSequential, 0);
  next_batch(first);
  next_batch(first);
  EXPECT_EQ(first.position(), 12);
  EXPECT_EQ(first.batches_served(), 2);

  DataLoader resumed(tokens, 2, 3, LoaderKind::kSequential, 0);
  resumed.restore(12, 2);
  EXPECT_EQ(resumed.position(), 12);
  EXPECT_EQ(resumed.batches_served(), 2);
  Batch b = next_batch(resumed);
  EXPECT_EQ(b.inputs, (Ids{12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(b.targets, (Ids{13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(next_batch(resumed).inputs, (Ids{0, 1, 2, 3, 4, 5}));

  // Valid batch starts are [0, 23 - 7] = [0, 16].
  resumed.restore(16, 0);
  EXPECT_EQ(next_batch(resumed).targets, (Ids{17, 18, 19, 20, 21, 22}));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { resumed.restore(17, 3); }),
            "data loader: position must be in [0, 16] for 23 tokens and a 2 x 3 batch, got 17");
  EXPECT_THROW(resumed.restore(-1, 0), std::invalid_argument);
  EXPECT_THROW(resumed.restore(0, -1), std::invalid_argument);
}

TEST(SequentialLoader, ConstructorErrors) {
  const Ids tokens = iota_tokens(23);
  const Ids six = iota_tokens(6);
  EXPECT_EQ(
      error_of<std::invalid_argument>([&] { DataLoader(six, 2, 3, LoaderKind::kSequential, 0); }),
      "corpus too short: 6 tokens, but one batch of 2 x 3 needs 7");
  EXPECT_NO_THROW(DataLoader(iota_tokens(7), 2, 3, LoaderKind::kSequential, 0));
  EXPECT_EQ(error_of<std::invalid_argument>(
                [&] { DataLoader(tokens, 0, 3, LoaderKind::kSequential, 0); }),
            "data loader: B (batch rows) must be positive, got 0");
  EXPECT_EQ(error_of<std::invalid_argument>(
                [&] { DataLoader(tokens, 2, -1, LoaderKind::kSequential, 0); }),
            "data loader: T (sequence length) must be positive, got -1");
  EXPECT_EQ(error_of<std::invalid_argument>(
                [&] { DataLoader(tokens, 2, 3, LoaderKind::kSequential, 0, 2, 1); }),
            "data loader: row_begin must be in [0, 2), got 2");
  EXPECT_EQ(error_of<std::invalid_argument>(
                [&] { DataLoader(tokens, 2, 3, LoaderKind::kSequential, 0, 1, 2); }),
            "data loader: rows must be in [1, 1] for row_begin 1 of B = 2, got 2");
  EXPECT_THROW(DataLoader(tokens, 2, 3, LoaderKind::kSequential, 0, 0, 0), std::invalid_argument);
  EXPECT_THROW(DataLoader(tokens, 2, 3, LoaderKind::kSequential, 0, -1, 1), std::invalid_argument);
}

// Checks that every row of b is a window tokens[start, start+T) of the stream
// 0..n-1 with start in [0, n-T-1], and its targets the same window shifted by
// one; returns the starts.
Ids check_windows(const Batch& b, int rows, int T, int n) {
  Ids starts;
  for (int r = 0; r < rows; ++r) {
    const int32_t start = b.inputs[static_cast<size_t>(r * T)];
    EXPECT_GE(start, 0);
    EXPECT_LE(start, n - T - 1);
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(b.inputs[static_cast<size_t>(r * T + t)], start + t) << "row " << r << " t " << t;
      EXPECT_EQ(b.targets[static_cast<size_t>(r * T + t)], start + t + 1)
          << "row " << r << " t " << t;
    }
    starts.push_back(start);
  }
  return starts;
}

TEST(RandomLoader, DeterministicBySeedAndWithinBounds) {
  const int n = 100, B = 4, T = 5, steps = 10;
  const Ids tokens = iota_tokens(n);
  DataLoader a(tokens, B, T, LoaderKind::kRandom, 7);
  DataLoader same(tokens, B, T, LoaderKind::kRandom, 7);
  DataLoader other(tokens, B, T, LoaderKind::kRandom, 8);
  Ids starts_a, starts_other;
  for (int s = 0; s < steps; ++s) {
    Batch ba = next_batch(a);
    Batch bs = next_batch(same);
    EXPECT_EQ(ba.inputs, bs.inputs) << "step " << s;
    EXPECT_EQ(ba.targets, bs.targets) << "step " << s;
    for (int32_t x : check_windows(ba, B, T, n)) starts_a.push_back(x);
    for (int32_t x : check_windows(next_batch(other), B, T, n)) starts_other.push_back(x);
  }
  EXPECT_NE(starts_a, starts_other);
  // 40 draws from 95 starts are not all the same one.
  EXPECT_NE(std::count(starts_a.begin(), starts_a.end(), starts_a[0]), steps * B);
  EXPECT_EQ(a.position(), 0);
  EXPECT_EQ(a.batches_served(), steps);
}

TEST(RandomLoader, StartFollowsTheDocumentedFormula) {
  // Row b of step s starts at floor(uniform01(seed, kDataStream, s*B + b) * (n - T)).
  const int n = 100, B = 4, T = 5;
  const Ids tokens = iota_tokens(n);
  DataLoader dl(tokens, B, T, LoaderKind::kRandom, 7);
  next_batch(dl);
  Batch b = next_batch(dl);  // step 1
  const auto expected =
      static_cast<int32_t>(std::floor(uniform01(7, kDataStream, 1 * 4 + 2) * 95.0));
  EXPECT_EQ(b.inputs[2 * T], expected);
}

TEST(RandomLoader, ShortestStreamAlwaysStartsAtZero) {
  // n = T + 1: the only window is [0, T) with targets [1, T].
  const Ids tokens = iota_tokens(4);
  DataLoader dl(tokens, 3, 3, LoaderKind::kRandom, 1);
  for (int s = 0; s < 3; ++s) {
    Batch b = next_batch(dl);
    EXPECT_EQ(b.inputs, (Ids{0, 1, 2, 0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(b.targets, (Ids{1, 2, 3, 1, 2, 3, 1, 2, 3}));
  }
  EXPECT_EQ(error_of<std::invalid_argument>(
                [] { DataLoader(iota_tokens(3), 1, 3, LoaderKind::kRandom, 1); }),
            "corpus too short: 3 tokens, but one random window of T = 3 needs 4");
}

TEST(RandomLoader, RestoreAndShardsReproduceTheSerialSequence) {
  const int n = 100, B = 4, T = 5;
  const Ids tokens = iota_tokens(n);
  DataLoader serial(tokens, B, T, LoaderKind::kRandom, 3);
  std::vector<Batch> seen;
  for (int s = 0; s < 6; ++s) seen.push_back(next_batch(serial));

  DataLoader resumed(tokens, B, T, LoaderKind::kRandom, 3);
  resumed.restore(0, 4);
  EXPECT_EQ(next_batch(resumed).inputs, seen[4].inputs);
  EXPECT_EQ(next_batch(resumed).targets, seen[5].targets);

  // Rows [2, 4) of each global batch.
  DataLoader shard(tokens, B, T, LoaderKind::kRandom, 3, 2, 2);
  for (int s = 0; s < 6; ++s) {
    const Ids& all = seen[static_cast<size_t>(s)].inputs;
    EXPECT_EQ(next_batch(shard).inputs, Ids(all.begin() + 2 * T, all.end())) << "step " << s;
  }
}

// ---------------------------------------------------------------- split

TEST(Split, LastFractionIsValidation) {
  const Ids tokens = iota_tokens(10);
  Split none = split_tokens(tokens, 0.0);
  EXPECT_EQ(none.train.to_vector(), tokens);
  EXPECT_TRUE(none.val.empty());

  // floor(10 * 0.25) = 2 validation tokens.
  Split quarter = split_tokens(tokens, 0.25);
  EXPECT_EQ(quarter.train.to_vector(), (Ids{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(quarter.val.to_vector(), (Ids{8, 9}));

  // floor(3 * 0.25) = 0.
  Split small = split_tokens(std::span<const int32_t>(tokens).first(3), 0.25);
  EXPECT_EQ(small.train.size(), 3u);
  EXPECT_TRUE(small.val.empty());
}

// ---------------------------------------------------------------- token streams

TEST(TokenStream, ReadsAcrossPartsOfEitherWidth) {
  const Ids a = {1, 2, 3};
  const std::vector<uint16_t> b = {4, 5, 65535};
  const std::vector<uint32_t> c = {7, 8};
  TokenStream s(a);
  s.append(std::span<const uint16_t>(b));
  s.append(std::span<const uint32_t>(c));
  s.append(std::span<const int32_t>());  // an empty part is no part
  ASSERT_EQ(s.size(), 8);
  EXPECT_EQ(s.to_vector(), (Ids{1, 2, 3, 4, 5, 65535, 7, 8}));
  Ids window(4);
  s.read(2, window);  // spans all three parts
  EXPECT_EQ(window, (Ids{3, 4, 5, 65535}));
  EXPECT_EQ(s.slice(2, 7).to_vector(), (Ids{3, 4, 5, 65535, 7}));
  EXPECT_TRUE(s.slice(3, 3).empty());
  EXPECT_THROW(s.read(6, window), std::out_of_range);
  EXPECT_THROW(s.slice(2, 9), std::out_of_range);
  // The hash is the int32 array's, however the tokens are held.
  const Ids flat = s.to_vector();
  EXPECT_EQ(s.hash(), fnv1a64(flat.data(), flat.size() * sizeof(int32_t)));
  EXPECT_NE(s.hash(), s.slice(0, 7).hash());
}

TEST(TokenStream, LoaderOverPartsServesWhatOneArrayServes) {
  // The same tokens as one int32 array and as uint16 parts of uneven sizes:
  // both loaders give the same batches, sequential and random.
  const Ids flat = iota_tokens(997);
  std::vector<uint16_t> narrow(flat.begin(), flat.end());
  TokenStream parts;
  for (size_t at = 0, len = 1; at < narrow.size(); at += len, len = len * 3 + 1) {
    parts.append(std::span<const uint16_t>(narrow).subspan(at, std::min(len, narrow.size() - at)));
  }
  ASSERT_EQ(parts.size(), 997);
  for (LoaderKind kind : {LoaderKind::kSequential, LoaderKind::kRandom}) {
    DataLoader one(flat, 4, 16, kind, 7), many(parts, 4, 16, kind, 7);
    for (int step = 0; step < 40; ++step) {
      Ids i1(64), t1(64), i2(64), t2(64);
      one.next(i1.data(), t1.data());
      many.next(i2.data(), t2.data());
      ASSERT_EQ(i1, i2) << to_string(kind) << " step " << step;
      ASSERT_EQ(t1, t2) << to_string(kind) << " step " << step;
      for (size_t k = 0; k < 64; ++k) {
        if (k % 16 != 15) {
          ASSERT_EQ(t1[k], i1[k + 1]);  // targets are the inputs shifted by one
        }
      }
    }
  }
}

TEST(Split, RejectsFractionsOutsideZeroOne) {
  const Ids tokens = iota_tokens(10);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { split_tokens(tokens, 1.0); }),
            "data.val_fraction: must be in [0, 1), got 1");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { split_tokens(tokens, -0.25); }),
            "data.val_fraction: must be in [0, 1), got -0.25");
  EXPECT_THROW(split_tokens(tokens, std::numeric_limits<double>::quiet_NaN()),
               std::invalid_argument);
}

// ---------------------------------------------------------------- prepare's folders (issue 42)
// A folder of shards is what prepare finished: written under a lock into an
// absent or empty folder, its manifest last; training reads it only through
// the manifest. A tiny GPT-2-format tokenizer (the 256 byte tokens, one merge
// "t h", <|endoftext|>) keeps these tests off the real files.

namespace fs = std::filesystem;

// GPT-2's byte -> character table (bytes_to_unicode), as UTF-8.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  uint32_t cp = static_cast<uint32_t>(b);
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    }
    cp = 256 + static_cast<uint32_t>(n);
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

class PrepareFolder : public ::testing::Test {
 protected:
  fs::path root = fs::temp_directory_path() / fmt::format("data_test_prepare_{}", ::getpid());
  fs::path out = root / "shards";
  void SetUp() override {
    fs::remove_all(root);
    fs::create_directories(root);
    Json enc = Json::object();
    for (int b = 0; b < 256; ++b) enc[byte_char(b)] = b;
    enc["th"] = 256;
    enc["<|endoftext|>"] = 257;
    write(root / "encoder.json", enc.dump());
    write(root / "vocab.bpe", "#version: 0.2\nt h\n");
    std::string a, b;
    for (int i = 0; i < 12; ++i) a += fmt::format("the cat {} sat on the mat. ", i);
    for (int i = 0; i < 6; ++i) b += fmt::format("then the hat {} fell. ", i);
    write(root / "a.txt", a);
    write(root / "b.txt", b);
  }
  void TearDown() override { fs::remove_all(root); }
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  PrepareRequest request(uint64_t shard_tokens = 40) const {
    PrepareRequest r;
    r.inputs = {(root / "a.txt").string(), (root / "b.txt").string()};
    r.encoder_json = (root / "encoder.json").string();
    r.vocab_bpe = (root / "vocab.bpe").string();
    r.out_dir = out.string();
    r.val_fraction = 0.2;
    r.shard_tokens = shard_tokens;
    r.progress = false;
    return r;
  }
  static std::vector<std::string> names(const fs::path& dir) {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
    std::sort(n.begin(), n.end());
    return n;
  }
  std::string open_error() const {
    return error_of<std::invalid_argument>([&] { open_shards(out.string(), 258); });
  }
};

TEST_F(PrepareFolder, WritesShardsThenTheManifestTrainingReads) {
  const PrepareSummary sum = prepare_shards(request(100));
  ASSERT_EQ(sum.shards.size(), 5u);  // 325 training tokens in 4 shards, 81 validation tokens in 1
  EXPECT_EQ(sum.manifest, (out / "manifest.json").string());
  EXPECT_FALSE(fs::exists(out / kPrepareHolderName));  // the holder record goes when prepare ends
  const ShardManifest m = read_manifest(out);
  EXPECT_EQ(m.vocab, 258);
  EXPECT_EQ(m.train_tokens, sum.train_tokens);
  EXPECT_EQ(m.val_tokens, sum.val_tokens);
  EXPECT_EQ(m.shards.size(), sum.shards.size());
  EXPECT_EQ(m.shards.front().file, "train_000000.bin");
  EXPECT_EQ(m.shards.back().file, "val_000000.bin");
  const std::string enc = read_input_file(root / "encoder.json", 1 << 20, "", "");
  EXPECT_EQ(m.encoder_json_fnv1a64, fnv1a64(enc.data(), enc.size()));
  for (const ManifestShard& s : m.shards) EXPECT_EQ(fs::file_size(out / s.file), s.bytes) << s.file;
  // Read back and written again: the same bytes (the manifest holds nothing but the data's facts).
  const std::string text = read_input_file(out / "manifest.json", 1 << 20, "", "");
  EXPECT_EQ(text, manifest_text(m));
  const ShardSet set = open_shards(out.string(), 258);
  // The run's own tokenizer files: accepted; others (the same vocabulary size or not): refused.
  TokenizerFiles own;
  (void)load_bpe_tokenizer((root / "encoder.json").string(), (root / "vocab.bpe").string(), &own);
  EXPECT_NO_THROW(open_shards(out.string(), 258, own));
  TokenizerFiles other = own;
  other.vocab_bpe_fnv1a64 ^= 1;
  EXPECT_NE(error_of<std::invalid_argument>([&] { open_shards(out.string(), 258, other); })
                .find("was prepared with other tokenizer files"),
            std::string::npos);
  EXPECT_EQ(static_cast<uint64_t>(set.train.size()), sum.train_tokens);
  EXPECT_EQ(static_cast<uint64_t>(set.val.size()), sum.val_tokens);
  const std::string line = set.describe();
  EXPECT_NE(line.find(fmt::format("{} train shards, {} tokens (train_000000.bin ..", set.train_files.size(),
                                  sum.train_tokens)), std::string::npos) << line;
  EXPECT_NE(line.find(fmt::format("1 val shard, {} tokens (val_000000.bin)", sum.val_tokens)), std::string::npos)
      << line;
}

TEST_F(PrepareFolder, RefusesAFolderThatIsNotEmptyBeforeReadingAnything) {
  fs::create_directories(out);
  write(out / "notes.txt", "mine");
  PrepareRequest r = request();
  r.inputs.push_back((root / "missing.txt").string());  // would fail if it were read first
  const std::string e = error_of<std::invalid_argument>([&] { prepare_shards(r); });
  EXPECT_NE(e.find("--out: '" + out.string() + "' exists and is not empty"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  EXPECT_EQ(names(out), std::vector<std::string>{"notes.txt"});
  // A file where the folder goes, and an input as the folder.
  write(root / "file", "x");
  r = request();
  r.out_dir = (root / "file").string();
  EXPECT_NE(error_of<std::invalid_argument>([&] { prepare_shards(r); }).find("exists and is not a folder"),
            std::string::npos);
}

TEST_F(PrepareFolder, OverwriteReplacesOnlyThePreviousPreparesFiles) {
  prepare_shards(request(20));
  const size_t before = names(out).size();
  write(out / "notes.txt", "mine");
  write(out / "val_000007.bin.tmp.1.0", "a stale temporary");
  EXPECT_NE(error_of<std::invalid_argument>([&] { prepare_shards(request(1000)); }).find("is not empty"),
            std::string::npos);
  EXPECT_EQ(names(out).size(), before + 2);  // refused: nothing removed
  PrepareRequest r = request(1000);
  r.overwrite = true;
  const PrepareSummary sum = prepare_shards(r);
  EXPECT_EQ(sum.shards.size(), 2u);
  EXPECT_EQ(names(out), (std::vector<std::string>{"manifest.json", "notes.txt", "train_000000.bin",
                                                  "val_000000.bin"}));
  EXPECT_EQ(read_input_file(out / "notes.txt", 100, "", ""), "mine");
  EXPECT_EQ(open_error(), "");
}

TEST_F(PrepareFolder, AFolderAnotherPrepareHoldsIsRefusedNamingIt) {
  fs::create_directories(out);
  const DirectoryLock held(out, "--out", kPrepareHolderName);  // what a running prepare holds
  write_file_atomically(out / kPrepareHolderName, json_text(holder_info()));
  const std::string e = error_of<std::invalid_argument>([&] { prepare_shards(request()); });
  EXPECT_NE(e.find("--out: '" + out.string() + "' is in use"), std::string::npos) << e;
  EXPECT_NE(e.find(fmt::format("pid {} on ", ::getpid())), std::string::npos) << e;
  EXPECT_EQ(names(out), std::vector<std::string>{kPrepareHolderName});
}

TEST_F(PrepareFolder, AFailedPrepareLeavesNoManifestAndTrainingRefusesTheFolder) {
  // The disk fills after the shards, at the manifest: files above 2 KiB cannot be written.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct sigaction ignore {}, was {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &was), 0);
  struct rlimit small = old;
  small.rlim_cur = 2048;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  PrepareRequest r = request(8);  // 1,040-byte shards; a manifest of them is larger than 2 KiB
  bool failed = false;
  try {
    prepare_shards(r);
  } catch (const std::exception&) {
    failed = true;
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::sigaction(SIGXFSZ, &was, nullptr);
  EXPECT_TRUE(failed);
  EXPECT_FALSE(fs::exists(out / "manifest.json"));
  EXPECT_EQ(names(out), std::vector<std::string>{});  // its shards and holder record removed too
  EXPECT_NE(open_error().find("has no manifest.json: not a finished prepare; run prepare again"), std::string::npos);
  // And once there is room, the folder (empty) takes the prepare.
  EXPECT_NO_THROW(prepare_shards(r));
}

TEST_F(PrepareFolder, TrainingRefusesAFolderThatDisagreesWithItsManifest) {
  prepare_shards(request(40));
  ASSERT_EQ(open_error(), "");
  // A shard the manifest does not list (another prepare's, or put there by hand).
  fs::copy_file(out / "train_000000.bin", out / "train_000100.bin");
  EXPECT_NE(open_error().find("holds train_000100.bin, which manifest.json does not list"), std::string::npos)
      << open_error();
  fs::remove(out / "train_000100.bin");
  // A listed one missing.
  fs::rename(out / "train_000001.bin", root / "kept.bin");
  EXPECT_NE(open_error().find("manifest.json lists train_000001.bin, which is missing"), std::string::npos)
      << open_error();
  // Of another size.
  fs::copy_file(out / "train_000000.bin", out / "train_000001.bin");
  fs::resize_file(out / "train_000001.bin", fs::file_size(out / "train_000001.bin") - 2);
  EXPECT_NE(open_error().find("train_000001.bin' is "), std::string::npos) << open_error();
  EXPECT_NE(open_error().find("the folder changed since prepare"), std::string::npos) << open_error();
  // A FIFO in a shard's place is named by its kind, never opened (nothing blocks).
  fs::remove(out / "train_000001.bin");
  ASSERT_EQ(::mkfifo((out / "train_000001.bin").c_str(), 0600), 0);
  EXPECT_NE(open_error().find("is not a regular file (a FIFO), expected an llm.c token shard"), std::string::npos) << open_error();
  fs::remove(out / "train_000001.bin");
  fs::rename(root / "kept.bin", out / "train_000001.bin");
  ASSERT_EQ(open_error(), "");
  // A manifest naming a file outside the folder, or whose counts do not add up.
  const std::string good = read_input_file(out / "manifest.json", 1 << 20, "", "");
  Json j = Json::parse(good);
  j["shards"][0]["file"] = "../a.txt";
  write_file_atomically(out / "manifest.json", j.dump());
  EXPECT_NE(open_error().find("not a shard name prepare writes"), std::string::npos) << open_error();
  j = Json::parse(good);
  j["train_tokens"] = j["train_tokens"].get<uint64_t>() + 1;
  write_file_atomically(out / "manifest.json", j.dump());
  EXPECT_NE(open_error().find("but its shards hold"), std::string::npos) << open_error();
  write_file_atomically(out / "manifest.json", "{\"version\": 2}");
  EXPECT_NE(open_error().find("version 2, not 1"), std::string::npos) << open_error();
  write_file_atomically(out / "manifest.json", std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_NE(open_error().find("nested deeper than a manifest is"), std::string::npos) << open_error();
  fs::remove(out / "manifest.json");
  EXPECT_EQ(open_error(), "data.shards: '" + out.string() +
                              "' has no manifest.json: not a finished prepare; run prepare again");
}

TEST_F(PrepareFolder, AShardIsReadIntoMemorySoALaterTruncationCannotFaultTheRun) {
  prepare_shards(request(1000));
  const ShardSet set = open_shards(out.string(), 258);
  const std::vector<int32_t> before = set.train.to_vector();
  // Truncated (and then rewritten) under the run: a mapped file would raise SIGBUS on the next read.
  fs::resize_file(out / "train_000000.bin", 1024);
  fs::resize_file(out / "train_000000.bin", 0);
  EXPECT_EQ(set.train.to_vector(), before);
}

TEST_F(PrepareFolder, ThreadsAreBoundedAndAtMostOneADocument) {
  EXPECT_GE(max_threads(), 64);
  EXPECT_EQ(check_threads(max_threads(), "train.threads"), max_threads());
  const std::string e = error_of<std::invalid_argument>([] { resolve_threads(65536); });
  EXPECT_EQ(e.rfind("train.threads: 65536 threads is above the limit of ", 0), 0u) << e;
  PrepareRequest r = request();
  r.threads = 65536;
  EXPECT_EQ(error_of<std::invalid_argument>([&] { prepare_shards(r); }).rfind("train.threads: 65536 threads", 0),
            0u);
  EXPECT_FALSE(fs::exists(out));  // refused before the folder is made
  r.threads = max_threads();
  EXPECT_EQ(prepare_shards(r).threads, 2);  // two documents: two threads
  // encode_documents starts no more threads than documents (a million would end in std::terminate).
  const BpeTokenizer tok = load_bpe_tokenizer(r.encoder_json, r.vocab_bpe);
  const std::vector<std::string_view> docs = {"the hat", "that"};
  EXPECT_EQ(encode_documents(tok, docs, 1'000'000), encode_documents(tok, docs, 1));
}

}  // namespace
}  // namespace gpt2
