// Runs a program to completion with the given standard input, capturing
// its standard output and error, for tests of command-line tools.
#pragma once

#include <string>
#include <vector>

namespace rkv::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when it did not exit normally
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input = "");

}  // namespace rkv::testing
