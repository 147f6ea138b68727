// unipool host tests: a pinner with injected failures, installed through
// host::set_pinner_factory (no CUDA needed). It checks what the real
// cudaHostRegister would: no overlapping registrations, unpin of a
// registration start only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "host/pinner_factory.hpp"

namespace unipool::test {

struct TestPinnerState {
  std::mutex mutex;
  bool available = true;
  uint64_t fail_from = ~uint64_t{0};  // registrations numbered from 1; >= this fail
  uint64_t fail_only = 0;             // just this one fails (0: none)
  uint64_t calls = 0;
  uint64_t largest = 0;
  uint64_t bad_unpins = 0;
  uint64_t overlaps = 0;
  std::map<uintptr_t, uint64_t> ranges;  // registered: start -> bytes

  void reset() {
    std::lock_guard lock(mutex);
    available = true;
    fail_from = ~uint64_t{0};
    fail_only = calls = largest = bad_unpins = overlaps = 0;
    ranges.clear();
  }
  uint64_t pinned() {
    std::lock_guard lock(mutex);
    uint64_t n = 0;
    for (auto& [start, bytes] : ranges) n += bytes;
    return n;
  }
};

inline TestPinnerState& pinner_state() {
  static TestPinnerState state;
  return state;
}

class TestPinner final : public backend::HostPinner {
 public:
  const char* name() const noexcept override { return "test"; }
  bool available() override { return pinner_state().available; }
  BackendStatus pin(void* ptr, uint64_t bytes) override {
    TestPinnerState& s = pinner_state();
    std::lock_guard lock(s.mutex);
    ++s.calls;
    if (s.calls >= s.fail_from || s.calls == s.fail_only) {
      return BackendStatus{BackendStatus::error, 2, "test pinner: injected registration failure"};
    }
    const auto start = reinterpret_cast<uintptr_t>(ptr);
    auto next = s.ranges.lower_bound(start);
    if ((next != s.ranges.end() && next->first < start + bytes) ||
        (next != s.ranges.begin() && std::prev(next)->first + std::prev(next)->second > start)) {
      ++s.overlaps;
    }
    s.ranges[start] = bytes;
    if (bytes > s.largest) s.largest = bytes;
    return BackendStatus::success();
  }
  BackendStatus unpin(void* ptr) override {
    TestPinnerState& s = pinner_state();
    std::lock_guard lock(s.mutex);
    if (s.ranges.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) ++s.bad_unpins;
    return BackendStatus::success();
  }
};

inline std::unique_ptr<backend::HostPinner> make_test_pinner() { return std::make_unique<TestPinner>(); }

// Installs the test pinner for the pools a test creates.
struct UseTestPinner {
  UseTestPinner() {
    pinner_state().reset();
    host::set_pinner_factory(make_test_pinner);
  }
  ~UseTestPinner() { host::set_pinner_factory(nullptr); }
};

}  // namespace unipool::test
