// bench/device: recorded model traces (the format is in trace.hpp).
//
// Streams are read and counted but not honoured: the replay driver issues
// every operation on the default stream, as it does for the generated
// traces, so a block freed on one stream and reused on another is reused at
// once. Per-stream replay needs each peer to take a stream, which none of
// the hot-path comparisons need yet.
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "trace.hpp"

namespace device_bench {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// The fields of one line, split on blanks.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    const size_t end = std::min(line.find_first_of(" \t", at), line.size());
    if (end > at) out.push_back(line.substr(at, end - at));
    at = end;
  }
  return out;
}

template <class T>
T number(std::string_view text, const char* what) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(std::string("bad ") + what + " '" + std::string(text) + "'");
  }
  return v;
}

// Turns the file's lines into a Trace, checking slot discipline.
class TraceReader {
 public:
  explicit TraceReader(const std::string& name) { trace_.name = name; }

  void line(std::string_view text) {
    const std::vector<std::string_view> f = fields(text);
    if (f.empty() || f[0][0] == '#') return;
    if (f[0] == "w" && f.size() == 1) {
      trace_.warmup_ops = trace_.ops.size();
    } else if (f[0] == "+" && f.size() == 4) {
      allocate(number<uint32_t>(f[1], "slot"), number<uint64_t>(f[2], "size"), number<int64_t>(f[3], "stream"));
    } else if (f[0] == "-" && f.size() == 2) {
      free(number<uint32_t>(f[1], "slot"));
    } else {
      throw std::runtime_error("expected '+ SLOT BYTES STREAM', '- SLOT', 'w' or '# ...'");
    }
  }

  Trace finish() {
    std::vector<uint32_t> still_live;
    for (const auto& [slot, bytes] : live_) {
      if (bytes != 0) still_live.push_back(slot);
    }
    std::sort(still_live.begin(), still_live.end());  // a deterministic order
    for (const uint32_t slot : still_live) trace_.ops.push_back(Op{slot, 0});
    trace_.streams = static_cast<uint32_t>(std::max<size_t>(streams_.size(), 1));
    return std::move(trace_);
  }

  uint64_t ops() const { return trace_.ops.size(); }

 private:
  void allocate(uint32_t slot, uint64_t bytes, int64_t stream) {
    if (!live_.emplace(slot, bytes).second) throw std::runtime_error("slot " + std::to_string(slot) + " is live");
    streams_.insert(stream);
    // An empty allocation never reaches a device allocator (torch hands
    // out a null pointer); Op's size 0 means a free, so it is dropped, and
    // its free with it.
    if (bytes == 0) return;
    trace_.ops.push_back(Op{slot, bytes});
    trace_.slots = std::max(trace_.slots, slot + 1);
    ++trace_.allocations;
  }
  void free(uint32_t slot) {
    const auto it = live_.find(slot);
    if (it == live_.end()) throw std::runtime_error("slot " + std::to_string(slot) + " is not live");
    if (it->second != 0) trace_.ops.push_back(Op{slot, 0});
    live_.erase(it);
  }

  Trace trace_;
  std::unordered_map<uint32_t, uint64_t> live_;  // slot -> bytes
  std::set<int64_t> streams_;
};

}  // namespace

Trace read_trace_file(const std::string& path, const std::string& name, uint64_t max_ops) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw std::runtime_error("cannot open " + path);
  TraceReader reader(name);
  char buf[512];
  for (uint64_t line = 1; gzgets(file.get(), buf, sizeof buf) != nullptr; ++line) {
    std::string_view text(buf, std::strlen(buf));
    if (text.empty() || text.back() != '\n') {
      if (!gzeof(file.get())) throw std::runtime_error(path + ":" + std::to_string(line) + ": line too long");
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
    try {
      reader.line(text);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(path + ":" + std::to_string(line) + ": " + e.what());
    }
    if (max_ops != 0 && reader.ops() >= max_ops) break;
  }
  int err = Z_OK;
  const char* message = gzerror(file.get(), &err);
  if (err != Z_OK && err != Z_STREAM_END) throw std::runtime_error(path + ": " + message);
  return reader.finish();
}

std::vector<std::pair<std::string, std::string>> model_trace_files(const std::string& dir) {
  namespace fs = std::filesystem;
  constexpr std::string_view kPrefix = "model_", kSuffix = ".trace.gz";
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (!e.is_regular_file() || file.size() <= kPrefix.size() + kSuffix.size()) continue;
    if (!file.starts_with(kPrefix) || !file.ends_with(kSuffix)) continue;
    out.emplace_back(file.substr(0, file.size() - kSuffix.size()), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace device_bench
