#include "model/data_config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

void DataConfig::validate() const {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("data.val_fraction: must be in [0, 1), got {}", val_fraction));
  }
  if (!shards.empty() && tokenizer != TokenizerKind::kGpt2) {
    throw std::invalid_argument(fmt::format("data.shards: token shards are GPT-2 BPE ids (serial prepare); set "
                                            "data.tokenizer gpt2, not {}", to_string(tokenizer)));
  }
  if (!shards.empty() && val_fraction != 0) {
    throw std::invalid_argument(fmt::format("data.val_fraction {}: data.shards holds its own validation split "
                                            "(val_*.bin); leave data.val_fraction 0", val_fraction));
  }
}

}  // namespace gpt2
