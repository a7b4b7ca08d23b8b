//! KiWi time-window deletes: a delete on the delete key (time) that drops whole pages.
//!
//! A time-window delete `[t_lo, t_hi) x [lo, hi) @ seq` removes every entry whose delete key is
//! in the window, whose sort key is in the key range, and whose sequence number is below `seq`.
//! From the moment it is applied it is an *active window*: reads hide covered entries, and
//! flushes and compactions drop them (a window is one more covering sequence number, like a range
//! delete). It is then executed on every SST (`drop::drop_window`): pages whose delete-key
//! range lies inside the window are dropped without being read, edge pages are read and rewritten
//! without the covered entries, other pages stay where they are. The rewritten pages, a new
//! filter block, index block and footer are appended to the file, and the change commits through
//! the manifest; the superseded regions are punched out of the file (`punch`) once no reader
//! holds the old layout (and again at the next open, after a crash). The window is persisted
//! when its page drops are done, no memtable holds entries older than it, and the punches ran.

pub(crate) mod drop;
pub(crate) mod punch;
pub mod tuning;
mod window;
pub mod workload;

pub use tuning::{tile_pages, WorkloadMix};
pub use window::TimeWindow;
pub use workload::{layout_for, WorkloadCounts};
