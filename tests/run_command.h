// Runs a program to completion with the given standard input, capturing
// its standard output and error, for tests of command-line tools. A program
// still running after `limit` (kCommandLimit) is killed (SIGABRT, then SIGKILL 5 s
// later) and its result says so in `err`: a hung tool fails its test with
// what it printed, instead of holding the suite until its own time limit.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace rkv::testing {

inline constexpr std::chrono::seconds kCommandLimit{180};

struct CommandResult {
  int exit_code = -1;  // -1 when it did not exit normally (killed at kCommandLimit too)
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input = "",
                         std::chrono::seconds limit = kCommandLimit);

}  // namespace rkv::testing
