// unipool host: the UNIPOOL_HOST_CONF string. The parser works in place on
// the caller's text and writes errors into the caller's buffer: the malloc
// face runs it before any heap exists.
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "host/size_classes.hpp"
#include "unipool/host_config.hpp"

namespace unipool {
namespace {

struct Text {
  const char* p;
  size_t n;
  bool is(const char* word) const noexcept { return std::strlen(word) == n && std::strncmp(p, word, n) == 0; }
};

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

Text trim(const char* b, const char* e) noexcept {
  while (b < e && is_space(*b)) ++b;
  while (e > b && is_space(e[-1])) --e;
  return Text{b, static_cast<size_t>(e - b)};
}

bool parse_u64(Text t, uint64_t* out) noexcept {
  if (t.n == 0) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < t.n; ++i) {
    if (t.p[i] < '0' || t.p[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(t.p[i] - '0');
    if (v > (~uint64_t{0} - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// "64", "4K", "4KiB", "4KB", "2M", "1G", "1T" (1024-based, case-insensitive).
bool parse_size(Text t, uint64_t* out) noexcept {
  size_t digits = 0;
  while (digits < t.n && t.p[digits] >= '0' && t.p[digits] <= '9') ++digits;
  uint64_t v = 0;
  if (!parse_u64(Text{t.p, digits}, &v)) return false;
  Text unit = trim(t.p + digits, t.p + t.n);
  unsigned shift = 0;
  if (unit.n > 0) {
    switch (unit.p[0] | 0x20) {
      case 'b': shift = 0; break;
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      default: return false;
    }
    const Text rest{unit.p + 1, unit.n - 1};
    const bool ok = rest.n == 0 || ((unit.p[0] | 0x20) != 'b' &&
                                    (rest.is("iB") || rest.is("ib") || rest.is("B") || rest.is("b")));
    if (!ok) return false;
  }
  if (shift > 0 && v > (~uint64_t{0} >> shift)) return false;
  *out = v << shift;
  return true;
}

bool parse_bool(Text t, bool* out) noexcept {
  if (t.is("on") || t.is("true") || t.is("1") || t.is("yes")) return *out = true, true;
  if (t.is("off") || t.is("false") || t.is("0") || t.is("no")) return *out = false, true;
  return false;
}

bool parse_int(Text t, int* out) noexcept {
  bool negative = t.n > 0 && t.p[0] == '-';
  uint64_t v = 0;
  if (!parse_u64(negative ? Text{t.p + 1, t.n - 1} : t, &v) || v > 1u << 30) return false;
  *out = negative ? -static_cast<int>(v) : static_cast<int>(v);
  return true;
}

void write_error(char* error, size_t size, const char* a, Text key, const char* b, Text value,
                 const char* c = "") noexcept {
  if (error == nullptr || size == 0) return;
  size_t n = 0;
  auto put = [&](const char* s, size_t len) {
    for (size_t i = 0; i < len && n + 1 < size; ++i) error[n++] = s[i];
  };
  put(a, std::strlen(a));
  put(key.p, key.n);
  put(b, std::strlen(b));
  put(value.p, value.n);
  put(c, std::strlen(c));
  error[n] = '\0';
}

Status apply(HostPoolConfig& c, Text key, Text value) noexcept {
  bool ok = false;
  if (key.is("pinned")) {
    ok = true;
    if (value.is("off") || value.is("false") || value.is("0")) c.pinned = HostPinned::off;
    else if (value.is("on") || value.is("true") || value.is("1")) c.pinned = HostPinned::on;
    else if (value.is("best_effort")) c.pinned = HostPinned::best_effort;
    else ok = false;
  } else if (key.is("thread_cache")) {
    ok = true;
    if (value.is("unlimited")) c.thread_cache = HostThreadCache::unlimited;
    else if (value.is("performance")) c.thread_cache = HostThreadCache::performance;
    else if (value.is("size")) c.thread_cache = HostThreadCache::size;
    else if (value.is("none")) c.thread_cache = HostThreadCache::none;
    else ok = false;
  } else if (key.is("huge_pages")) {
    ok = true;
    if (value.is("off") || value.is("false") || value.is("0")) c.huge_pages = HostHugePages::off;
    else if (value.is("on") || value.is("thp") || value.is("true") || value.is("1")) c.huge_pages = HostHugePages::thp;
    else if (value.is("hugetlb")) c.huge_pages = HostHugePages::hugetlb;
    else if (value.is("auto"))
      c.huge_pages = HostHugePages::automatic;
    else ok = false;
  } else if (key.is("numa_node")) {
    ok = parse_int(value, &c.numa_node);
  } else if (key.is("first_touch")) {
    bool b = false;
    ok = parse_bool(value, &b);
    if (ok) c.first_touch = b ? 1 : 0;
  } else if (key.is("pin_thread")) {
    ok = parse_bool(value, &c.pin_thread);
  } else if (key.is("hardened")) {
    ok = parse_bool(value, &c.hardened);
  } else if (key.is("reserve")) {
    ok = parse_size(value, &c.reserve);
  } else if (key.is("chunk")) {
    ok = parse_size(value, &c.chunk);
  } else if (key.is("max_pin")) {
    ok = parse_size(value, &c.max_pin);
  } else if (key.is("middle_max")) {
    ok = parse_size(value, &c.middle_max);
  } else if (key.is("huge_threshold")) {
    ok = parse_size(value, &c.huge_threshold);
  } else if (key.is("huge_cache")) {
    uint64_t v = 0;
    ok = parse_u64(value, &v) && v <= 0xFFFFFFFFu;
    if (ok) c.huge_cache = static_cast<uint32_t>(v);
  } else if (key.is("huge_cache_bytes")) {
    ok = parse_size(value, &c.huge_cache_bytes);
  } else if (key.is("retain")) {
    ok = parse_size(value, &c.retain);
  } else if (key.is("limit")) {
    ok = parse_size(value, &c.limit);
  } else {
    return Status::not_live;  // unknown key; reported by the caller
  }
  return ok ? Status::ok : Status::bad_argument;
}

// The keys an item list has set so far, to refuse one given twice ("the last
// wins" would silently drop the first). Fixed storage: the parser runs before
// any heap exists, and an unknown key ends the parse, so at most as many keys
// as apply() knows are ever recorded.
class SeenKeys {
 public:
  // False when `key` was seen before; otherwise records it.
  bool add(Text key) noexcept {
    for (size_t i = 0; i < count_; ++i) {
      if (keys_[i].n == key.n && std::strncmp(keys_[i].p, key.p, key.n) == 0) return false;
    }
    if (count_ < kMax) keys_[count_++] = key;
    return true;
  }

 private:
  static constexpr size_t kMax = 32;  // apply() knows 17
  Text keys_[kMax];
  size_t count_ = 0;
};

}  // namespace

Status parse_host_config(const char* text, HostPoolConfig* out, char* error, size_t error_size) noexcept {
  if (error != nullptr && error_size > 0) error[0] = '\0';
  if (text == nullptr) return Status::ok;
  HostPoolConfig c = *out;
  SeenKeys seen;
  const char* p = text;
  while (*p != '\0') {
    const char* end = p;
    while (*end != '\0' && *end != ',') ++end;
    const Text item = trim(p, end);
    if (item.n > 0) {
      const char* eq = static_cast<const char*>(std::memchr(item.p, '=', item.n));
      if (eq == nullptr) {
        write_error(error, error_size, "UNIPOOL_HOST_CONF: '", item, "' is not key=value", Text{"", 0});
        return Status::bad_argument;
      }
      const Text key = trim(item.p, eq);
      const Text value = trim(eq + 1, item.p + item.n);
      const Status s = apply(c, key, value);
      if (s == Status::not_live) {
        write_error(error, error_size, "UNIPOOL_HOST_CONF: unknown key '", key, "'", Text{"", 0});
        return Status::bad_argument;
      }
      if (s != Status::ok) {
        write_error(error, error_size, "UNIPOOL_HOST_CONF: bad value for ", key, ": '", value, "'");
        return Status::bad_argument;
      }
      if (!seen.add(key)) {
        write_error(error, error_size, "UNIPOOL_HOST_CONF: key '", key, "' is given twice", Text{"", 0});
        return Status::bad_argument;
      }
    }
    p = *end == ',' ? end + 1 : end;
  }
  const char* why = nullptr;
  if (c.check(&why) != Status::ok) {
    write_error(error, error_size, "UNIPOOL_HOST_CONF: ", Text{why, std::strlen(why)}, "", Text{"", 0});
    return Status::bad_argument;
  }
  *out = c;
  return Status::ok;
}

Status HostPoolConfig::check(const char** why) const noexcept {
  const char* problem = nullptr;
  constexpr uint64_t k2M = uint64_t{2} << 20;
  if (chunk < k2M || chunk % k2M != 0) problem = "chunk must be a multiple of 2 MiB (at least 2 MiB)";
  else if (reserve < (uint64_t{64} << 20) || reserve > (uint64_t{1} << 46) || reserve % chunk != 0)
    problem = "reserve must be a multiple of chunk between 64 MiB and 64 TiB";
  else if (max_pin < chunk) problem = "max_pin must be at least chunk (one registration covers whole chunks)";
  else if (middle_max != 0 && (middle_max < 1024 || middle_max > host::kMiddleLimit))
    problem = "middle_max must be between 1 KiB and 128 KiB (or 0: the policy's default)";
  else if (huge_threshold <= middle_max_or_default() || huge_threshold > reserve / 2)
    problem = "huge_threshold must be above middle_max and at most half of reserve";
  else if (huge_cache > 64) problem = "huge_cache must be at most 64";
  // The first allocation commits a chunk: a smaller limit could serve
  // nothing, and under the malloc face every program would die at its first
  // malloc (libstdc++ even terminates without a word), so it is refused.
  else if (limit != 0 && limit < chunk) problem = "limit must be 0 (none) or at least chunk (the first allocation commits a chunk)";
  else if (numa_node < -1 || numa_node >= 1024) problem = "numa_node must be -1 or a node number below 1024";
  else if (first_touch < -1 || first_touch > 1) problem = "first_touch must be on or off";
  else if (pin_thread && pinned == HostPinned::off)
    problem = "pin_thread=on needs pinned=on or pinned=best_effort (it registers chunks ahead of demand)";
  if (why != nullptr) *why = problem ? problem : "";
  return problem ? Status::bad_argument : Status::ok;
}

HostPoolConfig HostPoolConfig::parse(std::string_view text) {
  const std::string copy(text);
  HostPoolConfig c;
  char error[256];
  if (parse_host_config(copy.c_str(), &c, error, sizeof(error)) != Status::ok) throw std::invalid_argument(error);
  return c;
}

HostPoolConfig HostPoolConfig::from_env() {
  const char* env = std::getenv("UNIPOOL_HOST_CONF");
  return env ? parse(env) : HostPoolConfig{};
}

std::string HostPoolConfig::to_string() const {
  std::string s;
  auto add = [&](const char* key, const std::string& value) {
    if (!s.empty()) s += ',';
    s += key;
    s += '=';
    s += value;
  };
  add("pinned", unipool::to_string(pinned));
  add("thread_cache", unipool::to_string(thread_cache));
  add("huge_pages", unipool::to_string(huge_pages));
  add("numa_node", std::to_string(numa_node));
  if (first_touch >= 0) add("first_touch", first_touch ? "on" : "off");
  add("reserve", std::to_string(reserve));
  add("chunk", std::to_string(chunk));
  add("max_pin", std::to_string(max_pin));
  add("pin_thread", pin_thread ? "on" : "off");
  if (middle_max != 0) add("middle_max", std::to_string(middle_max));
  add("huge_threshold", std::to_string(huge_threshold));
  add("huge_cache", std::to_string(huge_cache));
  add("huge_cache_bytes", std::to_string(huge_cache_bytes));
  if (retain != ~uint64_t{0}) add("retain", std::to_string(retain));
  add("limit", std::to_string(limit));
  add("hardened", hardened ? "on" : "off");
  return s;
}

const char* to_string(PinningState s) noexcept {
  switch (s) {
    case PinningState::pageable: return "pageable (pinned=off)";
    case PinningState::pageable_no_gpu: return "pageable (no CUDA device to pin with)";
    case PinningState::pinned: return "pinned";
    case PinningState::partially_pinned: return "partially pinned (some registrations failed)";
  }
  return "?";
}

const char* to_string(HostPinned v) noexcept {
  switch (v) {
    case HostPinned::off: return "off";
    case HostPinned::on: return "on";
    case HostPinned::best_effort: return "best_effort";
  }
  return "?";
}

const char* to_string(HostThreadCache v) noexcept {
  switch (v) {
    case HostThreadCache::unlimited: return "unlimited";
    case HostThreadCache::performance: return "performance";
    case HostThreadCache::size: return "size";
    case HostThreadCache::none: return "none";
  }
  return "?";
}

const char* to_string(HostHugePages v) noexcept {
  switch (v) {
    case HostHugePages::off: return "off";
    case HostHugePages::thp: return "thp";
    case HostHugePages::hugetlb: return "hugetlb";
    case HostHugePages::automatic: return "auto";
  }
  return "?";
}

}  // namespace unipool
