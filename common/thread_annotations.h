// Clang's thread-safety attributes (-Wthread-safety), as macros that other
// compilers ignore. Every mutex-protected member says which mutex guards it
// (GUARDED_BY), and every function that expects a lock held says so
// (REQUIRES), so that a clang build checks at compile time what comments
// used to promise. See common/mutex.h for the annotated mutex.
#pragma once

#if defined(__clang__)
#define RKV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define RKV_THREAD_ANNOTATION(x)
#endif

// gRPC's headers include abseil's legacy absl/base/internal/
// thread_annotations.h, which defines GUARDED_BY, PT_GUARDED_BY,
// ACQUIRED_BEFORE, ACQUIRED_AFTER and NO_THREAD_SAFETY_ANALYSIS
// unconditionally, as the same clang attributes. Whichever header comes
// first defines those five (a redefinition in abseil's system header after
// this one is not diagnosed; one here after abseil's would be).
#define CAPABILITY(x) RKV_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY RKV_THREAD_ANNOTATION(scoped_lockable)
#ifndef GUARDED_BY
#define GUARDED_BY(x) RKV_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) RKV_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) RKV_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) RKV_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
#define REQUIRES(...) RKV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) RKV_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) RKV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) RKV_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) RKV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) RKV_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) RKV_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) RKV_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) RKV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) RKV_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) RKV_THREAD_ANNOTATION(lock_returned(x))
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS RKV_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
