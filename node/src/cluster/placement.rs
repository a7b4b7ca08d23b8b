//! Where shard replicas should live: every shard on `min(replication, active nodes)` nodes,
//! replicas spread so no node holds more than one above another, reached by as few moves as
//! possible (existing replicas stay where they are unless a node is over its share).

use std::collections::BTreeMap;

use super::view::MetaView;

/// The voters each shard should have, for the active nodes of `view`.
pub fn target(view: &MetaView) -> BTreeMap<u64, Vec<u64>> {
    let active: Vec<u64> = view.active().map(|n| n.id).collect();
    let mut out = BTreeMap::new();
    if active.is_empty() {
        return out;
    }
    let rf = view.settings.map(|s| s.replication as usize).unwrap_or(1).clamp(1, active.len());
    let mut load: BTreeMap<u64, usize> = active.iter().map(|&n| (n, 0)).collect();
    for s in view.shards.values() {
        let mut keep: Vec<u64> =
            s.replicas.iter().copied().filter(|n| load.contains_key(n)).collect();
        keep.truncate(rf);
        for n in &keep {
            *load.entry(*n).or_default() += 1;
        }
        out.insert(s.id, keep);
    }
    // Fill shards short of replicas from the least loaded nodes.
    for replicas in out.values_mut() {
        while replicas.len() < rf {
            let Some((&n, _)) =
                load.iter().filter(|(n, _)| !replicas.contains(n)).min_by_key(|(n, l)| (**l, **n))
            else {
                break;
            };
            replicas.push(n);
            *load.entry(n).or_default() += 1;
        }
    }
    // Even out: move a replica from the most to the least loaded node while they differ by
    // more than one.
    loop {
        let (&hi, &hi_load) =
            load.iter().max_by_key(|(n, l)| (**l, std::cmp::Reverse(**n))).unwrap_or((&0, &0));
        let (&lo, &lo_load) = load.iter().min_by_key(|(n, l)| (**l, **n)).unwrap_or((&0, &0));
        if hi_load <= lo_load + 1 {
            break;
        }
        let Some(replicas) = out.values_mut().find(|r| r.contains(&hi) && !r.contains(&lo)) else {
            break;
        };
        for r in replicas.iter_mut() {
            if *r == hi {
                *r = lo;
            }
        }
        *load.entry(hi).or_default() -= 1;
        *load.entry(lo).or_default() += 1;
    }
    out
}

/// Leadership moves that bring the nodes' shard-leader counts within one of each other where
/// the replicas allow it: `(shard, to)`, `to` always a node holding a replica of the shard. A
/// move takes a shard from a node leading at least two more shards than the node it goes to;
/// where no such node holds a replica of its shards, a chain does it (the most loaded node
/// hands a shard to a node that hands one of its own on, and so on, to a node leading two
/// fewer), listed from its far end so that no node leads more than before at any step. Every
/// move or chain narrows the spread, so the list is finite, and it stops only where no chain
/// is left, which is where the replicas allow no closer spread. Shards without a known leader,
/// or led by a node not in `nodes`, are left alone. The rebalancer applies the first move and
/// asks again.
pub fn leader_moves(
    replicas: &BTreeMap<u64, Vec<u64>>,
    leaders: &BTreeMap<u64, u64>,
    nodes: &[u64],
) -> Vec<(u64, u64)> {
    let mut count: BTreeMap<u64, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    let mut lead: BTreeMap<u64, u64> = BTreeMap::new();
    for (&shard, &leader) in leaders {
        if let Some(c) = count.get_mut(&leader) {
            *c += 1;
            lead.insert(shard, leader);
        }
    }
    let mut moves = Vec::new();
    loop {
        let mut by_load: Vec<(usize, u64)> = count.iter().map(|(&n, &c)| (c, n)).collect();
        by_load.sort_by(|a, b| b.cmp(a));
        let found = by_load.iter().find_map(|&(from_load, from)| {
            lead.iter().filter(|(_, l)| **l == from).find_map(|(&shard, _)| {
                let holders = replicas.get(&shard)?;
                let (to_load, to) = holders
                    .iter()
                    .filter(|&&n| n != from)
                    .filter_map(|&n| count.get(&n).map(|&c| (c, n)))
                    .min()?;
                (to_load + 1 < from_load).then_some((shard, from, to))
            })
        });
        let steps = match found {
            Some(step) => vec![step],
            None => match leader_chain(replicas, &lead, &count) {
                Some(chain) => chain,
                None => return moves,
            },
        };
        for (shard, from, to) in steps {
            lead.insert(shard, to);
            *count.entry(from).or_default() -= 1;
            *count.entry(to).or_default() += 1;
            moves.push((shard, to));
        }
    }
}

/// The shortest chain of leadership moves `(shard, from, to)` from a node leading the most
/// shards to one leading at least two fewer (each step moves a shard its `from` leads to a
/// holder of a replica), last step first; `None` if there is none.
fn leader_chain(
    replicas: &BTreeMap<u64, Vec<u64>>,
    lead: &BTreeMap<u64, u64>,
    count: &BTreeMap<u64, usize>,
) -> Option<Vec<(u64, u64, u64)>> {
    let max = count.values().copied().max()?;
    // Breadth first from every most loaded node; `via[n]`: the step that reached `n`.
    let mut via: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut queue: std::collections::VecDeque<u64> =
        count.iter().filter(|(_, &c)| c == max).map(|(&n, _)| n).collect();
    let starts: Vec<u64> = queue.iter().copied().collect();
    while let Some(from) = queue.pop_front() {
        for (&shard, _) in lead.iter().filter(|(_, l)| **l == from) {
            for &to in replicas.get(&shard).into_iter().flatten() {
                if starts.contains(&to) || via.contains_key(&to) || !count.contains_key(&to) {
                    continue;
                }
                via.insert(to, (shard, from));
                if count[&to] + 2 <= max {
                    let mut chain = Vec::new();
                    let mut at = to;
                    while let Some(&(shard, from)) = via.get(&at) {
                        chain.push((shard, from, at));
                        at = from;
                    }
                    return Some(chain);
                }
                queue.push_back(to);
            }
        }
    }
    None
}

/// What the split policy knows of a shard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardLoad {
    /// The shard.
    pub id: u64,
    /// Bytes its leader's replica holds.
    pub bytes: u64,
    /// Rows a second its leader wrote lately, once measured.
    pub rows_per_sec: Option<f64>,
    /// False if it cannot split now (too narrow, moving, or in a split already).
    pub splittable: bool,
}

/// When shards split by themselves (`None`: never for that reason).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitLimits {
    /// Bytes.
    pub bytes: Option<u64>,
    /// Rows written a second.
    pub rows_per_sec: Option<u64>,
}

/// The shard to split next: of those over a limit, the one furthest over it (as a multiple of
/// the limit); `None` if none is.
pub fn split_next(loads: &[ShardLoad], limits: &SplitLimits) -> Option<u64> {
    let over = |l: &ShardLoad| {
        let by_bytes = limits.bytes.map(|b| l.bytes as f64 / b.max(1) as f64);
        let by_rate = limits.rows_per_sec.zip(l.rows_per_sec).map(|(r, x)| x / r.max(1) as f64);
        by_bytes.into_iter().chain(by_rate).fold(0.0f64, f64::max)
    };
    loads
        .iter()
        .filter(|l| l.splittable)
        .map(|l| (over(l), l.id))
        .filter(|(x, _)| *x > 1.0)
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::view::{NodeInfo, NodeState, Settings, ShardInfo};

    fn view(nodes: &[u64], shards: &[&[u64]], rf: u32) -> MetaView {
        let mut v = MetaView {
            settings: Some(Settings { shards: shards.len() as u32, replication: rf }),
            ..Default::default()
        };
        for &n in nodes {
            v.nodes.insert(
                n,
                NodeInfo {
                    id: n,
                    grpc_addr: String::new(),
                    http_addr: String::new(),
                    pg_addr: String::new(),
                    state: NodeState::Active,
                },
            );
        }
        for (i, r) in shards.iter().enumerate() {
            let id = i as u64 + 1;
            v.shards.insert(id, ShardInfo::root(id, r.to_vec()));
        }
        v
    }

    fn loads(t: &BTreeMap<u64, Vec<u64>>) -> BTreeMap<u64, usize> {
        let mut l = BTreeMap::new();
        for r in t.values() {
            for n in r {
                *l.entry(*n).or_default() += 1;
            }
        }
        l
    }

    #[test]
    fn one_node_holds_everything_then_three_share_it() {
        let v = view(&[1], &[&[1], &[1], &[1], &[1]], 3);
        assert!(target(&v).values().all(|r| r == &vec![1]));
        let v = view(&[1, 2, 3], &[&[1], &[1], &[1], &[1]], 3);
        let t = target(&v);
        assert!(t.values().all(|r| {
            let mut r = r.clone();
            r.sort();
            r == vec![1, 2, 3]
        }));
    }

    #[test]
    fn scale_out_moves_a_fair_share_and_keeps_the_rest() {
        let three: &[u64] = &[1, 2, 3];
        let v = view(&[1, 2, 3, 4, 5], &[three; 8], 3);
        let t = target(&v);
        let l = loads(&t);
        assert_eq!(l.values().sum::<usize>(), 24);
        assert!(l.values().max().unwrap() - l.values().min().unwrap() <= 1, "{l:?}");
        for r in t.values() {
            assert_eq!(r.len(), 3);
            let mut d = r.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 3, "a shard placed twice on a node: {r:?}");
            assert!(r.iter().filter(|n| three.contains(n)).count() >= 1);
        }
        // Already balanced: nothing moves.
        let again =
            view(&[1, 2, 3, 4, 5], &t.values().map(|r| r.as_slice()).collect::<Vec<_>>(), 3);
        assert_eq!(target(&again), t);
    }

    #[test]
    fn leaders_spread_over_the_replicas() {
        let all: BTreeMap<u64, Vec<u64>> = (1..=6).map(|s| (s, vec![1, 2, 3])).collect();
        let on_one: BTreeMap<u64, u64> = (1..=6).map(|s| (s, 1)).collect();
        let moves = leader_moves(&all, &on_one, &[1, 2, 3]);
        assert_eq!(moves.len(), 4, "{moves:?}");
        let mut lead = on_one.clone();
        for (s, to) in &moves {
            assert!(all[s].contains(to));
            lead.insert(*s, *to);
        }
        let mut per: BTreeMap<u64, usize> = BTreeMap::new();
        lead.values().for_each(|n| *per.entry(*n).or_default() += 1);
        assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        // Balanced already: nothing moves; a shard lives only where its replicas are.
        assert!(leader_moves(&all, &lead, &[1, 2, 3]).is_empty());
        let pinned: BTreeMap<u64, Vec<u64>> = (1..=4).map(|s| (s, vec![1])).collect();
        let on: BTreeMap<u64, u64> = (1..=4).map(|s| (s, 1)).collect();
        assert!(leader_moves(&pinned, &on, &[1, 2]).is_empty());
    }

    #[test]
    fn leaders_move_along_a_chain_where_no_replica_allows_a_direct_move() {
        // Node 4 leads shards 1 and 2, node 6 none, and holds no replica of either.
        let replicas: BTreeMap<u64, Vec<u64>> = [
            (1, vec![4, 1, 2]),
            (2, vec![4, 3, 5]),
            (3, vec![1, 6, 2]),
            (4, vec![2, 6, 3]),
            (5, vec![3, 6, 5]),
            (6, vec![5, 1, 2]),
        ]
        .into();
        let leaders: BTreeMap<u64, u64> = [(1, 4), (2, 4), (3, 1), (4, 2), (5, 3), (6, 5)].into();
        let moves = leader_moves(&replicas, &leaders, &[1, 2, 3, 4, 5, 6]);
        // Node 1 hands shard 3 to node 6 first, then takes shard 1 from node 4.
        assert_eq!(moves, vec![(3, 6), (1, 1)]);
    }

    /// The smallest spread of leaders per node any choice of leaders among the replicas
    /// reaches (every shard of `leaders` led by one of its replicas on `ids`).
    fn best_spread(
        replicas: &BTreeMap<u64, Vec<u64>>,
        leaders: &BTreeMap<u64, u64>,
        ids: &[u64],
    ) -> usize {
        let shards: Vec<Vec<u64>> = leaders
            .keys()
            .map(|s| replicas[s].iter().copied().filter(|n| ids.contains(n)).collect())
            .collect();
        let mut best = usize::MAX;
        let mut pick = vec![0usize; shards.len()];
        loop {
            let mut per: BTreeMap<u64, usize> = ids.iter().map(|&n| (n, 0)).collect();
            for (holders, &i) in shards.iter().zip(&pick) {
                *per.entry(holders[i]).or_default() += 1;
            }
            let (hi, lo) = (per.values().max().unwrap_or(&0), per.values().min().unwrap_or(&0));
            best = best.min(hi - lo);
            // The next choice, as an odometer.
            let mut d = 0;
            while d < pick.len() && pick[d] + 1 == shards[d].len() {
                pick[d] = 0;
                d += 1;
            }
            if d == pick.len() {
                return best;
            }
            pick[d] += 1;
        }
    }

    proptest::proptest! {
        /// With every shard on every node the leaders end within one of each other; in any
        /// placement the moves go to replica holders, no step leaves a node leading more than
        /// the most any led before, and the leaders end within one of each other wherever the
        /// replicas allow it (checked against every choice of leaders, for up to 8 shards).
        #[test]
        fn leader_moves_even_out_and_stay_on_replicas(
            nodes in 1u64..7,
            shards in proptest::collection::vec((proptest::collection::btree_set(1u64..7, 1..4), 1u64..7), 1..24),
            full in proptest::bool::ANY,
        ) {
            let ids: Vec<u64> = (1..=nodes).collect();
            let mut replicas = BTreeMap::new();
            let mut leaders = BTreeMap::new();
            for (i, (holders, leader)) in shards.iter().enumerate() {
                let s = i as u64 + 1;
                let holders: Vec<u64> = match full {
                    true => ids.clone(),
                    false => holders.iter().copied().filter(|n| *n <= nodes).collect(),
                };
                let leader = holders.get(*leader as usize % holders.len().max(1)).copied();
                if let Some(l) = leader {
                    leaders.insert(s, l);
                }
                replicas.insert(s, holders);
            }
            let spread = |lead: &BTreeMap<u64, u64>| {
                let mut per: BTreeMap<u64, usize> = ids.iter().map(|&n| (n, 0)).collect();
                lead.values().for_each(|n| *per.entry(*n).or_default() += 1);
                per.values().max().unwrap_or(&0) - per.values().min().unwrap_or(&0)
            };
            let most = |lead: &BTreeMap<u64, u64>| {
                let mut per: BTreeMap<u64, usize> = BTreeMap::new();
                lead.values().for_each(|n| *per.entry(*n).or_default() += 1);
                per.values().copied().max().unwrap_or(0)
            };
            let (before, top) = (spread(&leaders), most(&leaders));
            let mut lead = leaders.clone();
            for (s, to) in leader_moves(&replicas, &leaders, &ids) {
                proptest::prop_assert!(replicas[&s].contains(&to));
                lead.insert(s, to);
                proptest::prop_assert!(most(&lead) <= top, "a step overloads a node: {lead:?}");
            }
            proptest::prop_assert!(spread(&lead) <= before);
            if full {
                proptest::prop_assert!(spread(&lead) <= 1, "{lead:?}");
            }
            if leaders.len() <= 8 && best_spread(&replicas, &leaders, &ids) <= 1 {
                proptest::prop_assert!(spread(&lead) <= 1, "{leaders:?} -> {lead:?}");
            }
        }
    }

    #[test]
    fn a_drained_node_loses_its_replicas() {
        let three: &[u64] = &[1, 2, 3];
        let mut v = view(&[1, 2, 3, 4], &[three; 4], 3);
        v.nodes.get_mut(&2).unwrap().state = NodeState::Draining;
        let t = target(&v);
        assert!(t.values().all(|r| !r.contains(&2) && r.len() == 3));
    }

    #[test]
    fn the_shard_furthest_over_a_limit_splits_first() {
        let load = |id, bytes, rate: Option<f64>| ShardLoad {
            id,
            bytes,
            rows_per_sec: rate,
            splittable: true,
        };
        let limits = SplitLimits { bytes: Some(100), rows_per_sec: Some(1000) };
        let loads = [load(1, 90, Some(900.0)), load(2, 150, None), load(3, 10, Some(3000.0))];
        assert_eq!(split_next(&loads, &limits), Some(3), "3x its rate beats 1.5x bytes");
        assert_eq!(split_next(&loads[..2], &limits), Some(2));
        assert_eq!(split_next(&loads[..1], &limits), None, "under both limits");
        let mut stuck = loads;
        stuck[2].splittable = false;
        stuck[1].splittable = false;
        assert_eq!(split_next(&stuck, &limits), None, "only shards that can split");
        assert_eq!(split_next(&loads, &SplitLimits::default()), None, "no limits, no splits");
        let rate_only = SplitLimits { bytes: None, rows_per_sec: Some(1000) };
        assert_eq!(split_next(&loads, &rate_only), Some(3));
    }
}
