// What the sanitizer builds need told that the code cannot say in C++.
//
// RacyByDesign: a scope whose memory accesses, on this thread, ThreadSanitizer
// does not record or check. For one case only: stores into memory that a
// one-sided READ may copy at the same moment, by design. A server writes a
// record into a heap block that a client may still be READing through a
// location it remembered (the block was freed and reused after its grace
// period while a slow READ was in flight). On a NIC that READ is outside
// the C++ memory model; over tcp the transport's thread copies the block
// with atomic loads (common/transport/tcp/shared_copy.h) while the plain
// stores of the encoder run, which TSan reports as a race. The reader
// never trusts such bytes: the block's checksum and key decide
// (common/layout.h). Every other access of the thread, before and after the
// scope, is checked as usual. Outside TSan builds the scope is empty.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define RKV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RKV_TSAN 1
#endif
#endif

#ifdef RKV_TSAN
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace rkv {

class RacyByDesign {
 public:
#ifdef RKV_TSAN
  RacyByDesign() { __tsan_ignore_thread_begin(); }
  ~RacyByDesign() { __tsan_ignore_thread_end(); }
#else
  // User-provided, so that a scope object is never an "unused variable".
  RacyByDesign() {}
  ~RacyByDesign() {}
#endif
  RacyByDesign(const RacyByDesign&) = delete;
  RacyByDesign& operator=(const RacyByDesign&) = delete;
};

}  // namespace rkv
