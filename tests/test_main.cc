// main() of every rkv test binary (the CMake target rkv_test_main, linked in
// place of GTest::gtest_main): gtest's, with glog initialised first. The
// libraries under test log through glog, which otherwise opens each test
// process's output with "WARNING: Logging before InitGoogleLogging() is
// written to STDERR". Their lines still go to stderr alone, no log files.
#include <glog/logging.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return RUN_ALL_TESTS();
}
