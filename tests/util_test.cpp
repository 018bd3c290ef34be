// The util layer: field lists (text -> value at the edge, help, YAML), the
// JSON writer on text that is not UTF-8, the metrics stream round trip, and
// the console's streams (never blocking, every line written or counted).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include "model/bpe.h"
#include "model/tokenizer.h"
#include "parallel/hostfile.h"
#include "train/run/metrics.h"
#include "util/checked.h"
#include "util/console.h"
#include "util/fields.h"
#include "util/hash.h"
#include "util/files.h"
#include "util/json.h"
#include "util/records.h"
#include "util/stats.h"
#include "util/text.h"

namespace gpt2 {
namespace {

struct Section {
  int steps = 10;
  uint8_t small = 1;
  uint32_t seed = 7;
  float lr = 1e-3f;
  bool flag = false;
  std::vector<int> list{1, 2};
  std::string name = "x";
  template <class F>
  void visit_fields(F&& f) {
    f("steps", steps, "steps");
    f("small", small, "a small unsigned");
    f("seed", seed, "seed");
    f("lr", lr, "learning rate");
    f("flag", flag, "a flag");
    f("list", list, "a list");
    f("name", name, "a name");
  }
};

// The Mann-Whitney U test against values worked out by hand: with no ties the
// two-sided p of samples that do not overlap is 2 / C(n1 + n2, n1).
TEST(MannWhitneyU, ExactPValuesOfSeparatedAndInterleavedSamples) {
  const gpt2::UTest three = gpt2::mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(three.exact);
  EXPECT_EQ(three.u, 0);
  EXPECT_NEAR(three.p, 2.0 / 20.0, 1e-12);  // C(6, 3) = 20
  std::vector<double> a, b;
  for (int i = 0; i < 9; ++i) {
    a.push_back(10 + i);
    b.push_back(i);
  }
  const gpt2::UTest nine = gpt2::mann_whitney_u(a, b);
  EXPECT_EQ(nine.u, 81);
  EXPECT_NEAR(nine.p, 2.0 / 48620.0, 1e-15);  // C(18, 9) = 48620
  // a = {1, 4}, b = {2, 3}: U = 2 of 4, the middle of the distribution (counts 1 1 2 1 1): p = 1.
  EXPECT_NEAR(gpt2::mann_whitney_u({1, 4}, {2, 3}).p, 1.0, 1e-12);
  // a = {1, 3}, b = {2, 4}: U = 1, P(U <= 1) = 2/6, two-sided 4/6.
  EXPECT_NEAR(gpt2::mann_whitney_u({1, 3}, {2, 4}).p, 4.0 / 6.0, 1e-12);
}

TEST(MannWhitneyU, TiesUseTheNormalApproximationAndEqualSamplesGiveOne) {
  const gpt2::UTest same = gpt2::mann_whitney_u({5, 5, 5}, {5, 5, 5});
  EXPECT_FALSE(same.exact);
  EXPECT_EQ(same.u, 4.5);
  EXPECT_EQ(same.p, 1.0);
  const gpt2::UTest tied = gpt2::mann_whitney_u({1, 2, 2, 3, 9, 9, 9, 9, 9, 9}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2});
  EXPECT_FALSE(tied.exact);
  EXPECT_LT(tied.p, 0.01);
  EXPECT_THROW(gpt2::mann_whitney_u({}, {1}), std::invalid_argument);
}

TEST(Fields, ParsesValidTextAndReadsItBack) {
  Section s;
  Fields f;
  f.add_section("train", s);
  f.set("train.steps", "+12", "test");
  f.set("train.small", "255", "test");
  f.set("train.seed", "4294967295", "test");
  f.set("train.lr", "0.1", "test");
  f.set("train.flag", "true", "test");
  f.set("train.list", "3,-4,5", "test");
  f.set("train.name", "a \"quoted\" name", "test");
  EXPECT_EQ(s.steps, 12);
  EXPECT_EQ(s.small, 255);
  EXPECT_EQ(s.seed, 4294967295u);
  EXPECT_EQ(s.lr, 0.1f);
  EXPECT_TRUE(s.flag);
  EXPECT_EQ(s.list, (std::vector<int>{3, -4, 5}));
  // Every value read back as text parses to the same value.
  Section t;
  Fields g;
  g.add_section("train", t);
  for (const auto& [key, text] : f.values()) g.set(key, text, "round trip");
  EXPECT_EQ(g.values(), f.values());
  EXPECT_NE(f.to_yaml().find("  name: \"a \\\"quoted\\\" name\"\n"), std::string::npos) << f.to_yaml();
}

TEST(Fields, RejectsMalformedAndOutOfRangeText) {
  Section s;
  Fields f;
  f.add_section("train", s);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"train.steps", "+-1"},        {"train.steps", "++1"},   {"train.steps", "1.5"},
      {"train.steps", ""},           {"train.steps", "12x"},   {"train.steps", "99999999999"},
      {"train.small", "256"},        {"train.small", "-1"},    {"train.seed", "4294967296"},
      {"train.seed", "+-3"},         {"train.lr", "nan"},      {"train.lr", "inf"},
      {"train.lr", "1e99"},          {"train.lr", "0.1.2"},    {"train.flag", "yes"},
      {"train.list", "1,2,"},        {"train.list", ",1"},     {"train.list", "1,,2"},
      {"train.list", ""},            {"train.list", "1;2"},
  };
  for (const auto& [key, text] : bad) {
    const Section before = s;
    try {
      f.set(key, text, "where");
      ADD_FAILURE() << key << " accepted '" << text << "'";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("where: " + key + ": ", 0), 0u) << m;
      EXPECT_NE(m.find("'" + text + "'"), std::string::npos) << m;
    }
    EXPECT_EQ(s.steps, before.steps);  // a rejected value leaves the field alone
    EXPECT_EQ(s.small, before.small);
    EXPECT_EQ(s.list, before.list);
  }
}

TEST(Fields, NumbersTooLargeForTheirTypeAreOutOfRangeNotMalformed) {
  Section s;
  Fields f;
  f.add_section("train", s);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"train.steps", "99999999999", "(allowed -2147483648..2147483647)"},
      {"train.steps", "99999999999999999999", "(allowed -9223372036854775808..9223372036854775807)"},
      {"train.small", "256", "(allowed 0..255)"},
      {"train.seed", "99999999999999999999", "(allowed 0..18446744073709551615)"},
      {"train.lr", "1e99", "out of range (allowed "},
  };
  for (const auto& [key, text, range] : cases) {
    try {
      f.set(key, text, "c.yaml:2");
      ADD_FAILURE() << key << " accepted '" << text << "'";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("c.yaml:2: " + key + ": '" + text + "' is out of range", 0), 0u) << m;
      EXPECT_NE(m.find(range), std::string::npos) << m;
    }
  }
}

TEST(CommandLine, AnOptionWhereAValueIsExpectedIsAMissingValue) {
  Section s;
  Fields f;
  f.add_section("train", s);
  std::string out;
  bool overwrite = false;
  f.add("out", out, "output", "path");
  f.add("overwrite", overwrite, "overwrite");
  try {
    parse_command_line({"--out", "--overwrite"}, f);
    FAIL() << "took '--overwrite' for the value of --out";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--out: missing value (got the option '--overwrite')");
  }
  try {  // the same for a configuration key and for an extra key of a stage
    parse_command_line({"--train.steps", "--train.lr", "1"}, f);
    FAIL() << "took '--train.lr' for the value of --train.steps";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--train.steps: missing value (got the option '--train.lr')");
  }
  EXPECT_THROW(parse_command_line({"--config", "--help"}, f, {"config"}), std::invalid_argument);
  // A negative number is a value: it reaches the field's own validation.
  const CommandLine cl = parse_command_line({"--train.lr", "-1", "--train.steps", "-3", "--out=--odd"}, f);
  apply_settings(f, cl);
  EXPECT_EQ(s.lr, -1.0f);
  EXPECT_EQ(s.steps, -3);
  EXPECT_EQ(out, "--odd");
}

TEST(Fields, UnknownKeysGetADidYouMean) {
  Section s;
  Fields f;
  f.add_section("train", s);
  try {
    f.set("train.stpes", "1", "exp.yaml:3");
    FAIL() << "accepted an unknown key";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "exp.yaml:3: unknown key 'train.stpes' (did you mean 'train.steps'?)");
  }
  EXPECT_THROW(parse_command_line({"--train.step", "3"}, f), std::invalid_argument);
  const CommandLine cl = parse_command_line({"--train.steps=3", "word", "--train.lr", "0.5"}, f);
  EXPECT_EQ(cl.positional, std::vector<std::string>{"word"});
  apply_settings(f, cl);
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.lr, 0.5f);
}

TEST(JsonText, TextThatIsNotUtf8IsWrittenWithReplacementCharacters) {
  const Json j{{"text", std::string("caf\xc3")}, {"ok", std::string("caf\xc3\xa9")}};
  const std::string out = json_text(j);
  EXPECT_EQ(out, "{\"text\":\"caf\xef\xbf\xbd\",\"ok\":\"caf\xc3\xa9\"}");
  EXPECT_EQ(parse_json(out, "test")["ok"], "caf\xc3\xa9");
}

TEST(MetricsWriter, ASummaryWhoseGeneratedTextIsCutInsideACharacterIsStillWritten) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "gpt2_util_test_metrics";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "metrics.jsonl").string();
  {
    MetricsWriter w(path);
    StepRecord r;
    r.loss = 5.5;
    w.step(r);
    RunSummary sum;
    sum.steps = 1;
    sum.generated_text = "un caf\xc3";  // the last token ends inside "é"
    w.finish(sum);
  }
  const MetricsStream m = read_metrics_stream(path);
  ASSERT_EQ(m.steps.size(), 1u);
  ASSERT_TRUE(m.summary.has_value());
  EXPECT_EQ(m.summary->generated_text, "un caf\xef\xbf\xbd");
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  std::filesystem::remove_all(dir);
}


// Quoting input in messages (issue 42, docs/guarantees.md "Messages quote
// input briefly"): excerpt() and the messages that use it.

constexpr size_t kShortMessage = 400;  // a message that quotes input stays one short line

// Checked arithmetic: an overflow is a one-line refusal naming what was computed, never a wrapped value.
TEST(Checked, OverflowIsRefusedNamingWhatWasComputed) {
  EXPECT_EQ(checked_mul(uint64_t{1} << 31, uint64_t{1} << 31, "x"), uint64_t{1} << 62);
  EXPECT_EQ(checked_add(uint64_t{1} << 63, (uint64_t{1} << 63) - 1, "x"), ~uint64_t{0});
  EXPECT_EQ(checked_product({3, 5, 7}, "x"), 105u);
  EXPECT_EQ(checked_product({}, "x"), 1u);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 2^32 x 2^32 wraps to 0 unchecked; 4 x 2^62 too.
  EXPECT_EQ(message([] { checked_mul(uint64_t{1} << 32, uint64_t{1} << 32, "llm.c header: tensor wte"); }),
            "llm.c header: tensor wte: 4294967296 x 4294967296 overflows 64 bits");
  EXPECT_EQ(message([] { checked_add(~uint64_t{0}, 1, "file size"); }),
            "file size: 18446744073709551615 + 1 overflows 64 bits");
  EXPECT_EQ(message([] { checked_product({4, uint64_t{1} << 62, 1}, "model.n_embd"); }),
            "model.n_embd: 4 x 4611686018427387904 x 1 overflows 64 bits");
  EXPECT_EQ(message([] { checked_mul(10, 10, "rows", 99); }), "rows: 10 x 10 overflows 99");
  EXPECT_EQ(message([] { checked_int(uint64_t{1} << 31, "model.mlp_hidden"); }),
            "model.mlp_hidden: 2147483648 overflows a 32-bit int");
  EXPECT_EQ(checked_int(2147483647, "x"), 2147483647);
}

TEST(Excerpt, BinaryBytesAreEscapedNotPassedToTheTerminal) {
  const std::string bin("a\0\x1b[31m\xff\xfe\n\t\\z", 13);
  EXPECT_EQ(excerpt(bin), "a\\x00\\x1b[31m\\xff\\xfe\\n\\t\\\\z");
  for (const std::string& s : {excerpt(bin), excerpt(std::string(1000, '\x07'))}) {
    for (const char c : s) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "a raw byte " << int(c);
  }
}

TEST(Excerpt, TenMegabytesAreCutAndTheirLengthNamed) {
  const std::string big(10u << 20, 'a');
  const std::string e = excerpt(big);
  EXPECT_LE(e.size(), kExcerptChars + 30);
  EXPECT_EQ(e, std::string(kExcerptChars, 'a') + "... (10485760 bytes)");
  // A cut never splits an escape.
  const std::string esc = excerpt(std::string(100, '\xff'), 10);
  EXPECT_EQ(esc, "\\xff\\xff... (100 bytes)");
}

TEST(Excerpt, ALongLineStaysOneShortLine) {
  std::string line = "root:x:0:0:root:/root:/bin/bash";
  while (line.size() < 5000) line += " and more\r\n";
  const std::string e = excerpt(line);
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_EQ(e.find('\r'), std::string::npos);
  EXPECT_LE(e.size(), kExcerptChars + 30);
  EXPECT_EQ(e.rfind("root:x:0:0", 0), 0u);
  EXPECT_EQ(excerpt("short"), "short");  // what fits is kept whole
  EXPECT_EQ(excerpt(""), "");
}

// A fresh folder for one test, removed after it.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name) : dir(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::filesystem::path file(const std::string& name, const std::string& text = "x") const {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
};

std::string refusal(const std::filesystem::path& out, const OutputRules& rules) {
  try {
    check_output(out, rules);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CheckOutput, RefusesAnExistingFileUnlessOverwriteAndAcceptsAFreshPath) {
  Scratch s("gpt2_util_test_check_output_exists");
  const auto old = s.file("old.md", "kept");
  EXPECT_NE(refusal(old, {"--out", {}, false, false}).find("exists; choose another path, or give --overwrite"),
            std::string::npos);
  EXPECT_EQ(refusal(old, {"--out", {}, true, false}), "");
  EXPECT_EQ(refusal(s.dir / "fresh.md", {"--out", {}, false, false}), "");
  EXPECT_EQ(refusal(s.dir / "fresh_folder", {"--out", {}, false, true}), "");
  EXPECT_NE(refusal("", {"--out", {}, false, false}).find("required"), std::string::npos);
  EXPECT_NE(refusal(s.dir, {"--out", {}, true, false}).find("is a folder"), std::string::npos);
  // A new folder named with a trailing slash: its parent is the folder above, not the folder itself.
  EXPECT_EQ(refusal(s.dir.string() + "/new_folder/", {"--out", {}, false, true}), "");
  EXPECT_EQ(refusal(s.dir.string() + "/new_folder//", {"--out", {}, false, true}), "");
  EXPECT_NE(refusal(s.dir.string() + "/missing/new_folder/", {"--out", {}, false, true}).find("does not exist"),
            std::string::npos);
  std::ifstream in(old);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "kept");  // checking writes nothing
}

TEST(CheckOutput, RefusesAnInputThroughASymbolicLinkEvenWithOverwrite) {
  Scratch s("gpt2_util_test_check_output_input");
  const auto input = s.file("runs.csv");
  std::filesystem::create_symlink(input, s.dir / "link.csv");
  const std::string why = refusal(s.dir / "link.csv", {"--out", {input}, true, false});
  EXPECT_NE(why.find("is this command's input"), std::string::npos) << why;
  // And the other way round: the input named through the link.
  EXPECT_NE(refusal(input, {"--out", {s.dir / "link.csv"}, true, false}).find("input"), std::string::npos);
}

TEST(CheckOutput, RefusesAPathInsideAnInputFolderAndAFolderHoldingAnInputEvenWithOverwrite) {
  Scratch s("gpt2_util_test_check_output_inside");
  std::filesystem::create_directories(s.dir / "in");
  const auto held = s.file("in/model.safetensors", "input");
  std::filesystem::create_symlink(s.dir / "in", s.dir / "in_link");
  for (const auto& out : {held, s.dir / "in" / "new.bin", s.dir / "in_link" / "model.safetensors",
                          s.dir / "in" / "sub" / ".." / "x.bin"}) {
    const std::string why = refusal(out, {"--out", {s.dir / "in"}, true, false});
    EXPECT_NE(why.find("lies in this command's input folder"), std::string::npos) << out << ": " << why;
  }
  // A folder written that holds an input: itself, or through a link to it.
  EXPECT_NE(refusal(s.dir / "in", {"--out", {held}, true, true}).find("holds this command's input"), std::string::npos);
  EXPECT_NE(refusal(s.dir / "in_link", {"--out", {held}, true, true}).find("input"), std::string::npos);
  EXPECT_NE(refusal(s.dir, {"--out", {held}, true, true}).find("holds this command's input"), std::string::npos);
  // Beside the input, and a folder whose name only starts like the input's: accepted.
  EXPECT_EQ(refusal(s.dir / "out.bin", {"--out", {s.dir / "in"}, true, false}), "");
  EXPECT_EQ(refusal(s.dir / "in2", {"--out", {s.dir / "in"}, false, true}), "");
  EXPECT_EQ(refusal(s.dir / "in2", {"--out", {held}, false, true}), "");
}

TEST(CheckOutput, RefusesAPathInATrainingRunsFolder) {
  Scratch s("gpt2_util_test_check_output_run");
  s.file("run.json", "{}");
  const std::string why = refusal(s.dir / "export.bin", {"--out", {}, true, false});
  EXPECT_NE(why.find("lies in the training run folder"), std::string::npos) << why;
}

TEST(CheckOutput, RefusesAFolderAnotherProcessHoldsLocked) {
  Scratch s("gpt2_util_test_check_output_lock");
  // Another process holds the folder (as DirectoryLock does): a child takes
  // flock() on it and waits; the parent checks while it holds it.
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(s.dir.c_str(), O_RDONLY | O_DIRECTORY);
    const char ok = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? '1' : '0';
    (void)!::write(ready[1], &ok, 1);
    char c;
    (void)!::read(done[0], &c, 1);
    ::_exit(0);
  }
  char ok = '0';
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  const std::string in_locked = refusal(s.dir / "compare.md", {"--out", {}, true, false});
  const std::string locked_itself = refusal(s.dir, {"--out", {}, true, true});
  (void)!::write(done[1], "x", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (const int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  EXPECT_NE(in_locked.find("which another process holds"), std::string::npos) << in_locked;
  EXPECT_NE(locked_itself.find("is held by another process"), std::string::npos) << locked_itself;
  // A second open file description in this process conflicts the same way.
  const int fd = ::open(s.dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_NE(refusal(s.dir / "x.md", {"--out", {}, true, false}).find("another process"), std::string::npos);
  ::close(fd);
  EXPECT_EQ(refusal(s.dir / "x.md", {"--out", {}, true, false}), "");  // released: accepted
}

TEST(JsonDepth, DeepNestingIsRefusedBeforeItIsParsedOrWritten) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_GT(json_nesting(deep), kMaxJsonDepth);
  try {
    parse_json(deep, "deep.json:1");
    FAIL() << "accepted 100000 levels";
  } catch (const std::runtime_error& e) {
    EXPECT_LT(std::string(e.what()).size(), kShortMessage);
    EXPECT_NE(std::string(e.what()).find("deep.json:1: not valid JSON here: arrays and objects nested deeper than 512"),
              std::string::npos) << e.what();
  }
  // Brackets inside strings are text, escaped quotes included; ordinary depth parses.
  EXPECT_EQ(json_nesting(R"({"a": "[[[[\"[[[", "b": [1, {"c": [2]}]})"), 4u);
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(json_text(parse_json(ok, "ok")).size(), ok.size());
}

TEST(JsonDepth, AParseErrorQuotesTheBadTokenBriefly) {
  const std::string bad = "{\"a\": \"" + std::string(10u << 20, 'x') + "\x01\"}";
  try {
    parse_json(bad, "metrics.jsonl:3");
    FAIL() << "accepted a control character in a string";
  } catch (const std::runtime_error& e) {
    EXPECT_LT(std::string(e.what()).size(), kShortMessage);
    EXPECT_EQ(std::string(e.what()).rfind("metrics.jsonl:3: not valid JSON: ", 0), 0u) << e.what();
  }
}

TEST(QuotedInput, FieldsQuoteALongOrBinaryValueBriefly) {
  const std::string big(10u << 20, '7');
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { parse_int64("train.steps", big + "x"); }, [&] { parse_bool("train.flag", "\x1b[2J" + big); },
           [&] { parse_int_list("train.list", big + ","); }}) {
    try {
      f();
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_LT(m.size(), kShortMessage) << m.substr(0, 200);
      EXPECT_EQ(m.find('\x1b'), std::string::npos);
    }
  }
  Section s;
  Fields f;
  f.add_section("train", s);
  // No 10 MB edit distance (closest_key's length bound): the refusal of a 10 MB unknown key does no more work
  // than the refusal of a 10 MB bad value, both a few passes over 10 MB. Measured as this thread's CPU time,
  // here and now, so that a slow, fast or busy machine changes both alike; a distance to each of the section's
  // 7 keys would take some 30 times the value's refusal (0.7 s of CPU against 0.02 s here).
  const auto cpu_s = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double v0 = cpu_s();
  try {
    apply_settings(f, parse_command_line({"--train.steps", std::string(10u << 20, '7') + "x"}, f));
    ADD_FAILURE() << "accepted a bad value";
  } catch (const std::invalid_argument& e) {
    EXPECT_LT(std::string(e.what()).size(), kShortMessage);
  }
  const double value_s = cpu_s() - v0;
  const double k0 = cpu_s();
  try {
    parse_command_line({"--train." + std::string(10u << 20, 'q'), "1"}, f);
    ADD_FAILURE() << "accepted an unknown key";
  } catch (const std::invalid_argument& e) {
    EXPECT_LT(std::string(e.what()).size(), kShortMessage);
  }
  const double key_s = cpu_s() - k0;
  EXPECT_LT(key_s, 10 * value_s + 0.05) << "the unknown key's refusal took " << key_s << " s of CPU, the bad value's "
                                        << value_s << " s";
}

TEST(QuotedInput, AWordTokenOfTenMegabytesIsQuotedBriefly) {
  const Tokenizer tok = Tokenizer::build(TokenizerKind::kWord, "the cat");
  try {
    tok.encode("the " + std::string(10u << 20, 'z'), "prompt.txt");
    FAIL() << "encoded an unknown token";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_LT(m.size(), kShortMessage);
    EXPECT_EQ(m.rfind("prompt.txt:1:5: token 'zzz", 0), 0u) << m.substr(0, 200);
    EXPECT_NE(m.find("(10485760 bytes)"), std::string::npos);
  }
}

TEST(QuotedInput, EncoderJsonNestedDeeplyIsRefusedNotACrash) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    BpeTokenizer::from_text(deep, "#version: 0.2\na b\n", "deep.json", "vocab.bpe");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.json 'deep.json': arrays and objects nested deeper than 512"),
              std::string::npos) << e.what();
  }
  // Shallow but large, or a long key: described, not written out.
  const std::string wide = "{\"a\": [" + std::string(1u << 20, '1') + "]}";
  const std::string long_key = "{\"" + std::string(1u << 20, 'k') + "\": -1}";
  for (const std::string& enc : {wide, long_key}) {
    try {
      BpeTokenizer::from_text(enc, "#version: 0.2\na b\n", "enc.json", "vocab.bpe");
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_LT(std::string(e.what()).size(), kShortMessage) << std::string(e.what()).substr(0, 200);
    }
  }
}

TEST(QuotedInput, AVocabBpeLineOfTenMegabytesOrBinaryIsQuotedBriefly) {
  for (const std::string& line : {std::string(10u << 20, 'x'), std::string("\x1b[31m\0\xff evil", 12)}) {
    try {
      BpeTokenizer::from_text("{\"a\": 0}", "#version: 0.2\n" + line + "\n", "enc.json", "long.bpe");
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_LT(m.size(), kShortMessage) << m.substr(0, 200);
      EXPECT_EQ(m.rfind("vocab.bpe 'long.bpe':2: not a merge of two tokens: '", 0), 0u) << m.substr(0, 200);
      for (const char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "a raw byte " << int(c);
    }
  }
}

TEST(QuotedInput, AHostfileThatIsNotOneNamesTheLineAndTheFormat) {
  Scratch s("gpt2_util_test_hostfile");
  const auto passwd = s.file("passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/false\n");
  try {
    read_hostfile(passwd.string());
    FAIL() << "accepted a passwd file";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "hostfile " + passwd.string() + ":1: 'root:x:0:0:root:/root:/bin/bash' is not an MPICH hostfile line "
              "(the count after ':' must be a positive integer, got 'x:0:0:root:/root:/bi... (26 bytes)'); expected "
              "host[:count], e.g. 'node1' or 'node1:4', '#' for a comment");
  }
  if (std::filesystem::is_regular_file("/etc/passwd")) {  // the file itself, where it is one
    try {
      read_hostfile("/etc/passwd");
      FAIL() << "accepted /etc/passwd";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("hostfile /etc/passwd:1: '", 0), 0u) << m;
      EXPECT_NE(m.find("host[:count]"), std::string::npos) << m;
      EXPECT_LT(m.size(), kShortMessage);
    }
  }
  for (const std::string& text : {std::string(10u << 20, 'h') + " x\n", std::string("\x7f" "ELF\x02\x01\x01\0\0", 9),
                                  std::string("localhost:4\n  # fine\nnode 2\n")}) {
    const auto f = s.file("hosts", text);
    try {
      read_hostfile(f.string());
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_LT(m.size(), kShortMessage) << m.substr(0, 200);
      EXPECT_NE(m.find("host[:count]"), std::string::npos) << m;
      for (const char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "a raw byte " << int(c);
    }
  }
  EXPECT_EQ(read_hostfile(s.file("ok", "# two\nlocalhost:2\n127.0.0.1\n").string()).size(), 2u);
}

// The rank files' checksum: its definition worked out by hand on a short
// input, the same digest however the input is cut, and a change of any one
// byte, or two words swapped between lanes, changes it.
TEST(Hash, Fnv1a64x4IsItsDefinitionWhateverTheCuts) {
  std::vector<unsigned char> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 37 + 11);
  auto digest = [](const std::vector<unsigned char>& v, size_t cut) {
    Fnv1a64x4 h;
    for (size_t off = 0; off < v.size(); off += cut) h.update(v.data() + off, std::min(cut, v.size() - off));
    return h.digest();
  };
  // By hand: 31 blocks of 32 bytes into the lanes, 8 bytes left into lane 0 one by one.
  uint64_t lanes[4];
  for (uint64_t i = 0; i < 4; ++i) lanes[i] = kFnvOffsetBasis ^ i;
  for (size_t blk = 0; blk + 32 <= b.size(); blk += 32) {
    for (size_t i = 0; i < 4; ++i) {
      uint64_t w = 0;
      for (int k = 7; k >= 0; --k) w = (w << 8) | b[blk + 8 * i + static_cast<size_t>(k)];
      lanes[i] = (lanes[i] ^ w) * 0x100000001b3ull;
    }
  }
  lanes[0] = fnv1a64(b.data() + 992, 8, lanes[0]);
  const uint64_t want = fnv1a64(lanes, sizeof lanes);
  for (size_t cut : {1000u, 1u, 7u, 31u, 32u, 33u, 500u}) EXPECT_EQ(digest(b, cut), want) << cut;
  std::vector<unsigned char> c = b;
  c[517] ^= 1;
  EXPECT_NE(digest(c, 1000), want);
  c = b;
  std::swap_ranges(c.begin(), c.begin() + 8, c.begin() + 8);  // words 0 and 1 of the first block
  EXPECT_NE(digest(c, 1000), want);
}

}  // namespace
}  // namespace gpt2

// The console's streams on pipes of the test's own (util/console.h). A test
// that blocked would hang here until meson's timeout: the calls return
// whatever the reader does.
namespace console_test {

std::string line_of(int i) {  // 100 bytes, numbered
  std::string l = "line " + std::to_string(i) + " ";
  l.resize(99, '.');
  return l + "\n";
}

// What the pipe holds now (its write end still open), read without waiting.
std::string held(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  // 2,000 lines of 100 bytes for Linux's default 64 KiB pipe (16 pages of
  // 4 KiB), some 3 times it and the console's buffer; more for larger pages.
  int lines() const { return 2000 * std::max(1, fcntl(fd[1], F_GETPIPE_SZ) / (64 << 10)); }
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
};

}  // namespace console_test

TEST(ConsoleStreams, APipeNobodyReadsCostsLinesNotTimeAndEveryLineIsWrittenOrCounted) {
  using namespace console_test;
  Pipe out, err;
  gpt2::console::Streams s(out.fd[1], err.fd[1]);
  const int n = err.lines();
  for (int i = 0; i < n; ++i) s.say(gpt2::console::Stream::kErr, line_of(i));
  EXPECT_GT(s.dropped_lines(), 0u);
  s.drain(std::chrono::milliseconds(20));  // nobody reads: what waits is given up and counted
  const std::string got = held(err.fd[0]);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), '\n') << "the pipe ends inside a line";
  // Whole lines, in order, from the first: the pipe took the first ones, the rest were dropped.
  int lines = 0;
  for (size_t at = 0; at < got.size(); at += 100, ++lines) {
    ASSERT_EQ(got.substr(at, 100), line_of(lines)) << "line " << lines << " of the pipe";
  }
  EXPECT_EQ(static_cast<uint64_t>(lines) + s.dropped_lines(), static_cast<uint64_t>(n));
  EXPECT_TRUE(held(out.fd[0]).empty());
}

TEST(ConsoleStreams, AReaderThatKeepsUpGetsEveryLineInOrder) {
  using namespace console_test;
  Pipe out, err;
  const int n = out.lines();
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t k; (k = ::read(out.fd[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(k));
  });
  uint64_t dropped = 0;
  {
    // A buffer that holds them all: whatever the reader's pace, nothing is dropped.
    gpt2::console::Streams s(out.fd[1], err.fd[1], static_cast<size_t>(n) * 100);
    for (int i = 0; i < n; ++i) s.say(gpt2::console::Stream::kOut, line_of(i));
    s.drain(std::chrono::seconds(60));  // the reader takes it all: ends when nothing waits
    dropped = s.dropped_lines();
  }  // its own descriptor of the pipe closed with it
  ::close(out.fd[1]);
  out.fd[1] = -1;
  reader.join();  // at the end of the pipe: every writer's descriptor closed
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(got.size(), static_cast<size_t>(n) * 100);
  for (int i = 0; i < n; ++i) ASSERT_EQ(got.substr(static_cast<size_t>(i) * 100, 100), line_of(i)) << i;
}

TEST(ConsoleStreams, AReaderThatClosedItsEndCostsLinesWithoutSigpipe) {
  using namespace console_test;
  Pipe out, err;
  ::close(err.fd[0]);
  err.fd[0] = -1;
  gpt2::console::Streams s(out.fd[1], err.fd[1]);
  // SIGPIPE keeps its default (ending the process): the stream is seen gone by poll, never written.
  for (int i = 0; i < 10; ++i) s.say(gpt2::console::Stream::kErr, line_of(i));
  EXPECT_EQ(s.dropped_lines(), 10u);
  s.say(gpt2::console::Stream::kOut, line_of(0));  // the other stream is unaffected
  EXPECT_EQ(held(out.fd[0]), line_of(0));
}
