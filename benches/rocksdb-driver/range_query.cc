// Runs an ebb-bench range-query workload file against RocksDB with a prefix Bloom filter and
// prints per-class latency of the (empty) range queries. Built by ebb-bench at run time against
// Debian's librocksdb-dev.
//
// Workload file (little-endian): "EBBRQW01" | u64 keys | u32 value_size | u32 bits_per_key |
// u32 prefix_len | u32 classes | u64 queries | keys (u64 each, written big-endian as 8-byte
// keys) | queries (u64 lo, u64 hi inclusive, u32 class each).
//
// Usage: range_query DB_DIR WORKLOAD CACHE_BYTES SYNC
// SYNC 1: each load batch of 1,000 keys waits for an fsync of the WAL; 0: it does not.

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>

#include "driver_common.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

static std::string be(uint64_t x) {
  std::string k(8, '\0');
  for (int i = 0; i < 8; i++) k[i] = (char)((x >> (8 * (7 - i))) & 0xff);
  return k;
}

int main(int argc, char** argv) {
  if (argc != 5) die("usage: range_query DB WORKLOAD CACHE_BYTES SYNC");
  std::ifstream f(argv[2], std::ios::binary);
  if (!f) die("cannot open workload file");
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "EBBRQW01", 8) != 0) die("not a workload file");
  uint64_t nkeys = rd<uint64_t>(f);
  uint32_t value_size = rd<uint32_t>(f), bits = rd<uint32_t>(f), prefix_len = rd<uint32_t>(f);
  uint32_t nclasses = rd<uint32_t>(f);
  uint64_t nq = rd<uint64_t>(f);

  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.compression = rocksdb::kNoCompression;
  opts.max_background_jobs = 2;
  opts.level0_file_num_compaction_trigger = 4;
  opts.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(prefix_len));
  rocksdb::BlockBasedTableOptions t;
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(bits, false));
  t.whole_key_filtering = true;
  t.block_cache = rocksdb::NewLRUCache(std::strtoull(argv[3], nullptr, 10));
  opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(opts, argv[1], &db);
  if (!s.ok()) die(s.ToString());

  std::string value(value_size, 'v');
  rocksdb::WriteOptions wo;
  wo.sync = std::strtoull(argv[4], nullptr, 10) != 0;
  rocksdb::WriteBatch batch;
  for (uint64_t i = 0; i < nkeys; i++) {
    batch.Put(be(rd<uint64_t>(f)), value);
    if (batch.Count() == 1000 || i + 1 == nkeys) {
      s = db->Write(wo, &batch);
      if (!s.ok()) die(s.ToString());
      batch.Clear();
    }
  }
  db->Flush(rocksdb::FlushOptions());
  db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr);
  wait_idle(db);

  std::vector<std::vector<double>> lat(nclasses);
  uint64_t found = 0;
  for (uint64_t i = 0; i < nq; i++) {
    uint64_t lo = rd<uint64_t>(f), hi = rd<uint64_t>(f);
    uint32_t c = rd<uint32_t>(f);
    if (c >= nclasses) die("bad class");
    std::string lk = be(lo), uk = hi == UINT64_MAX ? std::string(9, '\xff') : be(hi + 1);
    rocksdb::Slice upper(uk);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper;
    ro.auto_prefix_mode = true;
    auto t0 = std::chrono::steady_clock::now();
    rocksdb::Iterator* it = db->NewIterator(ro);
    it->Seek(lk);
    bool hit = it->Valid();
    delete it;
    auto t1 = std::chrono::steady_clock::now();
    found += hit;
    lat[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  for (uint32_t c = 0; c < nclasses; c++) {
    auto& v = lat[c];
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    double p50 = v.empty() ? 0 : v[v.size() / 2];
    std::printf("stat %u %zu %.3f %.3f\n", c, v.size(), v.empty() ? 0.0 : sum / v.size(), p50);
  }
  uint64_t filter_mem = 0;
  db->GetIntProperty("rocksdb.estimate-table-readers-mem", &filter_mem);
  std::printf("found %llu\n", (unsigned long long)found);
  std::printf("table_readers_mem %llu\n", (unsigned long long)filter_mem);
  delete db;
  return 0;
}
