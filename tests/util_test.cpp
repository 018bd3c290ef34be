// The util layer: field lists (text -> value at the edge, help, YAML), the
// JSON writer on text that is not UTF-8, and the metrics stream round trip.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "train/metrics.h"
#include "util/fields.h"
#include "util/json.h"
#include "util/records.h"
#include "util/stats.h"

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

}  // namespace
}  // namespace gpt2
