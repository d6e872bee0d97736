// --help of rkv's programs, run as a user runs them: the usage line and the
// program's own flags, not the two hundred lines of glog's and gflags'
// flags that gflags' --help printed first (common/program_help.h);
// --helpfull still lists those; asked-for help exits 0 (gflags' exited 1),
// a bad flag 1.
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "tests/run_command.h"

namespace rkv::testing {
namespace {

bool Contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

struct Program {
  const char* binary;
  std::vector<const char*> own_flags;  // flags its --help must describe
};

std::vector<Program> Programs() {
  std::vector<Program> programs = {
      {RKV_SERVER_BIN, {"-data_dir (", "-token_file (", "-listen (", "-durability (", "-transport ("}},
      {RKV_COORDINATOR_BIN, {"-data_dir (", "-etcd (", "-replicas (", "-lease_ms ("}},
  };
#ifdef RKV_YCSB_BIN
  programs.push_back({RKV_YCSB_BIN, {"-target (", "-workload (", "-key_distribution (", "-output_format ("}});
#endif
#ifdef RKV_GATEWAY_BIN
  programs.push_back({RKV_GATEWAY_BIN, {"-redis_listen (", "-memcached_listen (", "-server (", "-token_file ("}});
#endif
  return programs;
}

TEST(ProgramHelpTest, HelpListsTheProgramsOwnFlagsAndNotTheLoggingLibrarys) {
  for (const Program& p : Programs()) {
    SCOPED_TRACE(p.binary);
    const CommandResult r = RunCommand({p.binary, "--help"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, "Flags:")) << r.out;
    for (const char* flag : p.own_flags) EXPECT_TRUE(Contains(r.out, flag)) << "no " << flag << " in\n" << r.out;
    // glog's and gflags' own flags are named in one note, not described.
    for (const char* other : {"alsologtoemail", "log_backtrace_at", "tab_completion_word", "flagfile ("}) {
      EXPECT_FALSE(Contains(r.out, other)) << other << " in\n" << r.out;
    }
    EXPECT_TRUE(Contains(r.out, "--helpfull lists every flag")) << r.out;
    EXPECT_LT(r.out.size(), 40'000U);
  }
}

TEST(ProgramHelpTest, HelpfullStillListsEveryFlagAndABadFlagStillFails) {
  for (const Program& p : Programs()) {
    SCOPED_TRACE(p.binary);
    CommandResult r = RunCommand({p.binary, "--helpfull"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, "alsologtoemail")) << r.out;
    EXPECT_TRUE(Contains(r.out, p.own_flags.front())) << r.out;

    r = RunCommand({p.binary, "--no_such_flag=1"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(Contains(r.err, "no_such_flag")) << r.err;
  }
}

}  // namespace
}  // namespace rkv::testing
