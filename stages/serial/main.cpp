// Stage 0: serial. One process on the CPU backend (threads from
// train.threads; 1 = truly serial). Everything else is the core's.
#include "backend.h"
#include "cli.h"

int main(int argc, char** argv) {
  gpt2::StageContext ctx{"serial", [](const gpt2::BackendOptions& o) { return gpt2::make_cpu_backend(o.threads); }, nullptr, ""};
  return gpt2::stage_main(argc, argv, ctx);
}
