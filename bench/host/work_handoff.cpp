// host_bench: blocks allocated by one thread and freed by another.
//
// producer_consumer: threads in pairs, a producer allocating messages into a bounded ring
// and a consumer freeing them (a thread without a partner fills its own ring
// and empties it). exchange: every thread keeps a table of live objects and
// hands one in four of its new ones to a random other thread, which keeps
// it in its own table and frees it in time (a server's threads passing
// requests around). Each block's first byte is checked where it is freed,
// so a block handed out twice or written by the allocator is noticed.
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "work_patterns.hpp"

namespace host_bench {
namespace {

struct Item {
  void* block = nullptr;
  uint32_t bytes = 0;
};

// The Meter wrote the low byte of the length at the block's start.
void check_and_free(Meter& meter, const Item& item) {
  if (*static_cast<unsigned char*>(item.block) != static_cast<unsigned char>(item.bytes)) {
    die("a block handed to another thread came back changed");
  }
  meter.release(item.block, item.bytes);
}

void wait_a_little(uint32_t* spins) {
  if (++*spins > 64) std::this_thread::yield();  // 2 cores: let the other side run
}

// One producer, one consumer: a bounded ring of `capacity` (a power of two).
class Ring {
 public:
  explicit Ring(uint32_t capacity) : items_(capacity), mask_(capacity - 1) {}

  bool push(const Item& item) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_.load(std::memory_order_acquire) > mask_) return false;
    items_[tail & mask_] = item;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }
  bool full() const {
    return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_acquire) > mask_;
  }
  bool pop(Item* item) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_.load(std::memory_order_acquire)) return false;
    *item = items_[head & mask_];
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  std::atomic<bool> producer_done{false};

 private:
  std::vector<Item> items_;
  uint64_t mask_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
};

// What the threads of one cell share (a child process runs one cell).
struct ProducerConsumerHub {
  explicit ProducerConsumerHub(unsigned threads, uint32_t depth) {
    for (unsigned i = 0; i < (threads + 1) / 2; ++i) rings.push_back(std::make_unique<Ring>(depth));
  }
  std::vector<std::unique_ptr<Ring>> rings;
};

ProducerConsumerHub& producer_consumer_hub(unsigned threads, uint32_t depth) {
  static ProducerConsumerHub hub(threads, depth);
  return hub;
}

class ProducerConsumerWork final : public ThreadWork {
 public:
  ProducerConsumerWork(const ProducerConsumerParams& p, uint64_t seed, unsigned thread, unsigned threads)
      : p_(p), sizes_(p.sizes, seed), ring_(*producer_consumer_hub(threads, p.depth).rings[thread / 2]),
        producer_(thread % 2 == 0), alone_(thread % 2 == 0 && thread + 1 == threads) {}

  void run(Meter& meter) override {
    if (alone_) return run_alone(meter);
    if (producer_) return produce(meter);
    consume(meter);
  }

 private:
  Item make(Meter& meter) {
    const auto bytes = static_cast<uint32_t>(sizes_.next());
    return {meter.alloc(bytes), bytes};
  }
  void produce(Meter& meter) {
    for (uint64_t m = 0; m < p_.messages; ++m) {
      const Item item = make(meter);
      for (uint32_t spins = 0; !ring_.push(item);) wait_a_little(&spins);
    }
    ring_.producer_done.store(true, std::memory_order_release);
  }
  void consume(Meter& meter) {
    Item item;
    for (uint32_t spins = 0;;) {
      if (ring_.pop(&item)) {
        check_and_free(meter, item);
        spins = 0;
      } else if (ring_.producer_done.load(std::memory_order_acquire)) {
        if (!ring_.pop(&item)) return;  // nothing was pushed after done
        check_and_free(meter, item);
      } else {
        wait_a_little(&spins);
      }
    }
  }
  void run_alone(Meter& meter) {
    Item item;
    for (uint64_t m = 0; m < p_.messages;) {
      for (; m < p_.messages && !ring_.full(); ++m) ring_.push(make(meter));
      while (ring_.pop(&item)) check_and_free(meter, item);
    }
  }

  ProducerConsumerParams p_;
  SizeRing sizes_;
  Ring& ring_;
  bool producer_;
  bool alone_;
};

// A thread's inbox: batches other threads hand it, under a lock.
struct Inbox {
  std::mutex mutex;
  std::vector<Item> items;  // capacity reserved up front: no allocation while timed
};

struct ExchangeHub {
  static constexpr uint32_t kInboxCapacity = 8192;
  explicit ExchangeHub(unsigned n) : inboxes(n) {
    for (Inbox& box : inboxes) box.items.reserve(kInboxCapacity);
  }
  std::vector<Inbox> inboxes;
  std::atomic<unsigned> done_sending{0};
};

ExchangeHub& exchange_hub(unsigned threads) {
  static ExchangeHub hub(threads);
  return hub;
}

class ExchangeWork final : public ThreadWork {
 public:
  static constexpr uint32_t kBatch = 32;
  static constexpr uint32_t kSendEvery = 4;    // one new object in four changes hands
  static constexpr uint32_t kDrainEvery = 32;  // steps between looks at the inbox

  ExchangeWork(const ExchangeParams& p, uint64_t seed, unsigned thread, unsigned threads)
      : p_(p), rng_(seed), sizes_(p.sizes, seed + 1), hub_(exchange_hub(threads)), self_(thread),
        slots_(p.slots), outgoing_(threads), received_() {
    for (auto& batch : outgoing_) batch.reserve(kBatch);
    received_.reserve(ExchangeHub::kInboxCapacity);
  }

  void run(Meter& meter) override {
    const unsigned n = static_cast<unsigned>(hub_.inboxes.size());
    for (uint64_t s = 1; s <= p_.steps; ++s) {
      const auto bytes = static_cast<uint32_t>(sizes_.next());
      const Item item{meter.alloc(bytes), bytes};
      if (n > 1 && s % kSendEvery == 0) {
        send(meter, (self_ + 1 + rng_.below(n - 1)) % n, item);
      } else {
        keep(meter, item);
      }
      if (s % kDrainEvery == 0) drain(meter);
    }
    for (unsigned t = 0; t < n; ++t) flush(meter, t);
    hub_.done_sending.fetch_add(1, std::memory_order_acq_rel);
    // Others may still send: keep draining until every thread is done.
    for (uint32_t spins = 0; hub_.done_sending.load(std::memory_order_acquire) < n;) {
      drain(meter);
      wait_a_little(&spins);
    }
    drain(meter);
    for (const Item& item : slots_) {
      if (item.block != nullptr) check_and_free(meter, item);
    }
  }

 private:
  // Into a random slot of the table; the object there is freed.
  void keep(Meter& meter, const Item& item) {
    Item& slot = slots_[rng_.below(p_.slots)];
    if (slot.block != nullptr) check_and_free(meter, slot);
    slot = item;
  }
  void send(Meter& meter, unsigned to, const Item& item) {
    outgoing_[to].push_back(item);
    if (outgoing_[to].size() == kBatch) flush(meter, to);
  }
  // A full inbox (its thread is slow to look) gets nothing: the batch is
  // freed here instead, so no thread ever waits on another.
  void flush(Meter& meter, unsigned to) {
    std::vector<Item>& batch = outgoing_[to];
    if (batch.empty()) return;
    Inbox& box = hub_.inboxes[to];
    bool delivered = false;
    {
      std::lock_guard<std::mutex> lock(box.mutex);
      if (box.items.size() + batch.size() <= ExchangeHub::kInboxCapacity) {
        box.items.insert(box.items.end(), batch.begin(), batch.end());
        delivered = true;
      }
    }
    if (!delivered) {
      for (const Item& item : batch) check_and_free(meter, item);
    }
    batch.clear();
  }
  void drain(Meter& meter) {
    Inbox& box = hub_.inboxes[self_];
    {
      std::lock_guard<std::mutex> lock(box.mutex);
      received_.swap(box.items);  // both keep their reserved capacity
    }
    for (const Item& item : received_) keep(meter, item);
    received_.clear();
  }

  ExchangeParams p_;
  Rng rng_;
  SizeRing sizes_;
  ExchangeHub& hub_;
  unsigned self_;
  std::vector<Item> slots_;
  std::vector<std::vector<Item>> outgoing_;
  std::vector<Item> received_;
};

}  // namespace

std::unique_ptr<ThreadWork> make_producer_consumer_work(const ProducerConsumerParams& p, uint64_t seed, unsigned thread, unsigned threads) {
  return std::make_unique<ProducerConsumerWork>(p, seed, thread, threads);
}

std::unique_ptr<ThreadWork> make_exchange_work(const ExchangeParams& p, uint64_t seed, unsigned thread,
                                               unsigned threads) {
  return std::make_unique<ExchangeWork>(p, seed, thread, threads);
}

}  // namespace host_bench
