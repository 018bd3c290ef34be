#include "train/resolve/machine.h"

#include <cstdlib>
#include <limits>

namespace gpt2 {

std::vector<const KernelTiming*> MachineModel::timings(const std::string& op, int threads) const {
  int nearest = -1, gap = std::numeric_limits<int>::max();
  for (const KernelTiming& k : kernels) {
    if (k.op != op) continue;
    const int d = std::abs(k.threads - threads);
    if (d < gap) {
      gap = d;
      nearest = k.threads;
    }
  }
  std::vector<const KernelTiming*> out;
  for (const KernelTiming& k : kernels) {
    if (k.op == op && k.threads == nearest) out.push_back(&k);
  }
  return out;
}

}  // namespace gpt2
