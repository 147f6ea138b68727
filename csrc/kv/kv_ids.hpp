// unipool kv: moving block ids between the free bitmap and the live bitmap a
// 64-bit word at a time. Every function here runs under the pool's lock.
//
// A State is any type with `free` (a KVIdBitmap) and `live` (words with
// data() and operator[]): KVBlockPool::State, and the index a pool shared by
// processes keeps in its mapping.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "kv/kv_id_bitmap.hpp"
#include "kv/kv_simd.hpp"

namespace unipool::kv {

// Set bits of x in a few shifts and masks: std::popcount is a library call
// on baseline x86-64.
inline uint64_t count_bits(uint64_t x) noexcept {
  x -= (x >> 1) & 0x5555555555555555;
  x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0f;
  return (x * 0x0101010101010101) >> 56;
}

// Writes the ids of the set bits of `bits` (word `base` / 64) to out,
// ascending. Finding and clearing the lowest set bit is a chain of dependent
// instructions per id; the two halves of the word are two such chains that
// the CPU runs side by side.
template <class Id>
void write_set_bits(uint64_t bits, uint64_t base, Id* out) noexcept {
  uint64_t lo = bits & 0xffffffff, hi = bits >> 32;
  Id* a = out;
  Id* b = out + count_bits(lo);
  for (; lo != 0 && hi != 0; lo &= lo - 1, hi &= hi - 1) {
    *a++ = static_cast<Id>(base + static_cast<uint64_t>(std::countr_zero(lo)));
    *b++ = static_cast<Id>(base + 32 + static_cast<uint64_t>(std::countr_zero(hi)));
  }
  for (; lo != 0; lo &= lo - 1) *a++ = static_cast<Id>(base + static_cast<uint64_t>(std::countr_zero(lo)));
  for (; hi != 0; hi &= hi - 1) *b++ = static_cast<Id>(base + 32 + static_cast<uint64_t>(std::countr_zero(hi)));
}

// Writes the n lowest free ids to `out`, ascending, and makes them live;
// n <= s.free.count(). A whole free word becomes 64 consecutive ids in a
// loop the compiler vectorizes; a partly free word goes bit by bit, which
// suits the short runs of a churned pool better than per-run vector set-up.
template <class State, class Id>
void take_lowest(State& s, size_t n, Id* out) noexcept {
  while (n != 0) {
    const size_t w = s.free.lowest_word();
    const uint64_t base = uint64_t{w} * 64;
    const uint64_t bits = s.free.word(w);
    uint64_t taken = bits;
    size_t count = 64;
    if (bits == KVIdBitmap::kAll && n >= 64) {
      write_run(out, base, 64);
    } else if ((count = count_bits(bits)) <= n) {
      write_set_bits(bits, base, out);
    } else {  // the last word of the batch: only its n lowest free ids
      uint64_t rest = bits;
      for (count = 0; count != n; rest &= rest - 1) {
        out[count++] = static_cast<Id>(base + static_cast<uint64_t>(std::countr_zero(rest)));
      }
      taken = bits & ~rest;
    }
    s.free.erase(w, taken, count);
    s.live[w] |= taken;
    out += count;
    n -= count;
  }
}

// Whether ids are first, first + 1, ..., first + n - 1 (n > 0): a batch
// freed the way it was handed out from free words. The ends decide most
// batches at once; the full test has no early exit, so it vectorizes.
template <class Id>
bool is_run(const Id* ids, size_t n) noexcept {
  const uint64_t first = static_cast<uint64_t>(ids[0]);
  if (static_cast<uint64_t>(ids[n - 1]) - first != n - 1) return false;
  // From index 0, so the vector loads line up with the vector stores that
  // wrote the ids when alloc just did: a load straddling two stores cannot
  // be forwarded from them and waits for both to retire.
  return all_in_run(ids, first, n);
}

// The live blocks [first, first + n) leave the live bitmap (and join the free
// one when to_free), a word at a time (n > 0). False, changing nothing, if
// the run leaves the pool or any block of it is not live. A run of a batch of
// 64 or fewer spans one or two words: the words between are whole.
template <class State>
bool release_run(State& s, uint64_t num_blocks, uint64_t first, uint64_t n, bool to_free) noexcept {
  if (first >= num_blocks || n > num_blocks - first) return false;
  const uint64_t last = first + n - 1;
  const size_t w0 = first / 64, w1 = last / 64;
  const uint64_t head = KVIdBitmap::kAll << (first % 64), tail = KVIdBitmap::kAll >> (63 - last % 64);
  uint64_t* live = s.live.data();
  if (w0 == w1) {
    const uint64_t m = head & tail;
    if ((live[w0] & m) != m) return false;
    live[w0] &= ~m;
    if (to_free) s.free.insert(w0, m, n);
    return true;
  }
  bool all_live = (live[w0] & head) == head && (live[w1] & tail) == tail;
  for (size_t w = w0 + 1; w < w1; ++w) all_live &= live[w] == KVIdBitmap::kAll;
  if (!all_live) return false;
  live[w0] &= ~head;
  live[w1] &= ~tail;
  for (size_t w = w0 + 1; w < w1; ++w) live[w] = 0;
  if (to_free) {
    s.free.insert(w0, head, 64 - first % 64);
    for (size_t w = w0 + 1; w < w1; ++w) s.free.insert(w, KVIdBitmap::kAll, 64);
    s.free.insert(w1, tail, last % 64 + 1);
  }
  return true;
}

// Undoes release_ids for ids[0, n): they were live and released once each.
template <class State, class Id>
void relive(State& s, const Id* ids, size_t n, bool from_free) noexcept {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = static_cast<uint64_t>(ids[i]);
    const uint64_t bit = uint64_t{1} << (id % 64);
    s.live[id / 64] |= bit;
    if (from_free) s.free.erase(id / 64, bit, 1);
  }
}

// A strictly ascending batch (as alloc hands ids out of a churned pool, and
// as a request gives them back): no repeats are possible, so the ids of each
// word are gathered into one mask, checked and moved with one operation per
// word. It crosses a word boundary a few times, so the branch on that is
// cheap. Returns 1 if released, 0 if refused (nothing changed), -1 if the
// batch turns out not to be ascending (nothing changed either).
template <class State, class Id>
int release_ascending(State& s, uint64_t num_blocks, const Id* ids, size_t n, bool to_free) noexcept {
  size_t group = 0;  // ids[group, i) are gathered in (word, mask); ids[0, group) are released
  uint64_t word = static_cast<uint64_t>(ids[0]) / 64, mask = 0, previous = 0;
  int result = 1;
  for (size_t i = 0; i <= n; ++i) {
    const uint64_t id = i < n ? static_cast<uint64_t>(ids[i]) : ~uint64_t{0};  // the end closes the last group
    if (i < n && (id >= num_blocks || (i != 0 && id <= previous))) {
      result = id >= num_blocks ? 0 : -1;  // negative ids wrap to huge: out of range
      break;
    }
    if (id / 64 != word) {
      if ((s.live[word] & mask) != mask) {
        result = 0;
        break;
      }
      s.live[word] &= ~mask;
      if (to_free) s.free.insert(word, mask, i - group);
      group = i;
      word = id / 64;
      mask = 0;
    }
    mask |= uint64_t{1} << (id % 64);
    previous = id;
  }
  if (result != 1) relive(s, ids, group, to_free);
  return result;
}

// Ids in any order, in one pass with no branch per id (scattered ids in a
// random order would mispredict about once per id): each id's live bit is
// tested and cleared (and its free bit set only if it was live), and which
// ids were cleared is kept 64 at a time in a register. An id out of range,
// not live, or repeated (its bit already cleared by the first occurrence)
// fails the batch, and exactly the cleared bits are put back.
template <class State, class Id>
bool release_any(State& s, uint64_t num_blocks, const Id* ids, size_t n, bool to_free) noexcept {
  uint64_t* live = s.live.data();
  uint64_t* free_words = s.free.bulk_words();
  for (size_t chunk = 0; chunk < n; chunk += 64) {
    const size_t end = std::min(n, chunk + 64);
    uint64_t cleared = 0, refused = 0;
    for (size_t i = chunk; i < end; ++i) {
      const uint64_t id = static_cast<uint64_t>(ids[i]);  // a negative id becomes huge: out of range
      const bool in_range = id < num_blocks;
      const uint64_t safe = in_range ? id : 0;             // cmovs: never touch memory past the bitmap
      const uint64_t bit = in_range ? uint64_t{1} << (safe % 64) : 0;
      const uint64_t was = live[safe / 64] & bit;
      live[safe / 64] &= ~bit;
      if (to_free) free_words[safe / 64] |= was;
      refused |= static_cast<uint64_t>(was == 0);
      cleared |= static_cast<uint64_t>(was != 0) << (i - chunk);
    }
    if (refused) {
      for (size_t i = 0; i < end; ++i) {
        if (i >= chunk && !((cleared >> (i - chunk)) & 1)) continue;
        const uint64_t id = static_cast<uint64_t>(ids[i]);
        live[id / 64] |= uint64_t{1} << (id % 64);
        if (to_free) free_words[id / 64] &= ~(uint64_t{1} << (id % 64));
      }
      return false;
    }
  }
  if (to_free) s.free.bulk_inserted(ids, n);
  return true;
}

// Ids in any order within a span of kNearWords words (a batch of blocks
// freed together usually lies close: a churned pool hands out its lowest
// free ids). The live bitmap is neither read nor written per id: each id's
// bit goes into one of four local mask arrays (id i into array i % 4), so
// the batch's read-modify-writes form four independent chains, not one chain
// through the same few live words. A repeat is a bit already set in its
// array or set in two arrays. Then one check and one update per word.
// Returns 1 if released, 0 if refused (nothing changed), -1 if the ids span
// too many words for this path (nothing changed either).
inline constexpr size_t kNearWords = 64;

template <class State, class Id>
int release_near(State& s, uint64_t num_blocks, const Id* ids, size_t n, bool to_free) noexcept {
  // Four running minima and maxima: one would be a chain of two dependent
  // conditional moves per id (baseline x86-64 has no 64-bit vector min).
  uint64_t low0 = ~uint64_t{0}, low1 = low0, low2 = low0, low3 = low0, high0 = 0, high1 = 0, high2 = 0, high3 = 0;
  size_t k = 0;
  auto id_at = [&](size_t i) { return static_cast<uint64_t>(ids[i]); };  // a negative id becomes huge: out of range
  for (; k + 4 <= n; k += 4) {
    low0 = std::min(low0, id_at(k)), high0 = std::max(high0, id_at(k));
    low1 = std::min(low1, id_at(k + 1)), high1 = std::max(high1, id_at(k + 1));
    low2 = std::min(low2, id_at(k + 2)), high2 = std::max(high2, id_at(k + 2));
    low3 = std::min(low3, id_at(k + 3)), high3 = std::max(high3, id_at(k + 3));
  }
  for (; k < n; ++k) low0 = std::min(low0, id_at(k)), high0 = std::max(high0, id_at(k));
  const uint64_t lowest = std::min(std::min(low0, low1), std::min(low2, low3));
  const uint64_t highest = std::max(std::max(high0, high1), std::max(high2, high3));
  if (highest >= num_blocks) return 0;
  const size_t first_word = lowest / 64, words = highest / 64 - first_word + 1;
  if (words > kNearWords) return -1;
  // masks[w][j]: the bits of word first_word + w set by ids i with i % 4 == j.
  // Cleared word by word: a memset of a few words is a `rep stos`, whose
  // start-up costs more than the whole loop.
  uint64_t masks[kNearWords][4];
  for (size_t w = 0; w < words; ++w) masks[w][0] = masks[w][1] = masks[w][2] = masks[w][3] = 0;
  const uint64_t base = uint64_t{first_word} * 64;
  uint64_t repeated = 0;
  auto add = [&](size_t j, Id id) {
    const uint64_t at = static_cast<uint64_t>(id) - base, bit = uint64_t{1} << (at % 64);
    repeated |= masks[at / 64][j] & bit;
    masks[at / 64][j] |= bit;
  };
  size_t i = 0;
  for (; i + 4 <= n; i += 4) add(0, ids[i]), add(1, ids[i + 1]), add(2, ids[i + 2]), add(3, ids[i + 3]);
  for (; i < n; ++i) add(i % 4, ids[i]);
  uint64_t missing = 0;
  for (size_t w = 0; w < words; ++w) {
    const uint64_t a = masks[w][0], b = masks[w][1], c = masks[w][2], d = masks[w][3];
    repeated |= (a & b) | (a & c) | (a & d) | (b & c) | (b & d) | (c & d);
    masks[w][0] = a | b | c | d;
    missing |= masks[w][0] & ~s.live[first_word + w];
  }
  if (repeated | missing) return 0;
  for (size_t w = 0; w < words; ++w) {
    const uint64_t m = masks[w][0];
    if (m == 0) continue;
    s.live[first_word + w] &= ~m;
    if (to_free) s.free.insert(first_word + w, m, count_bits(m));
  }
  return 1;
}

// The ids leave the live bitmap (and join the free one when to_free). False,
// changing nothing, if any id is out of range, not live, or repeated in the
// batch.
template <class State, class Id>
bool release_ids(State& s, uint64_t num_blocks, const Id* ids, size_t n, bool to_free) noexcept {
  if (n == 0) return true;
  if (is_run(ids, n)) return release_run(s, num_blocks, static_cast<uint64_t>(ids[0]), n, to_free);
  const int ascending = release_ascending(s, num_blocks, ids, n, to_free);  // gives up at the first descent
  if (ascending >= 0) return ascending == 1;
  const int near = release_near(s, num_blocks, ids, n, to_free);
  return near >= 0 ? near == 1 : release_any(s, num_blocks, ids, n, to_free);
}

}  // namespace unipool::kv
