// unipool host: the UNIPOOL_HOST_CONF string: values, round trip, and errors
// that name the key; the non-allocating parser for the malloc face.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "unipool/host_config.hpp"
#include "unipool/host_pool.hpp"

namespace unipool {
namespace {

TEST(HostConfig, ParsesEveryKey) {
  const HostPoolConfig c = HostPoolConfig::parse(
      "pinned=best_effort, thread_cache=size,numa_node=0,huge_pages=on,first_touch=off,reserve=2GiB,"
      "chunk=8M,max_pin=256MiB,middle_max=16KiB,huge_threshold=64MB,huge_cache=4,huge_cache_bytes=512m,"
      "retain=0,limit=1T,pin_thread=on,hardened=on");
  EXPECT_EQ(c.pinned, HostPinned::best_effort);
  EXPECT_TRUE(c.hardened);
  EXPECT_TRUE(c.pin_thread);
  EXPECT_EQ(c.thread_cache, HostThreadCache::size);
  EXPECT_EQ(c.numa_node, 0);
  EXPECT_EQ(c.huge_pages, HostHugePages::thp);
  EXPECT_EQ(c.first_touch, 0);
  EXPECT_EQ(c.reserve, uint64_t{2} << 30);
  EXPECT_EQ(c.chunk, uint64_t{8} << 20);
  EXPECT_EQ(c.max_pin, uint64_t{256} << 20);
  EXPECT_EQ(c.middle_max, uint64_t{16} << 10);
  EXPECT_EQ(c.huge_threshold, uint64_t{64} << 20);
  EXPECT_EQ(c.huge_cache, 4u);
  EXPECT_EQ(c.huge_cache_bytes, uint64_t{512} << 20);
  EXPECT_EQ(c.retain, 0u);
  EXPECT_EQ(c.limit, uint64_t{1} << 40);
}

TEST(HostConfig, EmptyGivesDefaultsAndToStringRoundTrips) {
  const HostPoolConfig d = HostPoolConfig::parse("");
  EXPECT_EQ(d.pinned, HostPinned::off);
  EXPECT_EQ(d.thread_cache, HostThreadCache::performance);
  EXPECT_FALSE(d.pin_thread);
  EXPECT_FALSE(d.hardened);
  EXPECT_EQ(d.huge_pages, HostHugePages::automatic);
  EXPECT_EQ(HostPoolConfig::parse(d.to_string()).huge_pages, HostHugePages::automatic);
  EXPECT_EQ(HostPoolConfig::parse("huge_pages=off").huge_pages, HostHugePages::off);
  const HostPoolConfig c =
      HostPoolConfig::parse("pinned=on,thread_cache=none,huge_pages=hugetlb,chunk=4MiB,pin_thread=on,hardened=1");
  const HostPoolConfig back = HostPoolConfig::parse(c.to_string());
  EXPECT_EQ(back.to_string(), c.to_string());
  EXPECT_EQ(back.pinned, HostPinned::on);
  EXPECT_TRUE(back.pin_thread);
  EXPECT_TRUE(back.hardened);
  EXPECT_EQ(back.huge_pages, HostHugePages::hugetlb);
}

void expect_error(const char* text, const char* must_name) {
  try {
    HostPoolConfig::parse(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(must_name), std::string::npos) << e.what();
  }
}

TEST(HostConfig, ErrorsNameTheKey) {
  expect_error("pinned=maybe", "pinned");
  expect_error("pinned=maybe", "maybe");
  expect_error("thread_cach=size", "thread_cach");
  expect_error("thread_cache=fast", "thread_cache");
  expect_error("numa_node=zero", "numa_node");
  expect_error("chunk=3MiB", "chunk");
  expect_error("chunk=1MiB", "chunk");
  expect_error("reserve=12XB", "reserve");
  expect_error("max_pin=2MiB,chunk=4MiB", "max_pin");
  expect_error("middle_max=256KiB", "middle_max");
  expect_error("middle_max=512", "middle_max");
  expect_error("huge_threshold=16KiB", "huge_threshold");
  expect_error("huge_cache=1000", "huge_cache");
  expect_error("first_touch=sometimes", "first_touch");
  expect_error("huge_pages=automatic", "huge_pages");
  expect_error("huge_pages=automatic", "automatic");
  expect_error("pinned=on,pin_thread=sometimes", "pin_thread");
  expect_error("pinned=on,pin_thread=sometimes", "sometimes");
  expect_error("pin_thread=on", "pin_thread");  // needs pinned=on or best_effort
  expect_error("pinned=off,pin_thread=1", "pinned=on");
  expect_error("hardened=maybe", "hardened");
  expect_error("pinned", "not key=value");
  expect_error("limit=99999999999999999999999", "limit");
}

// middle_max=0 (the default) is the policy's: blocks to 128 KiB come from
// thread pages under performance, to 32 KiB under the memory-lean policies.
TEST(HostConfig, MiddleMaxDefaultsByPolicy) {
  EXPECT_EQ(HostPoolConfig::parse("").middle_max, 0u);
  EXPECT_EQ(HostPoolConfig::parse("").middle_max_or_default(), uint64_t{128} << 10);
  EXPECT_EQ(HostPoolConfig::parse("thread_cache=unlimited").middle_max_or_default(), uint64_t{128} << 10);
  EXPECT_EQ(HostPoolConfig::parse("thread_cache=size").middle_max_or_default(), uint64_t{32} << 10);
  EXPECT_EQ(HostPoolConfig::parse("thread_cache=none").middle_max_or_default(), uint64_t{32} << 10);
  EXPECT_EQ(HostPoolConfig::parse("thread_cache=size,middle_max=64KiB").middle_max_or_default(), uint64_t{64} << 10);
  EXPECT_EQ(HostPoolConfig::parse("").to_string().find("middle_max"), std::string::npos);
  EXPECT_EQ(HostPoolConfig::parse(HostPoolConfig::parse("middle_max=8KiB").to_string()).middle_max, uint64_t{8} << 10);
  // huge_threshold is checked against the value in effect.
  expect_error("huge_threshold=64KiB", "huge_threshold");
  EXPECT_NO_THROW(HostPoolConfig::parse("thread_cache=size,huge_threshold=64KiB"));
  for (const auto& [conf, middle] :
       {std::pair{"reserve=1GiB", true}, std::pair{"reserve=1GiB,thread_cache=size", false}}) {
    HostPool pool(conf);
    void* p = pool.allocate(100000);
    ASSERT_NE(p, nullptr) << conf;
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.middle_blocks, middle ? 1u : 0u) << conf;
    EXPECT_EQ(st.large_blocks, middle ? 0u : 1u) << conf;
    EXPECT_EQ(pool.deallocate(p), Status::ok);
  }
}

// A key given twice is a mistake (which one was meant?), not "the last wins".
TEST(HostConfig, DuplicateKeyIsRefused) {
  expect_error("limit=1GiB,limit=2GiB", "'limit' is given twice");
  expect_error("pinned=off, thread_cache=size ,pinned=off", "'pinned' is given twice");
  expect_error("reserve=1GiB,chunk=4MiB,reserve=1GiB", "'reserve'");
  HostPoolConfig c;
  c.huge_cache = 3;
  char error[96];
  EXPECT_EQ(parse_host_config("huge_cache=5,huge_cache=6", &c, error, sizeof(error)), Status::bad_argument);
  EXPECT_EQ(c.huge_cache, 3u);  // untouched
  EXPECT_STREQ(error, "UNIPOOL_HOST_CONF: key 'huge_cache' is given twice");
  // Distinct keys, and keys that only share a prefix, are fine.
  EXPECT_NO_THROW(HostPoolConfig::parse("huge_cache=4,huge_cache_bytes=1GiB"));
}

TEST(HostConfig, NonAllocatingParserKeepsTheOutputOnError) {
  HostPoolConfig c;
  c.huge_cache = 3;
  char error[64];
  EXPECT_EQ(parse_host_config("huge_cache=5,bogus=1", &c, error, sizeof(error)), Status::bad_argument);
  EXPECT_EQ(c.huge_cache, 3u);  // untouched
  EXPECT_STREQ(error, "UNIPOOL_HOST_CONF: unknown key 'bogus'");
  char longer[128];
  EXPECT_EQ(parse_host_config("pinned=maybe", &c, longer, sizeof(longer)), Status::bad_argument);
  EXPECT_STREQ(longer, "UNIPOOL_HOST_CONF: bad value for pinned: 'maybe'");
  EXPECT_EQ(parse_host_config("pinned", &c, longer, sizeof(longer)), Status::bad_argument);
  EXPECT_STREQ(longer, "UNIPOOL_HOST_CONF: 'pinned' is not key=value");
  // A small buffer is truncated, still terminated.
  char tiny[8];
  EXPECT_EQ(parse_host_config("bogus=1", &c, tiny, sizeof(tiny)), Status::bad_argument);
  EXPECT_EQ(std::string(tiny).size(), 7u);
  EXPECT_EQ(parse_host_config(nullptr, &c, error, sizeof(error)), Status::ok);
  EXPECT_EQ(parse_host_config("huge_cache=5", &c, nullptr, 0), Status::ok);
  EXPECT_EQ(c.huge_cache, 5u);
}

TEST(HostConfig, PoolConstructorRejectsBadConfig) {
  HostPoolConfig c;
  c.chunk = 12345;
  EXPECT_THROW(HostPool{c}, std::invalid_argument);
  EXPECT_THROW(HostPool{"bogus=1"}, std::invalid_argument);
  EXPECT_THROW(HostPool{"pin_thread=on"}, std::invalid_argument);
  EXPECT_NO_THROW(HostPool{"reserve=1GiB,pinned=best_effort,pin_thread=on"});
}

TEST(HostConfig, FromEnvironment) {
  ::setenv("UNIPOOL_HOST_CONF", "thread_cache=unlimited,huge_cache=2", 1);
  const HostPoolConfig c = HostPoolConfig::from_env();
  EXPECT_EQ(c.thread_cache, HostThreadCache::unlimited);
  EXPECT_EQ(c.huge_cache, 2u);
  ::setenv("UNIPOOL_HOST_CONF", "thread_cache=sometimes", 1);
  EXPECT_THROW(HostPoolConfig::from_env(), std::invalid_argument);
  ::unsetenv("UNIPOOL_HOST_CONF");
}

}  // namespace
}  // namespace unipool
