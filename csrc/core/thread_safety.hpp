// unipool core: which lock a function needs, stated where clang can check it.
//
// Clang's thread-safety analysis (-Wthread-safety) reads these; other
// compilers ignore them. A function that must be called with a lock held
// is declared UNIPOOL_REQUIRES(that_lock), and the analysis reports a call
// made without it. The check runs in CI (tests/CMakeLists.txt,
// host_thread_safety): clang compiles the host engine with
// -Wthread-safety -Werror. Code that takes locks in ways the analysis
// cannot follow (fork handlers, a lock taken on one path only) says so with
// UNIPOOL_NO_THREAD_SAFETY_ANALYSIS.
#pragma once

#if defined(__clang__)
#define UNIPOOL_TSA(x) __attribute__((x))
#else
#define UNIPOOL_TSA(x)
#endif

#define UNIPOOL_CAPABILITY(name) UNIPOOL_TSA(capability(name))
#define UNIPOOL_SCOPED_CAPABILITY UNIPOOL_TSA(scoped_lockable)
#define UNIPOOL_REQUIRES(...) UNIPOOL_TSA(requires_capability(__VA_ARGS__))
#define UNIPOOL_ACQUIRE(...) UNIPOOL_TSA(acquire_capability(__VA_ARGS__))
#define UNIPOOL_RELEASE(...) UNIPOOL_TSA(release_capability(__VA_ARGS__))
#define UNIPOOL_GUARDED_BY(x) UNIPOOL_TSA(guarded_by(x))
#define UNIPOOL_NO_THREAD_SAFETY_ANALYSIS UNIPOOL_TSA(no_thread_safety_analysis)
