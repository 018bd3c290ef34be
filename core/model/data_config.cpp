#include "model/data_config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

void DataConfig::validate() const {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("data.val_fraction: must be in [0, 1), got {}", val_fraction));
  }
}

}  // namespace gpt2
