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

#define CAPABILITY(x) RKV_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY RKV_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) RKV_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) RKV_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) RKV_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) RKV_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
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
#define NO_THREAD_SAFETY_ANALYSIS RKV_THREAD_ANNOTATION(no_thread_safety_analysis)
