// Helpers shared by the RocksDB drivers of ebb-bench: fatal errors, little-endian reads of a
// workload file, and waiting for background flushes and compactions.

#pragma once

#include <rocksdb/db.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

static void die(const std::string& m) {
  std::fprintf(stderr, "error: %s\n", m.c_str());
  std::exit(1);
}

template <typename T>
static T rd(std::ifstream& f) {
  T v;
  f.read(reinterpret_cast<char*>(&v), sizeof(T));
  if (!f) die("truncated workload file");
  return v;
}

static void wait_idle(rocksdb::DB* db) {
  for (int i = 0; i < 36000; i++) {
    uint64_t flushes = 0, compactions = 0, pending = 0;
    db->GetIntProperty("rocksdb.num-running-flushes", &flushes);
    db->GetIntProperty("rocksdb.num-running-compactions", &compactions);
    db->GetIntProperty("rocksdb.compaction-pending", &pending);
    if (flushes == 0 && compactions == 0 && pending == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}
