#include "common/program_help.h"

#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// gflags defines --help itself (in its own source); this file reads it.
DECLARE_bool(help);

// The hook gflags calls to end the process after its help output (exit by
// default); not in its headers, as kvctl's use of it says.
namespace GFLAGS_NAMESPACE {
extern void (*gflags_exitfunc)(int);
}  // namespace GFLAGS_NAMESPACE

namespace rkv {
namespace {

constexpr char kLoggingNote[] =
    "  Logging (glog, in every rkv program): --v=N (verbose messages up to level N),\n"
    "  --minloglevel=0..3 (INFO, WARNING, ERROR, FATAL), --logtostderr, --log_dir=DIR\n"
    "  and the rest of glog's flags; --helpfull lists every flag the program takes.\n";

void PrintHelpAndExit(const char* flags_file) {
  std::string out = gflags::ProgramInvocationShortName();
  out += ": ";
  out += gflags::ProgramUsage();
  out += "\n\n  Flags:\n";
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by file, then by name
  size_t listed = 0;
  for (const gflags::CommandLineFlagInfo& flag : flags) {
    if (flag.filename != flags_file) continue;
    out += gflags::DescribeOneFlag(flag);
    ++listed;
  }
  if (listed == 0) out += "    (none)\n";
  out += "\n";
  out += kLoggingNote;
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  std::exit(0);
}

}  // namespace

void ParseProgramFlags(int* argc, char*** argv, const char* flags_file) {
  gflags::ParseCommandLineNonHelpFlags(argc, argv, /*remove_flags=*/true);
  if (FLAGS_help) PrintHelpAndExit(flags_file);
  // gflags ends every help output with exit(1); asked-for help is a
  // success. Parse errors were reported (exit 1) above.
  void (*const exit_func)(int) = GFLAGS_NAMESPACE::gflags_exitfunc;
  GFLAGS_NAMESPACE::gflags_exitfunc = [](int) {
    std::fflush(stdout);
    std::exit(0);
  };
  gflags::HandleCommandLineHelpFlags();
  GFLAGS_NAMESPACE::gflags_exitfunc = exit_func;
}

}  // namespace rkv
