//! Benchmarks of EbbDB.
