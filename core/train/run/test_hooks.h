// Faults and delays the tests inject into a run, kept out of the run's
// configuration (issue 69): not a setting, not in --help, config.yaml or the
// ranks' agreement. A stage program installs them only when the
// environment names them: GPT2_TEST_HOOKS="fail_rank=1,fail_step=3" (every
// rank of an mpiexec or srun job inherits it; docs/testing.md). A run that
// has any says so in its log.
#pragma once

#include <cstdint>
#include <string>

namespace gpt2 {

inline constexpr const char* kTestHooksVariable = "GPT2_TEST_HOOKS";

struct TestHooks {
  int fail_rank = -1;           // this rank throws at step fail_step (a failing rank's job must end, not hang)
  int64_t fail_step = -1;
  double long_step_s = 5.0;     // train.stop_within_step auto: a step longer than this arms the stop inside steps
  double checkpoint_delay_s = 0;  // a sharded save's writer waits this long before writing its file
  double step_sleep_s = 0;      // every rank sleeps this long after each step, outside its timing

  bool any() const;
  // "fail_rank=1,fail_step=3": the hooks that differ from the defaults, as the variable writes them.
  std::string describe() const;
};

// The hooks `text` names ("key=value" entries, comma-separated; "" none).
// Throws std::invalid_argument naming GPT2_TEST_HOOKS and the entry for an
// unknown key or a value out of range.
TestHooks parse_test_hooks(const std::string& text);

}  // namespace gpt2
