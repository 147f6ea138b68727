// unipool: fences, the points in a stream's work that gate memory reuse.
//
// A block freed while a stream may still read or write it must not be handed
// out again until the stream gets past that point. Host and device pools both
// defer reuse through this one interface: on a GPU a fence is a pooled CUDA
// event recorded on the stream (backend/cuda); in tests it is a ManualFence
// the test completes by hand.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace unipool {

// A stream as the pools see it: a cudaStream_t's value, or a test's token.
// 0 is the default (legacy) stream.
using StreamHandle = uintptr_t;

// Opaque fence id; 0 is never a valid fence.
using FenceId = uint64_t;
inline constexpr FenceId kNoFence = 0;

class FenceSource {
 public:
  virtual ~FenceSource() = default;
  // Records a fence at the current end of `stream`'s work on `device`.
  // Returns kNoFence if the fence cannot be recorded (a backend error).
  virtual FenceId record(int device, StreamHandle stream) = 0;
  // True once the work before the fence is done. Never blocks.
  virtual bool completed(FenceId fence) = 0;
  // Blocks until the fence completes (used before releasing memory to the OS
  // or the driver when the caller asked for a synchronous release).
  virtual void wait(FenceId fence) = 0;
  // Gives the fence back; its id may be reused afterwards.
  virtual void release(FenceId fence) = 0;
};

// A fence source for tests and for CPU-only use: fences complete when the
// test says so. Thread-safe.
class ManualFenceSource final : public FenceSource {
 public:
  FenceId record(int device, StreamHandle stream) override;
  bool completed(FenceId fence) override;
  void wait(FenceId fence) override;  // completes it: nothing else would
  void release(FenceId fence) override;

  void complete(FenceId fence);
  // Completes every fence recorded on `stream` so far (a stream synchronize).
  void complete_stream(StreamHandle stream);
  void complete_all();
  uint64_t outstanding() const;  // recorded and not yet released

 private:
  struct Entry {
    StreamHandle stream;
    bool done;
  };
  mutable std::mutex mutex_;
  std::unordered_map<FenceId, Entry> fences_;
  FenceId next_ = 1;
};

}  // namespace unipool
