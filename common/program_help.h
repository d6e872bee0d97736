// Command-line flags of rkv's programs: --help that shows the program's
// own flags.
//
// gflags' --help lists every flag the process links, glog's and gflags'
// own first (about 200 lines of logging and completion flags before the
// program's). Each rkv program defines its flags in its main file, so
// --help prints the usage message and those flags, then one paragraph on
// the logging flags every program also takes; --helpfull still lists
// everything.
#pragma once

namespace rkv {

// Parses and removes the flags of argv as gflags::ParseCommandLineFlags
// does: a bad flag or value prints gflags' error and exits 1, and
// --helpfull, --helpshort, --helpmatch, --version and the others print
// what gflags prints, then exit 0 (gflags exits 1 after its help). --help
// prints gflags' usage message
// (gflags::SetUsageMessage), the flags defined in `flags_file` (the file
// whose __FILE__ the caller passes: its main file) and the logging note, to
// stdout, and exits 0.
void ParseProgramFlags(int* argc, char*** argv, const char* flags_file);

}  // namespace rkv
