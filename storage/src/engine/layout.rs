//! The KiWi+ layout in use: tile sizes per level for files written from now on, retuned from
//! the operations counted each epoch ([`crate::TileLayout::Tuned`]).

use parking_lot::Mutex;

use super::{Engine, Inner};
use crate::filter::RangeFilterSpec;
use crate::kiwi::workload::{smooth, WorkloadCounters};
use crate::kiwi::{layout_for, WorkloadCounts, WorkloadMix};
use crate::TileLayout;

/// Why the layout has the tile sizes it has.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum LayoutReason {
    /// Sizes fixed in the options.
    Configured,
    /// No time-window delete, retention purge or retention rule seen yet: time order inside
    /// tiles would buy nothing, so every level keeps h = 1.
    NoTimeDeletes,
    /// Retention or time-window deletes are present but no epoch was counted yet: the
    /// configured time-series mix.
    TimeSeriesDefault,
    /// The cost model on the counted mix (per epoch, smoothed over epochs).
    Measured,
}

impl std::fmt::Display for LayoutReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutReason::Configured => "configured",
            LayoutReason::NoTimeDeletes => "no time deletes",
            LayoutReason::TimeSeriesDefault => "time-series default",
            LayoutReason::Measured => "measured",
        })
    }
}

/// The layout an engine writes new files with, and what it was computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Delete-tile size h per level, level 0 first.
    pub tile_pages: Vec<usize>,
    /// Why.
    pub reason: LayoutReason,
    /// The per-epoch mix the sizes follow (`None` for configured sizes and before any delete).
    pub mix: Option<WorkloadMix>,
    /// Epochs counted so far.
    pub epochs: u64,
    /// Operations counted in the epoch under way.
    pub current: WorkloadCounts,
}

/// Counting state and the layout it gave.
#[derive(Debug)]
pub(super) struct LayoutState {
    pub(super) counters: WorkloadCounters,
    tuned: Mutex<Tuned>,
}

#[derive(Debug)]
struct Tuned {
    epoch_started_ms: u64,
    epochs: u64,
    mix: Option<WorkloadMix>,
}

impl LayoutState {
    pub(super) fn new(now_ms: u64) -> Self {
        LayoutState {
            counters: WorkloadCounters::default(),
            tuned: Mutex::new(Tuned { epoch_started_ms: now_ms, epochs: 0, mix: None }),
        }
    }
}

impl Engine {
    /// The layout new files are written with, and why.
    pub fn layout(&self) -> Layout {
        self.inner.layout()
    }
}

impl Inner {
    /// Range filter parameters for files written now: sized for the span most short scans
    /// had, or the configured default before any.
    pub(crate) fn range_filter_spec(&self) -> Option<RangeFilterSpec> {
        let f = self.opts.range_filter.as_ref()?;
        let range = self.tuning.layout.counters.typical_span().unwrap_or(f.default_range);
        Some(RangeFilterSpec::for_range(f, range))
    }

    /// Delete-tile size h for files written at `level` now.
    pub(crate) fn tile_pages_for(&self, level: usize) -> usize {
        let h = self.layout().tile_pages;
        h.get(level).or(h.last()).copied().unwrap_or(1).max(1)
    }

    /// The current layout, retuned first if an epoch ended.
    pub(super) fn layout(&self) -> Layout {
        let state = &self.tuning.layout;
        let current = state.counters.peek();
        let tuning = match &self.opts.tiles {
            TileLayout::Fixed(h) => {
                return Layout {
                    tile_pages: h.clone(),
                    reason: LayoutReason::Configured,
                    mix: None,
                    epochs: 0,
                    current,
                }
            }
            TileLayout::Tuned(t) => t,
        };
        let now = self.opts.clock.now_ms();
        let retention = !self.deletes.rules.read().is_empty();
        let mut t = state.tuned.lock();
        let epoch_ms = tuning.epoch.as_millis() as u64;
        let ended = now.saturating_sub(t.epoch_started_ms) / epoch_ms.max(1);
        if ended > 0 {
            // Epochs nobody asked about in between share what was counted.
            let counted = state.counters.take();
            t.mix = Some(smooth(t.mix, &counted, ended, retention));
            t.epochs += ended;
            t.epoch_started_ms += ended * epoch_ms;
        }
        let current = state.counters.peek();
        let (mix, reason) = match t.mix {
            Some(m) => (Some(m), LayoutReason::Measured),
            None if retention || current.window_deletes > 0 => {
                (Some(tuning.default_mix), LayoutReason::TimeSeriesDefault)
            }
            None => (None, LayoutReason::NoTimeDeletes),
        };
        let epochs = t.epochs;
        drop(t);
        Layout {
            tile_pages: match &mix {
                Some(m) => layout_for(&self.opts, m),
                None => vec![1; self.opts.num_levels],
            },
            reason,
            mix,
            epochs,
            current,
        }
    }
}
