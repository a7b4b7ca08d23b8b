//! DR-tree round trips and probes against a brute-force scan.

use bytes::Bytes;
use proptest::prelude::*;

use super::{file_name, DrTree, DrWriter};
use crate::gloran::piece::{combine, Piece, SeqList};
use crate::gloran::Probe;

fn key(x: u16) -> Bytes {
    Bytes::copy_from_slice(&x.to_be_bytes())
}

fn build(recs: &[(u16, u16, u64)]) -> Vec<Piece> {
    let mut all: Vec<Piece> = Vec::new();
    for &(lo, len, s) in recs {
        let hi = if len == 0 { Bytes::new() } else { key(lo.saturating_add(len)) };
        let one = [Piece { lo: key(lo), hi, seqs: SeqList::from_slice(&[s]) }];
        all = combine(&[&all, &one], None, 0);
    }
    all
}

fn write(dir: &std::path::Path, id: u64, pieces: &[Piece], page: usize, fanout: usize) -> DrTree {
    let mut w = DrWriter::create(id, &dir.join(file_name(id)), page, fanout).unwrap();
    for p in pieces {
        w.add(p).unwrap();
    }
    let meta = w.finish().unwrap();
    DrTree::open(dir, meta).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn probes_match_the_pieces(
        recs in prop::collection::vec((0u16..5000, 0u16..400, 1u64..1000), 1..300),
        page in prop_oneof![Just(256usize), Just(1024)],
        fanout in 2usize..8,
    ) {
        let recs: Vec<_> = recs.into_iter().enumerate().map(|(i, (a, b, s))| (a, b, s * 1000 + i as u64)).collect();
        let pieces = build(&recs);
        let dir = tempfile::tempdir().unwrap();
        let t = write(dir.path(), 7, &pieces, page, fanout);
        prop_assert_eq!(t.pieces().unwrap(), pieces.clone());
        prop_assert!(t.meta().props.height as usize >= 1);
        for x in (0u16..5500).step_by(7) {
            let k = x.to_be_bytes();
            let piece = pieces.iter().find(|p| p.contains(&k));
            prop_assert_eq!(t.covering(&k).unwrap(), piece.map(|p| p.seqs.clone()).unwrap_or_default());
            for (e, tt) in [(0u64, u64::MAX), (500_000, u64::MAX), (0, 400_000)] {
                let want = match piece.and_then(|p| p.visible(tt)) {
                    Some(s) if s > e => Probe::Deleted,
                    Some(_) => Probe::Live,
                    None if piece.is_some_and(|p| p.max_seq() <= e) => Probe::Live,
                    None => Probe::Unknown,
                };
                let got = t.probe(&k, e, tt).unwrap();
                // Pruning by sequence may answer Live where the piece is merely invisible, but only
                // when everything below is older than the entry: never a wrong Deleted/Live swap.
                // Every delete in this tree below the pruned node, and in any older source, is
                // older than the entry when `e >= min_seq` of the tree: Live is then correct.
                let pruned = got == Probe::Live && want == Probe::Unknown && e >= t.meta().props.min_seq;
                prop_assert!(got == want || pruned, "key {} e {} t {}: {:?} vs {:?}", x, e, tt, got, want);
            }
        }
    }
}

#[test]
fn corrupt_leaf_is_reported() {
    let pieces = build(&[(10, 20, 5), (100, 5, 9)]);
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), 3, &pieces, 256, 4);
    let path = t.path().to_path_buf();
    let meta = t.meta().clone();
    drop(t);
    let mut data = std::fs::read(&path).unwrap();
    data[3] ^= 0x40;
    std::fs::write(&path, &data).unwrap();
    let t = DrTree::open(dir.path(), meta).unwrap();
    let err = t.probe(&15u16.to_be_bytes(), 0, u64::MAX).unwrap_err();
    assert!(err.is_corruption(), "{err}");
}

#[test]
fn a_newer_format_is_refused_naming_both_formats() {
    let pieces = build(&[(10, 20, 5)]);
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), 4, &pieces, 256, 4);
    let path = t.path().to_path_buf();
    let meta = t.meta().clone();
    drop(t);
    let mut data = std::fs::read(&path).unwrap();
    let foot = data.len() - super::FOOTER_LEN;
    let magic = (super::MAGIC & !0xffff) | 2;
    data[foot + 12..foot + 20].copy_from_slice(&magic.to_le_bytes());
    let crc = crc32fast::hash(&data[foot..foot + 20]);
    data[foot + 20..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &data).unwrap();
    let err = DrTree::open(dir.path(), meta).unwrap_err();
    assert!(!err.is_corruption(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("range index format 2;") && text.ends_with("reads range index formats 1-1"),
        "{text}"
    );
}
