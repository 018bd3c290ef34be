#include "train/evaluate/multiple_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "util/files.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace {

constexpr size_t kMaxEndings = 16;

// The label as the index of one of `endings` endings, range-checked before
// it is narrowed (4294967297 is out of range, not 1).
int parse_label(const Json& j, size_t endings, const std::string& where) {
  std::optional<uint64_t> label;  // none: negative (out of range)
  if (j.is_number_unsigned()) {
    label = j.get<uint64_t>();
  } else if (j.is_number_integer()) {  // signed in JSON: negative
  } else if (const std::string* s = j.get_ptr<const std::string*>();
             s && !s->empty() && s->size() <= 2 && s->find_first_not_of("0123456789") == std::string::npos) {
    label = std::stoul(*s);
  } else {
    throw std::invalid_argument(fmt::format("{}: \"label\" must be an integer (the right ending's index)", where));
  }
  if (!label || *label >= endings) {
    throw std::invalid_argument(fmt::format("{}: \"label\" {} is not the index of one of its {} endings", where,
                                            excerpt(j.dump(), 40), endings));
  }
  return static_cast<int>(*label);
}

// Refuses a text whose bytes alone need more than `budget` tokens, before
// any encoding (Tokenizer::min_tokens).
void check_fits(const Tokenizer& tok, std::string_view text, size_t budget, const std::string& what,
                const std::string& where, int max_tokens) {
  if (const size_t least = tok.min_tokens(text); least > budget) {
    throw std::invalid_argument(fmt::format(
        "{}: {} is {} bytes, at least {} tokens of this vocabulary: too long for the model's block size {} + 1 "
        "(refused before tokenizing)",
        where, what, text.size(), least, max_tokens));
  }
}

}  // namespace

std::vector<ChoiceExample> read_choice_examples(const std::string& path, const Tokenizer& tok, int max_tokens) {
  const std::string text = read_input_file(path, kMaxChoiceFileBytes, "--hellaswag", "JSON lines (ctx, endings, label)");
  std::vector<ChoiceExample> out;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    Json j;
    try {
      j = parse_json(line, where);
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(e.what());
    }
    if (!j.is_object()) throw std::invalid_argument(fmt::format("{}: not a JSON object", where));
    for (const char* key : {"ctx", "endings", "label"}) {
      if (!j.contains(key)) throw std::invalid_argument(fmt::format("{}: no \"{}\"", where, key));
    }
    if (!j["ctx"].is_string()) throw std::invalid_argument(fmt::format("{}: \"ctx\" must be a string", where));
    const Json& endings = j["endings"];
    if (!endings.is_array() || endings.size() < 2 || endings.size() > kMaxEndings) {
      throw std::invalid_argument(
          fmt::format("{}: \"endings\" must be an array of 2 to {} strings", where, kMaxEndings));
    }
    ChoiceExample ex;
    ex.label = parse_label(j["label"], endings.size(), where);
    // Bounded in bytes before tokenizing: the context and its longest ending
    // must fit max_tokens + 1 tokens, and each ending has at least one.
    const size_t room = static_cast<size_t>(max_tokens) + 1;
    check_fits(tok, j["ctx"].get<std::string>(), room - 1, "the context", where, max_tokens);
    for (size_t e = 0; e < endings.size(); ++e) {
      if (!endings[e].is_string()) throw std::invalid_argument(fmt::format("{}: ending {} is not a string", where, e));
      check_fits(tok, endings[e].get<std::string>(), room - 1, fmt::format("ending {}", e), where, max_tokens);
    }
    ex.context = tok.encode(j["ctx"].get<std::string>(), where + " ctx");
    if (ex.context.empty()) throw std::invalid_argument(fmt::format("{}: \"ctx\" has no tokens", where));
    if (ex.context.size() >= room) {
      throw std::invalid_argument(
          fmt::format("{}: the context is {} tokens, leaving no room for an ending in the "
                      "model's block size {} + 1",
                      where, ex.context.size(), max_tokens));
    }
    size_t longest = 0;
    for (size_t e = 0; e < endings.size(); ++e) {
      const std::string ending = " " + endings[e].get<std::string>();
      check_fits(tok, ending, room - ex.context.size(), fmt::format("ending {} after the context", e), where,
                 max_tokens);
      ex.endings.push_back(tok.encode(ending, fmt::format("{} ending {}", where, e)));
      if (ex.endings.back().empty()) throw std::invalid_argument(fmt::format("{}: ending {} has no tokens", where, e));
      longest = std::max(longest, ex.endings.back().size());
    }
    if (ex.context.size() + longest > static_cast<size_t>(max_tokens) + 1) {
      throw std::invalid_argument(fmt::format(
          "{}: the context ({} tokens) and its longest ending ({}) are {} tokens, above the model's block size {} + 1",
          where, ex.context.size(), longest, ex.context.size() + longest, max_tokens));
    }
    out.push_back(std::move(ex));
  }
  if (out.empty()) throw std::invalid_argument(fmt::format("--hellaswag: '{}' holds no examples", path));
  return out;
}

ChoiceRow choice_row(const ChoiceExample& ex, size_t ending) {
  std::vector<int32_t> row = ex.context;
  row.insert(row.end(), ex.endings[ending].begin(), ex.endings[ending].end());
  ChoiceRow r;
  r.inputs.assign(row.begin(), row.end() - 1);
  r.targets.assign(row.begin() + 1, row.end());
  r.first = ex.context.size() - 1;  // the context's last position predicts the ending's first token
  return r;
}

ChoiceScore score_choices(const ChoiceExample& ex, const std::vector<std::vector<float>>& losses) {
  ChoiceScore s;
  for (size_t e = 0; e < ex.endings.size(); ++e) {
    const size_t first = ex.context.size() - 1, n = ex.endings[e].size();
    double sum = 0;
    for (size_t i = first; i < first + n; ++i) sum += losses[e].at(i);
    s.sum_loss.push_back(sum);
    s.mean_loss.push_back(sum / static_cast<double>(n));
    if (sum < s.sum_loss[static_cast<size_t>(s.pred)]) s.pred = static_cast<int>(e);
    if (s.mean_loss.back() < s.mean_loss[static_cast<size_t>(s.pred_norm)]) s.pred_norm = static_cast<int>(e);
  }
  return s;
}

}  // namespace gpt2
