// Runs an ebb-bench range-delete workload file against RocksDB (DeleteRange) and prints the same
// statistics the EbbDB side prints. Built by ebb-bench at run time against Debian's librocksdb-dev.
//
// Workload file (little-endian): "EBBRDW01" | u32 key_size | u32 value_size | u64 preload |
// u64 ops | preload ids (u32 each) | ops (u8 kind, u8 class, u32 id, u32 id2 each).
// kind: 0 get, 1 put, 2 delete range [id, id2). class (gets): 0 live, 1 absent, 2 range-deleted.
//
// Usage: range_delete DB_DIR WORKLOAD WRITE_BUFFER_BYTES CACHE_BYTES TARGET_FILE BASE_LEVEL SYNC
// SYNC 1 makes every write (each preload batch of 1,000 puts, each measured put and range
// delete) wait for an fsync of the WAL (WriteOptions::sync); 0 does not.

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include "driver_common.h"

#include <rocksdb/write_batch.h>

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

static std::string key(uint32_t id, uint32_t key_size) {
  std::string k(key_size, '0');
  uint64_t be = 0;
  for (int i = 0; i < 8; i++) be |= (uint64_t)((uint64_t)id >> (8 * (7 - i)) & 0xff) << (8 * i);
  std::memcpy(&k[0], &be, std::min<uint32_t>(8, key_size));
  return k;
}

static void stats(const char* name, std::vector<double>& v) {
  if (v.empty()) {
    std::printf("stat %s 0 0 0 0\n", name);
    return;
  }
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto q = [&](double p) { return v[std::min(v.size() - 1, (size_t)(p * v.size()))]; };
  std::printf("stat %s %zu %.3f %.3f %.3f\n", name, v.size(), sum / v.size(), q(0.5), q(0.99));
}

int main(int argc, char** argv) {
  if (argc != 8) die("usage: range_delete DB WORKLOAD WRITE_BUFFER CACHE TARGET_FILE BASE_LEVEL SYNC");
  std::ifstream f(argv[2], std::ios::binary);
  if (!f) die("cannot open workload file");
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "EBBRDW01", 8) != 0) die("not a workload file");
  uint32_t key_size = rd<uint32_t>(f), value_size = rd<uint32_t>(f);
  uint64_t npre = rd<uint64_t>(f), nops = rd<uint64_t>(f);

  rocksdb::Options o;
  o.create_if_missing = true;
  o.error_if_exists = true;
  o.write_buffer_size = std::strtoull(argv[3], nullptr, 10);
  o.max_write_buffer_number = 3;
  o.target_file_size_base = std::strtoull(argv[5], nullptr, 10);
  o.max_bytes_for_level_base = std::strtoull(argv[6], nullptr, 10);
  o.max_bytes_for_level_multiplier = 10;
  o.level0_file_num_compaction_trigger = 4;
  o.compression = rocksdb::kNoCompression;
  o.max_background_jobs = 2;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(std::strtoull(argv[4], nullptr, 10));
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.block_size = 4096;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(o, argv[1], &db);
  if (!s.ok()) die(s.ToString());

  std::string value(value_size, 'v');
  rocksdb::WriteOptions wo;
  wo.sync = std::strtoull(argv[7], nullptr, 10) != 0;
  rocksdb::ReadOptions ro;
  auto clock = [] { return std::chrono::steady_clock::now(); };
  auto t0 = clock();
  // The preload goes in batches of 1,000 puts, as on the EbbDB side.
  rocksdb::WriteBatch batch;
  for (uint64_t i = 0; i < npre; i++) {
    uint32_t id = rd<uint32_t>(f);
    batch.Put(key(id, key_size), value);
    if (batch.Count() == 1000 || i + 1 == npre) {
      if (!db->Write(wo, &batch).ok()) die("preload write failed");
      batch.Clear();
    }
  }
  wait_idle(db);
  double preload_s = std::chrono::duration<double>(clock() - t0).count();

  std::vector<double> by_class[3], all_gets, rdel;
  uint64_t mismatches = 0;
  std::string got;
  auto start = clock();
  for (uint64_t i = 0; i < nops; i++) {
    uint8_t kind = rd<uint8_t>(f), cls = rd<uint8_t>(f);
    uint32_t id = rd<uint32_t>(f), id2 = rd<uint32_t>(f);
    auto a = clock();
    if (kind == 0) {
      auto st = db->Get(ro, key(id, key_size), &got);
      double us = std::chrono::duration<double, std::micro>(clock() - a).count();
      if (st.ok() != (cls == 0)) mismatches++;
      if (cls < 3) by_class[cls].push_back(us);
      all_gets.push_back(us);
    } else if (kind == 1) {
      if (!db->Put(wo, key(id, key_size), value).ok()) die("put failed");
    } else {
      if (!db->DeleteRange(wo, db->DefaultColumnFamily(), key(id, key_size), key(id2, key_size)).ok())
        die("delete range failed");
      rdel.push_back(std::chrono::duration<double, std::micro>(clock() - a).count());
    }
  }
  double secs = std::chrono::duration<double>(clock() - start).count();
  std::printf("preload_seconds %.3f\n", preload_s);
  std::printf("throughput %.1f\n", nops / secs);
  stats("all", all_gets);
  stats("live", by_class[0]);
  stats("absent", by_class[1]);
  stats("deleted", by_class[2]);
  stats("range_delete", rdel);
  std::printf("mismatches %llu\n", (unsigned long long)mismatches);
  uint64_t sst = 0, readers = 0;
  db->GetIntProperty("rocksdb.total-sst-files-size", &sst);
  db->GetIntProperty("rocksdb.estimate-table-readers-mem", &readers);
  std::printf("sst_bytes %llu\ntable_readers_mem %llu\n", (unsigned long long)sst,
              (unsigned long long)readers);
  delete db;
  return 0;
}
