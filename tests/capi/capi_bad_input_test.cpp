// The C ABI refuses bad input: one table of cases, at least one for every
// function include/unipool/c/*.h declares. Each case checks the exact status,
// that unipool_last_error() names the problem, and (after the case) that the
// pools it touched are still valid. A function added to a header without a
// case here fails EveryDeclaredFunctionHasACase.
//
// The device part runs on the simulated device (backend=sim); the default
// pools (NULL handle, and the pluggable entry points) come from
// UNIPOOL_DEVICE_CONF, set below before main(). Cases that need a bad
// default configuration, or that end the process, run in a child.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/units.hpp"
#include "unipool/c/pluggable.h"
#include "unipool/unipool.h"

namespace {

using unipool::test::kMiB;

constexpr const char* kDeviceConf = "backend=sim,sim_devices=2,sim_capacity=64MiB";
// The default pools, for NULL handles and the pluggable entry points.
const bool g_default_conf = ::setenv("UNIPOOL_DEVICE_CONF", kDeviceConf, 1) == 0;

constexpr size_t kHuge = std::numeric_limits<size_t>::max();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What a case works on: a host pool and a device pool set of its own.
struct Env {
  unipool_host_pool_t* host = nullptr;
  unipool_device_pools_t* dev = nullptr;
  char stack_bytes[64] = {};  // a pointer no pool gave out
  void* foreign() { return stack_bytes + 16; }
};

struct Case {
  const char* function;   // the C function the case is about
  const char* bad_input;  // what is wrong with the call
  void (*run)(Env&);
};

// The status is `want` and the thread's last error names `needle`.
::testing::AssertionResult Refused(unipool_status_t got, unipool_status_t want, const char* needle) {
  const std::string error = unipool_last_error();
  if (got == want && error.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "status " << got << " (" << unipool_status_string(got) << "), want " << want
                                       << " (" << unipool_status_string(want) << "); last error '" << error
                                       << "', want it to contain '" << needle << "'";
}
#define EXPECT_REFUSED(call, want, needle) EXPECT_TRUE(Refused((call), (want), (needle)))

::testing::AssertionResult LastErrorNames(const char* needle) {
  const std::string error = unipool_last_error();
  if (error.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "last error '" << error << "' does not contain '" << needle << "'";
}

// A child's verdict: exit 0 when `ok`, else print why and exit 1.
[[noreturn]] void child_exit(bool ok, const std::string& why) {
  if (!ok) std::fprintf(stderr, "%s (last error: '%s')\n", why.c_str(), unipool_last_error());
  std::fflush(stderr);
  ::_exit(ok ? 0 : 1);
}

// Runs `body` in a child whose UNIPOOL_<which>_CONF is `conf`: the default
// pools are made once per process, so a bad one needs a process of its own.
#define EXPECT_IN_CHILD_WITH_CONF(var, conf, body)  \
  do {                                              \
    GTEST_FLAG_SET(death_test_style, "threadsafe"); \
    EXPECT_EXIT(                                    \
        {                                           \
          ::setenv(var, conf, 1);                   \
          body;                                     \
        },                                          \
        ::testing::ExitedWithCode(0), "");          \
  } while (0)

void* host_block(Env& e, size_t size) {
  void* p = nullptr;
  EXPECT_EQ(unipool_host_alloc(e.host, size, &p), UNIPOOL_OK) << unipool_last_error();
  return p;
}

void* device_block(unipool_device_pools_t* pools, size_t size, int device) {
  void* p = nullptr;
  EXPECT_EQ(unipool_device_alloc(pools, size, device, nullptr, &p), UNIPOOL_OK) << unipool_last_error();
  return p;
}

// ---- common.h -----------------------------------------------------------------

std::vector<Case> common_cases() {
  return {
      {"unipool_status_string", "a value past the last status",
       [](Env&) {
         EXPECT_STREQ(unipool_status_string(static_cast<unipool_status_t>(12)), "unknown status");
         EXPECT_STREQ(unipool_status_string(static_cast<unipool_status_t>(256)), "unknown status");  // not "ok"
         EXPECT_STREQ(unipool_status_string(static_cast<unipool_status_t>(-1)), "unknown status");
         EXPECT_STREQ(unipool_status_string(UNIPOOL_NOT_LIVE),
                      "not a live allocation (double free, foreign or interior pointer)");
       }},
      {"unipool_pinning_state_string", "a value past the last state",
       [](Env&) {
         EXPECT_STREQ(unipool_pinning_state_string(static_cast<unipool_pinning_state_t>(4)), "unknown pinning state");
         EXPECT_STREQ(unipool_pinning_state_string(static_cast<unipool_pinning_state_t>(256)),
                      "unknown pinning state");  // not "pageable"
         EXPECT_STREQ(unipool_pinning_state_string(static_cast<unipool_pinning_state_t>(-1)), "unknown pinning state");
       }},
      {"unipool_last_error", "a thread that made no call: \"\", never NULL",
       [](Env& e) {
         void* p = nullptr;
         EXPECT_EQ(unipool_host_alloc(e.host, 0, &p), UNIPOOL_ZERO_SIZE);
         const char* other = "unset";
         std::thread([&] { other = unipool_last_error(); }).join();
         ASSERT_NE(other, nullptr);
         EXPECT_STREQ(other, "");
         EXPECT_TRUE(LastErrorNames("0 bytes"));  // per thread: this one's is still there
       }},
  };
}

// ---- host.h: making, checking and destroying pools ------------------------------

std::vector<Case> host_pool_cases() {
  return {
      {"unipool_host_create", "an unknown key",
       [](Env&) {
         auto* out = reinterpret_cast<unipool_host_pool_t*>(0x1);
         EXPECT_REFUSED(unipool_host_create("bogus=3", &out), UNIPOOL_BAD_ARGUMENT, "unknown key 'bogus'");
         EXPECT_EQ(out, nullptr);
       }},
      {"unipool_host_create", "a bad value",
       [](Env&) {
         unipool_host_pool_t* out = nullptr;
         EXPECT_REFUSED(unipool_host_create("reserve=lots", &out), UNIPOOL_BAD_ARGUMENT, "reserve");
         EXPECT_REFUSED(unipool_host_create("limit=1", &out), UNIPOOL_BAD_ARGUMENT, "limit");
         EXPECT_EQ(out, nullptr);
       }},
      {"unipool_host_create", "a NULL out pointer",
       [](Env&) { EXPECT_REFUSED(unipool_host_create("", nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL"); }},
      {"unipool_host_destroy", "NULL, and the default pool: no-ops",
       [](Env&) {
         unipool_host_destroy(nullptr);
         unipool_host_pool_t* def = unipool_host_default();
         ASSERT_NE(def, nullptr) << unipool_last_error();
         unipool_host_destroy(def);
         EXPECT_EQ(unipool_host_validate(def), UNIPOOL_OK) << unipool_last_error();
       }},
      {"unipool_host_default", "a bad UNIPOOL_HOST_CONF",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_HOST_CONF", "no_such_key=1", {
           const bool ok = unipool_host_default() == nullptr && LastErrorNames("no_such_key");
           child_exit(ok, "unipool_host_default() with a bad UNIPOOL_HOST_CONF");
         });
       }},
      {"unipool_host_config_check", "an unknown key, a repeated key, a key without its prerequisite",
       [](Env&) {
         EXPECT_REFUSED(unipool_host_config_check("bogus=3"), UNIPOOL_BAD_ARGUMENT, "bogus");
         EXPECT_REFUSED(unipool_host_config_check("limit=1GiB,limit=2GiB"), UNIPOOL_BAD_ARGUMENT, "given twice");
         EXPECT_REFUSED(unipool_host_config_check("pin_thread=on"), UNIPOOL_BAD_ARGUMENT, "pin_thread");
         EXPECT_REFUSED(unipool_host_config_check("reserve"), UNIPOOL_BAD_ARGUMENT, "not key=value");
         EXPECT_EQ(unipool_host_config_check(nullptr), UNIPOOL_OK);  // NULL: the defaults
       }},
      {"unipool_host_validate", "a NULL pool",
       [](Env&) { EXPECT_REFUSED(unipool_host_validate(nullptr), UNIPOOL_BAD_ARGUMENT, "NULL"); }},
  };
}

// ---- host.h: allocation ----------------------------------------------------------

std::vector<Case> host_alloc_cases() {
  return {
      {"unipool_host_alloc", "a NULL pool",
       [](Env&) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_host_alloc(nullptr, 10, &p), UNIPOOL_BAD_ARGUMENT, "pool is NULL");
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_host_alloc", "a NULL out pointer",
       [](Env& e) { EXPECT_REFUSED(unipool_host_alloc(e.host, 10, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL"); }},
      {"unipool_host_alloc", "zero bytes",
       [](Env& e) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_host_alloc(e.host, 0, &p), UNIPOOL_ZERO_SIZE, "0 bytes");
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_host_alloc", "SIZE_MAX bytes, and more than the limit",
       [](Env& e) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_host_alloc(e.host, kHuge, &p), UNIPOOL_TOO_LARGE, "");
         EXPECT_EQ(p, nullptr);
         EXPECT_REFUSED(unipool_host_alloc(e.host, 200 * kMiB, &p), UNIPOOL_OUT_OF_SPACE, "limit");
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_host_alloc_aligned", "alignments that are not powers of two (0 is the default, 16)",
       [](Env& e) {
         for (size_t alignment : {size_t{3}, size_t{12}, size_t{24}, kHuge}) {
           void* p = reinterpret_cast<void*>(0x1);
           EXPECT_REFUSED(unipool_host_alloc_aligned(e.host, 100, alignment, &p), UNIPOOL_BAD_ALIGNMENT, "power of two")
               << alignment;
           EXPECT_EQ(p, nullptr);
         }
       }},
      {"unipool_host_alloc_aligned", "a NULL pool, a NULL out pointer, zero and SIZE_MAX bytes",
       [](Env& e) {
         void* p = nullptr;
         EXPECT_REFUSED(unipool_host_alloc_aligned(nullptr, 10, 64, &p), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_REFUSED(unipool_host_alloc_aligned(e.host, 10, 64, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
         EXPECT_REFUSED(unipool_host_alloc_aligned(e.host, 0, 64, &p), UNIPOOL_ZERO_SIZE, "0 bytes");
         EXPECT_EQ(unipool_host_alloc_aligned(e.host, kHuge, 64, &p), UNIPOOL_TOO_LARGE);
         EXPECT_EQ(unipool_host_alloc_aligned(e.host, 100, size_t{1} << 63, &p), UNIPOOL_TOO_LARGE);
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_host_alloc_zeroed", "a NULL pool, a NULL out pointer, zero and SIZE_MAX bytes",
       [](Env& e) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_host_alloc_zeroed(nullptr, 10, &p), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_EQ(p, nullptr);
         EXPECT_REFUSED(unipool_host_alloc_zeroed(e.host, 10, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
         EXPECT_REFUSED(unipool_host_alloc_zeroed(e.host, 0, &p), UNIPOOL_ZERO_SIZE, "0 bytes");
         EXPECT_EQ(unipool_host_alloc_zeroed(e.host, kHuge, &p), UNIPOOL_TOO_LARGE);
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_host_realloc",
       "a NULL pool or out pointer, foreign, interior and freed pointers, zero and "
       "SIZE_MAX bytes: refused, the block still live",
       [](Env& e) {
         auto* block = static_cast<char*>(host_block(e, 4096));
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_host_realloc(nullptr, block, 10, &p), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_EQ(p, nullptr);
         EXPECT_REFUSED(unipool_host_realloc(e.host, block, 10, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
         EXPECT_REFUSED(unipool_host_realloc(e.host, e.foreign(), 10, &p), UNIPOOL_NOT_LIVE, "not a live block");
         EXPECT_REFUSED(unipool_host_realloc(e.host, block + 64, 10, &p), UNIPOOL_NOT_LIVE, "not a live block");
         EXPECT_REFUSED(unipool_host_realloc(e.host, block, 0, &p), UNIPOOL_ZERO_SIZE, "0 bytes");
         EXPECT_EQ(unipool_host_realloc(e.host, block, kHuge, &p), UNIPOOL_TOO_LARGE);
         EXPECT_EQ(p, nullptr);
         EXPECT_EQ(unipool_host_usable_size(e.host, block), 4096u);
         EXPECT_EQ(unipool_host_free(e.host, block), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_host_realloc(e.host, block, 10, &p), UNIPOOL_NOT_LIVE, "not a live block");
       }},
  };
}

// ---- host.h: frees ---------------------------------------------------------------

struct FenceCalls {
  int completed = 0, released = 0;
};
int fence_completed(void* c, uint64_t) { return ++static_cast<FenceCalls*>(c)->completed, 1; }
void fence_release(void* c, uint64_t) { ++static_cast<FenceCalls*>(c)->released; }

std::vector<Case> host_free_cases() {
  return {
      {"unipool_host_free", "a NULL pool",
       [](Env& e) {
         void* p = host_block(e, 100);
         EXPECT_REFUSED(unipool_host_free(nullptr, p), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);  // still live, so still ours to free
       }},
      {"unipool_host_free", "a double, an interior and a foreign pointer",
       [](Env& e) {
         auto* p = static_cast<char*>(host_block(e, 4096));
         EXPECT_REFUSED(unipool_host_free(e.host, p + 64), UNIPOOL_NOT_LIVE, "");
         EXPECT_REFUSED(unipool_host_free(e.host, e.foreign()), UNIPOOL_NOT_LIVE, "");
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_host_free(e.host, p), UNIPOOL_NOT_LIVE, "double free");
       }},
      {"unipool_host_free", "a block of another pool",
       [](Env& e) {
         unipool_host_pool_t* other = nullptr;
         ASSERT_EQ(unipool_host_create("reserve=64MiB", &other), UNIPOOL_OK);
         void* p = nullptr;
         ASSERT_EQ(unipool_host_alloc(other, 100, &p), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_host_free(e.host, p), UNIPOOL_NOT_LIVE, "");
         EXPECT_EQ(unipool_host_free(other, p), UNIPOOL_OK);
         EXPECT_EQ(unipool_host_validate(other), UNIPOOL_OK) << unipool_last_error();
         unipool_host_destroy(other);
       }},
      {"unipool_host_free_after", "a NULL pool, a NULL source, a source without completed()",
       [](Env& e) {
         FenceCalls calls;
         const unipool_host_fence_t good{&calls, fence_completed, fence_release};
         const unipool_host_fence_t no_completed{&calls, nullptr, fence_release};
         void* p = host_block(e, 100);
         EXPECT_REFUSED(unipool_host_free_after(nullptr, p, &good, 1), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_REFUSED(unipool_host_free_after(e.host, p, nullptr, 1), UNIPOOL_BAD_ARGUMENT, "completed()");
         EXPECT_REFUSED(unipool_host_free_after(e.host, p, &no_completed, 1), UNIPOOL_BAD_ARGUMENT, "completed()");
         EXPECT_EQ(calls.released, 0);
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);  // none of them took the block
       }},
      {"unipool_host_free_after", "a foreign and an already freed pointer: the fence is not kept",
       [](Env& e) {
         FenceCalls calls;
         const unipool_host_fence_t source{&calls, fence_completed, fence_release};
         EXPECT_REFUSED(unipool_host_free_after(e.host, e.foreign(), &source, 1), UNIPOOL_NOT_LIVE, "");
         void* p = host_block(e, 100);
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_host_free_after(e.host, p, &source, 2), UNIPOOL_NOT_LIVE, "");
         EXPECT_EQ(unipool_host_collect_deferred(e.host), 0u);
         EXPECT_EQ(calls.released, 0);
       }},
      {"unipool_host_collect_deferred", "a NULL pool: nothing collected",
       [](Env&) { EXPECT_EQ(unipool_host_collect_deferred(nullptr), 0u); }},
  };
}

// ---- host.h: queries and maintenance -----------------------------------------------

std::vector<Case> host_query_cases() {
  return {
      {"unipool_host_usable_size", "NULL pool, NULL, foreign, interior and freed pointers: 0",
       [](Env& e) {
         auto* p = static_cast<char*>(host_block(e, 4096));
         EXPECT_EQ(unipool_host_usable_size(nullptr, p), 0u);
         EXPECT_EQ(unipool_host_usable_size(e.host, nullptr), 0u);
         EXPECT_EQ(unipool_host_usable_size(e.host, e.foreign()), 0u);
         EXPECT_EQ(unipool_host_usable_size(e.host, p + 64), 0u);
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);
         EXPECT_EQ(unipool_host_usable_size(e.host, p), 0u);
       }},
      {"unipool_host_is_pinned", "NULL pool, NULL and foreign pointers: 0",
       [](Env& e) {
         void* p = host_block(e, 100);
         EXPECT_EQ(unipool_host_is_pinned(nullptr, p), 0);
         EXPECT_EQ(unipool_host_is_pinned(e.host, nullptr), 0);
         EXPECT_EQ(unipool_host_is_pinned(e.host, e.foreign()), 0);
         EXPECT_EQ(unipool_host_free(e.host, p), UNIPOOL_OK);
       }},
      {"unipool_host_pinning_state", "a NULL pool: pageable",
       [](Env&) { EXPECT_EQ(unipool_host_pinning_state(nullptr), UNIPOOL_PINNING_PAGEABLE); }},
      {"unipool_host_wait_for_pinning", "a NULL pool, and a pool without a pinning thread: return at once",
       [](Env& e) {
         unipool_host_wait_for_pinning(nullptr);
         unipool_host_wait_for_pinning(e.host);
       }},
      {"unipool_host_flush_thread_cache", "a NULL pool: a no-op",
       [](Env&) { unipool_host_flush_thread_cache(nullptr); }},
      {"unipool_host_trim", "a NULL pool: a no-op", [](Env&) { unipool_host_trim(nullptr); }},
      {"unipool_host_reset_peak_stats", "a NULL pool: a no-op", [](Env&) { unipool_host_reset_peak_stats(nullptr); }},
      {"unipool_host_stats", "a NULL pool, a NULL out pointer",
       [](Env& e) {
         unipool_host_stats_t st{};
         st.size = sizeof st;
         EXPECT_REFUSED(unipool_host_stats(nullptr, &st), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_REFUSED(unipool_host_stats(e.host, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
       }},
      {"unipool_host_stats", "a size too small for any field: nothing written",
       [](Env& e) {
         for (uint64_t size : {uint64_t{0}, uint64_t{7}, uint64_t{8}, uint64_t{15}}) {
           unipool_host_stats_t st{};
           st.size = size;
           st.requested_bytes = 12345;
           EXPECT_REFUSED(unipool_host_stats(e.host, &st), UNIPOOL_BAD_ARGUMENT, "size") << size;
           EXPECT_EQ(st.size, size);
           EXPECT_EQ(st.requested_bytes, 12345u);
         }
       }},
      {"unipool_host_stats", "a size larger than the struct: only the struct is written",
       [](Env& e) {
         unsigned char buffer[sizeof(unipool_host_stats_t) + 16];
         std::memset(buffer, 0xEE, sizeof buffer);
         auto* st = reinterpret_cast<unipool_host_stats_t*>(buffer);
         st->size = sizeof buffer;
         EXPECT_EQ(unipool_host_stats(e.host, st), UNIPOOL_OK) << unipool_last_error();
         EXPECT_EQ(st->size, sizeof(unipool_host_stats_t));
         for (size_t i = sizeof(unipool_host_stats_t); i < sizeof buffer; ++i) EXPECT_EQ(buffer[i], 0xEE) << i;
       }},
  };
}

// ---- host.h: history ---------------------------------------------------------------

std::vector<Case> host_history_cases() {
  return {
      {"unipool_host_record_history", "a NULL pool; a ring whose bytes wrap past 2^64",
       [](Env& e) {
         EXPECT_REFUSED(unipool_host_record_history(nullptr, 10), UNIPOOL_BAD_ARGUMENT, "NULL");
         for (size_t n : {(size_t{1} << 59) + 1, kHuge}) {
           EXPECT_REFUSED(unipool_host_record_history(e.host, n), UNIPOOL_OUT_OF_SPACE, "cannot map") << n;
         }
         for (int i = 0; i < 300; ++i) unipool_host_free(e.host, host_block(e, 64));  // nothing is recorded
         size_t needed = 0;
         char json[64];
         EXPECT_EQ(unipool_host_history_json(e.host, json, sizeof json, &needed), UNIPOOL_OK) << unipool_last_error();
         EXPECT_STREQ(json, "{\"max_entries\": 0, \"entries\": []}");
       }},
      {"unipool_host_history_json", "a NULL pool, a buffer too small, a NULL buffer",
       [](Env& e) {
         ASSERT_EQ(unipool_host_record_history(e.host, 16), UNIPOOL_OK) << unipool_last_error();
         unipool_host_free(e.host, host_block(e, 64));
         char small[8] = "keep";
         size_t needed = 0;
         EXPECT_REFUSED(unipool_host_history_json(nullptr, small, sizeof small, &needed), UNIPOOL_BAD_ARGUMENT, "NULL");
         EXPECT_REFUSED(unipool_host_history_json(e.host, small, sizeof small, &needed), UNIPOOL_OUT_OF_SPACE,
                        "the buffer has 8");
         EXPECT_STREQ(small, "keep");
         EXPECT_GT(needed, sizeof small);
         EXPECT_REFUSED(unipool_host_history_json(e.host, nullptr, 1000, nullptr), UNIPOOL_OUT_OF_SPACE,
                        "the buffer has 0");
         EXPECT_EQ(unipool_host_record_history(e.host, 0), UNIPOOL_OK);
       }},
  };
}

// ---- device.h: making and destroying pool sets ------------------------------------

std::vector<Case> device_pools_cases() {
  return {
      {"unipool_device_pools_create", "an unknown key, a bad value, an unknown backend",
       [](Env&) {
         auto* out = reinterpret_cast<unipool_device_pools_t*>(0x1);
         EXPECT_REFUSED(unipool_device_pools_create("backend=sim,bogus=1", &out), UNIPOOL_BAD_ARGUMENT, "bogus");
         EXPECT_EQ(out, nullptr);
         EXPECT_REFUSED(unipool_device_pools_create("backend=sim,memory_fraction=7", &out), UNIPOOL_BAD_ARGUMENT,
                        "memory_fraction");
         EXPECT_REFUSED(unipool_device_pools_create("backend=sim,sim_capacity=1KiB", &out), UNIPOOL_BAD_ARGUMENT,
                        "sim_capacity");
         EXPECT_REFUSED(unipool_device_pools_create("backend=nope", &out), UNIPOOL_BAD_ARGUMENT, "nope");
         EXPECT_EQ(out, nullptr);
       }},
      {"unipool_device_pools_create", "a NULL out pointer",
       [](Env&) {
         EXPECT_REFUSED(unipool_device_pools_create(kDeviceConf, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
       }},
      {"unipool_device_pools_destroy", "NULL: a no-op", [](Env&) { unipool_device_pools_destroy(nullptr); }},
      {"unipool_device_default", "a bad UNIPOOL_DEVICE_CONF",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_DEVICE_CONF", "backend=sim,bogus_key=1", {
           const bool ok = unipool_device_default() == nullptr && LastErrorNames("bogus_key");
           child_exit(ok, "unipool_device_default() with a bad UNIPOOL_DEVICE_CONF");
         });
       }},
      {"unipool_device_count", "the default pools with a bad UNIPOOL_DEVICE_CONF: 0",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_DEVICE_CONF", "backend=sim,bogus_key=1", {
           const bool ok = unipool_device_count(nullptr) == 0 && LastErrorNames("bogus_key");
           child_exit(ok, "unipool_device_count(NULL) with a bad UNIPOOL_DEVICE_CONF");
         });
       }},
      {"unipool_device_validate", "the default pools with a bad UNIPOOL_DEVICE_CONF",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_DEVICE_CONF", "backend=sim,bogus_key=1", {
           const bool ok = unipool_device_validate(nullptr) == UNIPOOL_BAD_ARGUMENT && LastErrorNames("bogus_key");
           child_exit(ok, "unipool_device_validate(NULL) with a bad UNIPOOL_DEVICE_CONF");
         });
       }},
  };
}

// ---- device.h: allocation and frees ------------------------------------------------

std::vector<Case> device_alloc_cases() {
  return {
      {"unipool_device_alloc", "a NULL out pointer",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_alloc(e.dev, kMiB, 0, nullptr, nullptr), UNIPOOL_BAD_ARGUMENT, "out is NULL");
       }},
      {"unipool_device_alloc", "zero, SIZE_MAX and more than the device holds",
       [](Env& e) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_device_alloc(e.dev, 0, 0, nullptr, &p), UNIPOOL_ZERO_SIZE, "");
         EXPECT_EQ(p, nullptr);
         EXPECT_REFUSED(unipool_device_alloc(e.dev, kHuge, 0, nullptr, &p), UNIPOOL_TOO_LARGE,
                        "larger than any device");
         EXPECT_REFUSED(unipool_device_alloc(e.dev, 100 * kMiB, 1, nullptr, &p), UNIPOOL_OUT_OF_SPACE,
                        "Tried to allocate 100.00 MiB");
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_device_alloc", "devices -1 and 2 of 2",
       [](Env& e) {
         void* p = reinterpret_cast<void*>(0x1);
         EXPECT_REFUSED(unipool_device_alloc(e.dev, kMiB, -1, nullptr, &p), UNIPOOL_BAD_ARGUMENT, "device -1");
         EXPECT_REFUSED(unipool_device_alloc(e.dev, kMiB, 2, nullptr, &p), UNIPOOL_BAD_ARGUMENT, "device 2");
         EXPECT_EQ(p, nullptr);
       }},
      {"unipool_device_free", "a double, an interior and a foreign pointer",
       [](Env& e) {
         auto* p = static_cast<char*>(device_block(e.dev, kMiB, 0));
         EXPECT_REFUSED(unipool_device_free(e.dev, p + 512), UNIPOOL_NOT_LIVE, "");
         EXPECT_REFUSED(unipool_device_free(e.dev, e.foreign()), UNIPOOL_NOT_LIVE, "");
         EXPECT_EQ(unipool_device_free(e.dev, p), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_device_free(e.dev, p), UNIPOOL_NOT_LIVE, "double free");
       }},
      {"unipool_device_free", "a block of another pool set",
       [](Env& e) {
         void* p = device_block(nullptr, kMiB, 0);
         EXPECT_REFUSED(unipool_device_free(e.dev, p), UNIPOOL_NOT_LIVE, "");
         EXPECT_EQ(unipool_device_free(nullptr, p), UNIPOOL_OK);
       }},
      {"unipool_device_free_on", "a foreign pointer; a device out of range is only a hint",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_free_on(e.dev, e.foreign(), 0), UNIPOOL_NOT_LIVE, "");
         EXPECT_REFUSED(unipool_device_free_on(e.dev, e.foreign(), 7), UNIPOOL_NOT_LIVE, "");
         void* p = device_block(e.dev, kMiB, 1);
         EXPECT_EQ(unipool_device_free_on(e.dev, p, 7), UNIPOOL_OK) << unipool_last_error();
         EXPECT_REFUSED(unipool_device_free_on(e.dev, p, 1), UNIPOOL_NOT_LIVE, "double free");
       }},
      {"unipool_device_record_stream", "a foreign and a freed pointer",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_record_stream(e.dev, e.foreign(), reinterpret_cast<void*>(0x20)),
                        UNIPOOL_NOT_LIVE, "");
         void* p = device_block(e.dev, kMiB, 0);
         EXPECT_EQ(unipool_device_free(e.dev, p), UNIPOOL_OK);
         EXPECT_REFUSED(unipool_device_record_stream(e.dev, p, reinterpret_cast<void*>(0x20)), UNIPOOL_NOT_LIVE, "");
       }},
  };
}

// ---- device.h: statistics and limits -----------------------------------------------

std::vector<Case> device_stats_cases() {
  return {
      {"unipool_device_empty_cache", "devices -2 and 2 of 2",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_empty_cache(e.dev, -2), UNIPOOL_BAD_ARGUMENT, "device -2");
         EXPECT_REFUSED(unipool_device_empty_cache(e.dev, 2), UNIPOOL_BAD_ARGUMENT, "device 2");
       }},
      {"unipool_device_stat", "an unknown key, a NULL key, a NULL value, a bad device",
       [](Env& e) {
         int64_t v = 42;
         EXPECT_REFUSED(unipool_device_stat(e.dev, 0, "no.such.key", &v), UNIPOOL_BAD_ARGUMENT, "'no.such.key'");
         EXPECT_REFUSED(unipool_device_stat(e.dev, 0, nullptr, &v), UNIPOOL_BAD_ARGUMENT, "null key");
         EXPECT_REFUSED(unipool_device_stat(e.dev, 0, "num_ooms", nullptr), UNIPOOL_BAD_ARGUMENT, "value");
         EXPECT_REFUSED(unipool_device_stat(e.dev, 2, "num_ooms", &v), UNIPOOL_BAD_ARGUMENT, "device 2");
         EXPECT_REFUSED(unipool_device_stat(e.dev, -1, "num_ooms", &v), UNIPOOL_BAD_ARGUMENT, "device -1");
         EXPECT_EQ(v, 42);
       }},
      {"unipool_device_stat_key", "an index past the last key: NULL",
       [](Env&) {
         size_t n = 0;
         while (unipool_device_stat_key(n) != nullptr) ++n;
         EXPECT_GT(n, 0u);
         EXPECT_EQ(unipool_device_stat_key(n + 1), nullptr);
         EXPECT_EQ(unipool_device_stat_key(kHuge), nullptr);
       }},
      {"unipool_device_reset_peak_stats", "devices -2 and 2 of 2",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_reset_peak_stats(e.dev, -2), UNIPOOL_BAD_ARGUMENT, "device -2");
         EXPECT_REFUSED(unipool_device_reset_peak_stats(e.dev, 2), UNIPOOL_BAD_ARGUMENT, "device 2");
       }},
      {"unipool_device_reset_accumulated_stats", "devices -2 and 2 of 2",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_reset_accumulated_stats(e.dev, -2), UNIPOOL_BAD_ARGUMENT, "device -2");
         EXPECT_REFUSED(unipool_device_reset_accumulated_stats(e.dev, 2), UNIPOOL_BAD_ARGUMENT, "device 2");
       }},
      {"unipool_device_snapshot_json", "a bad device: 0 and the reason; nothing written",
       [](Env& e) {
         char buffer[16] = "untouched";
         EXPECT_EQ(unipool_device_snapshot_json(e.dev, 2, buffer, sizeof buffer), 0u);
         EXPECT_TRUE(LastErrorNames("device 2"));
         EXPECT_EQ(unipool_device_snapshot_json(e.dev, -2, buffer, sizeof buffer), 0u);
         EXPECT_STREQ(buffer, "untouched");
         EXPECT_GT(unipool_device_snapshot_json(e.dev, 0, nullptr, 100), 0u);  // NULL buffer: only the size
       }},
      {"unipool_device_set_memory_fraction", "fractions out of [0, 1], NaN, a bad device",
       [](Env& e) {
         for (double f : {-0.1, 1.5, kNaN, std::numeric_limits<double>::infinity()}) {
           EXPECT_REFUSED(unipool_device_set_memory_fraction(e.dev, 0, f), UNIPOOL_BAD_ARGUMENT, "memory fraction")
               << f;
         }
         EXPECT_REFUSED(unipool_device_set_memory_fraction(e.dev, 2, 0.5), UNIPOOL_BAD_ARGUMENT, "device 2");
         void* p = device_block(e.dev, 48 * kMiB, 0);  // no limit was set
         EXPECT_EQ(unipool_device_free(e.dev, p), UNIPOOL_OK);
       }},
      {"unipool_device_set_memory_limit", "devices -2 and 2 of 2",
       [](Env& e) {
         EXPECT_REFUSED(unipool_device_set_memory_limit(e.dev, -2, kMiB), UNIPOOL_BAD_ARGUMENT, "device -2");
         EXPECT_REFUSED(unipool_device_set_memory_limit(e.dev, 2, kMiB), UNIPOOL_BAD_ARGUMENT, "device 2");
       }},
  };
}

// ---- pluggable.h: torch's entry points, on the default pools -------------------------

std::vector<Case> pluggable_cases() {
  return {
      {"unipool_alloc", "zero bytes: NULL", [](Env&) { EXPECT_EQ(unipool_alloc(0, 0, nullptr), nullptr); }},
      {"unipool_alloc", "SIZE_MAX bytes, a bad device: NULL and the reason",
       [](Env&) {
         EXPECT_EQ(unipool_alloc(kHuge, 0, nullptr), nullptr);
         EXPECT_TRUE(LastErrorNames("larger than any device"));
         EXPECT_EQ(unipool_alloc(kMiB, 5, nullptr), nullptr);
         EXPECT_TRUE(LastErrorNames("device 5"));
         EXPECT_EQ(unipool_alloc(kMiB, -1, nullptr), nullptr);
         EXPECT_TRUE(LastErrorNames("device -1"));
       }},
      {"unipool_free", "NULL: a no-op", [](Env&) { unipool_free(nullptr, 0, 0, nullptr); }},
      {"unipool_free", "a foreign pointer ends the process with the reason",
       [](Env& e) {
         GTEST_FLAG_SET(death_test_style, "threadsafe");
         EXPECT_DEATH(unipool_free(e.foreign(), 16, 0, nullptr), "unipool_free\\(0x[0-9a-f]+, device 0\\): ");
       }},
      {"unipool_free", "a double free ends the process with the reason",
       [](Env&) {
         GTEST_FLAG_SET(death_test_style, "threadsafe");
         EXPECT_DEATH(
             {
               void* p = unipool_alloc(kMiB, 1, nullptr);
               unipool_free(p, kMiB, 1, nullptr);
               unipool_free(p, kMiB, 1, nullptr);
             },
             "unipool_free\\(0x[0-9a-f]+, device 1\\): .*double free");
       }},
  };
}

std::vector<Case> pluggable_maintenance_cases() {
  return {
      {"unipool_init", "a bad UNIPOOL_DEVICE_CONF: the reason, and the process goes on",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_DEVICE_CONF", "backend=sim,bogus_key=1", {
           unipool_init(1);
           const bool ok = LastErrorNames("bogus_key") && unipool_alloc(kMiB, 0, nullptr) == nullptr;
           child_exit(ok, "unipool_init with a bad UNIPOOL_DEVICE_CONF");
         });
         unipool_init(-1);  // the count is torch's; the pools know their own
         EXPECT_EQ(unipool_device_count(nullptr), 2);
       }},
      {"unipool_reset", "a bad UNIPOOL_DEVICE_CONF: the reason, and the process goes on",
       [](Env&) {
         EXPECT_IN_CHILD_WITH_CONF("UNIPOOL_DEVICE_CONF", "backend=sim,bogus_key=1", {
           unipool_reset();
           child_exit(LastErrorNames("bogus_key"), "unipool_reset with a bad UNIPOOL_DEVICE_CONF");
         });
       }},
      {"unipool_memory_fraction", "out of [0, 1], a bad device: refused, the limit unchanged",
       [](Env&) {
         unipool_memory_fraction(2.0, 0);
         EXPECT_TRUE(LastErrorNames("memory fraction"));
         unipool_memory_fraction(kNaN, 0);
         EXPECT_TRUE(LastErrorNames("memory fraction"));
         unipool_memory_fraction(0.5, 9);
         EXPECT_TRUE(LastErrorNames("device 9"));
         void* p = unipool_alloc(48 * kMiB, 0, nullptr);  // no limit was set
         EXPECT_NE(p, nullptr) << unipool_last_error();
         unipool_free(p, 48 * kMiB, 0, nullptr);
       }},
      {"unipool_record_stream", "a foreign pointer: refused with the reason, no crash",
       [](Env& e) {
         unipool_record_stream(e.foreign(), reinterpret_cast<void*>(0x20));
         EXPECT_TRUE(LastErrorNames("not allocated"));
         unipool_record_stream(nullptr, reinterpret_cast<void*>(0x20));
         EXPECT_STRNE(unipool_last_error(), "");
       }},
  };
}

// ---- device.h: tags and sleep ------------------------------------------------------

std::vector<Case> device_sleep_cases() {
  return {
      {"unipool_device_set_tag", "an empty name, a name of 65 characters; NULL is the default",
       [](Env&) {
         EXPECT_REFUSED(unipool_device_set_tag(""), UNIPOOL_BAD_ARGUMENT, "1 to 64 characters");
         EXPECT_REFUSED(unipool_device_set_tag(std::string(65, 't').c_str()), UNIPOOL_BAD_ARGUMENT, "1 to 64");
         EXPECT_EQ(unipool_device_set_tag(nullptr), UNIPOOL_OK);
       }},
      {"unipool_device_sleep", "no tag, NULL arrays and names, a tag in both lists, a tag already asleep",
       [](Env& e) {
         const char* kv[] = {"bad-input-kv"};
         const char* null_name[] = {nullptr};
         EXPECT_REFUSED(unipool_device_sleep(e.dev, nullptr, 0, nullptr, 0, nullptr), UNIPOOL_BAD_ARGUMENT,
                        "at least one tag");
         EXPECT_REFUSED(unipool_device_sleep(e.dev, nullptr, 1, nullptr, 0, nullptr), UNIPOOL_BAD_ARGUMENT,
                        "offload is NULL");
         EXPECT_REFUSED(unipool_device_sleep(e.dev, nullptr, 0, null_name, 1, nullptr), UNIPOOL_BAD_ARGUMENT,
                        "discard[0] is NULL");
         EXPECT_REFUSED(unipool_device_sleep(e.dev, kv, 1, kv, 1, nullptr), UNIPOOL_BAD_ARGUMENT, "both");
         ASSERT_EQ(unipool_device_sleep(e.dev, nullptr, 0, kv, 1, nullptr), UNIPOOL_OK) << unipool_last_error();
         EXPECT_REFUSED(unipool_device_sleep(e.dev, nullptr, 0, kv, 1, nullptr), UNIPOOL_ASLEEP, "already asleep");
         EXPECT_EQ(unipool_device_wake(e.dev, kv, 1, nullptr), UNIPOOL_OK) << unipool_last_error();
       }},
      {"unipool_device_wake", "a tag awake, nothing asleep, a NULL array with a count",
       [](Env& e) {
         const char* kv[] = {"bad-input-kv"};
         EXPECT_REFUSED(unipool_device_wake(e.dev, kv, 1, nullptr), UNIPOOL_ASLEEP, "is awake");
         EXPECT_REFUSED(unipool_device_wake(e.dev, nullptr, 0, nullptr), UNIPOOL_ASLEEP, "no tag is asleep");
         EXPECT_REFUSED(unipool_device_wake(e.dev, nullptr, 2, nullptr), UNIPOOL_BAD_ARGUMENT, "tags is NULL");
       }},
      {"unipool_device_tag_stats_json", "a bad device: 0 and the reason; nothing written",
       [](Env& e) {
         char buffer[16] = "untouched";
         EXPECT_EQ(unipool_device_tag_stats_json(e.dev, 2, buffer, sizeof buffer), 0u);
         EXPECT_TRUE(LastErrorNames("device 2"));
         EXPECT_STREQ(buffer, "untouched");
         EXPECT_GT(unipool_device_tag_stats_json(e.dev, -1, nullptr, 0), 0u);  // "[]" at least
       }},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part : {common_cases, host_pool_cases, host_alloc_cases, host_free_cases, host_query_cases,
                    host_history_cases, device_pools_cases, device_alloc_cases, device_stats_cases, device_sleep_cases,
                    pluggable_cases, pluggable_maintenance_cases}) {
    for (const Case& c : part()) all.push_back(c);
  }
  return all;
}

class CapiBadInput : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(g_default_conf);
    ASSERT_EQ(unipool_host_create("reserve=256MiB,limit=64MiB", &env_.host), UNIPOOL_OK) << unipool_last_error();
    ASSERT_EQ(unipool_device_pools_create(kDeviceConf, &env_.dev), UNIPOOL_OK) << unipool_last_error();
  }
  // The pools a case touched are still whole afterwards.
  void TearDown() override {
    EXPECT_EQ(unipool_host_validate(env_.host), UNIPOOL_OK) << unipool_last_error();
    EXPECT_EQ(unipool_device_validate(env_.dev), UNIPOOL_OK) << unipool_last_error();
    EXPECT_EQ(unipool_device_validate(nullptr), UNIPOOL_OK) << unipool_last_error();
    unipool_device_pools_destroy(env_.dev);
    unipool_host_destroy(env_.host);
  }
  Env env_;
};

TEST_P(CapiBadInput, IsRefused) {
  SCOPED_TRACE(std::string(GetParam().function) + ": " + GetParam().bad_input);
  GetParam().run(env_);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.function) + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Table, CapiBadInput, ::testing::ValuesIn(all_cases()), case_name);

// Every function the headers declare (comments stripped).
std::set<std::string> declared_functions() {
  std::set<std::string> names;
  for (const char* header : {"common.h", "host.h", "device.h", "pluggable.h"}) {  // kv.h: capi_kv_test.cpp
    std::ifstream in(std::string(UNIPOOL_C_HEADER_DIR) + "/" + header);
    EXPECT_TRUE(in) << header;
    std::stringstream text;
    text << in.rdbuf();
    const std::string code = std::regex_replace(text.str(), std::regex(R"(/\*[^*]*\*+([^/*][^*]*\*+)*/)"), " ");
    const std::regex declaration(R"(\b(unipool_\w+)\s*\()");
    for (auto it = std::sregex_iterator(code.begin(), code.end(), declaration); it != std::sregex_iterator(); ++it) {
      names.insert((*it)[1]);
    }
  }
  return names;
}

TEST(CapiBadInputCoverage, EveryDeclaredFunctionHasACase) {
  const std::set<std::string> declared = declared_functions();
  ASSERT_GT(declared.size(), 40u) << "the header parse found too little";
  std::set<std::string> covered;
  for (const Case& c : all_cases()) covered.insert(c.function);
  for (const std::string& f : declared) EXPECT_TRUE(covered.count(f)) << f << " has no bad-input case";
  for (const std::string& f : covered) EXPECT_TRUE(declared.count(f)) << f << " has a case but is not declared";
}

}  // namespace
