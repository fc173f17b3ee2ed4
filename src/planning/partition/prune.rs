//! Optional pruning (`--prune`, docs/partition.md, "The search"): keep each target's maximal
//! candidates plus just enough smaller ones to bridge the gaps between them. It is a heuristic:
//! the search over the pruned set can be worse than the exact one, or find no cover at all, so it
//! is off by default. Differences from TVM's prototype: candidates of different targets are never
//! merged (it compared candidates without their target), and of two candidates of one target
//! with the same nodes the first is kept (it dropped both).

use crate::planning::enumerate::Candidate;

/// Which candidates survive pruning (among those `usable` allows).
pub fn prune(n: usize, candidates: &[Candidate], usable: &dyn Fn(usize) -> bool) -> Vec<bool> {
    // Candidates containing each node.
    let mut by_node: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (k, c) in candidates.iter().enumerate() {
        if usable(k) {
            for i in c.sub_graph.inside.iter() {
                by_node[i].push(k as u32);
            }
        }
    }
    let mut live: Vec<bool> = (0..candidates.len()).map(usable).collect();
    let mut kept = vec![false; candidates.len()];
    loop {
        // Maximal live candidates: no other live candidate of the same target contains them
        // (a superset contains the first node, so only that node's list is searched).
        let maximal: Vec<usize> = (0..candidates.len())
            .filter(|&k| live[k] && !kept[k])
            .filter(|&k| {
                let c = &candidates[k];
                let Some(first) = c.sub_graph.inside.first() else {
                    return false;
                };
                !by_node[first].iter().any(|&d| {
                    let d = d as usize;
                    let other = &candidates[d];
                    d != k
                        && live[d]
                        && other.target == c.target
                        && c.sub_graph.inside.is_subset(&other.sub_graph.inside)
                        && (c.sub_graph.inside != other.sub_graph.inside || d < k)
                })
            })
            .collect();
        if maximal.is_empty() {
            break;
        }
        for &k in &maximal {
            kept[k] = true;
        }
        // Kept candidates that cross another kept one are retired from the live set, so that
        // smaller candidates become maximal in the next round.
        let mut retire = Vec::new();
        for k in 0..candidates.len() {
            if !kept[k] || !live[k] {
                continue;
            }
            let c = &candidates[k].sub_graph.inside;
            let crosses = c.iter().any(|i| {
                by_node[i].iter().any(|&d| {
                    let d = d as usize;
                    d != k && kept[d] && candidates[d].sub_graph.inside != *c
                })
            });
            if crosses {
                retire.push(k);
            }
        }
        for k in retire {
            live[k] = false;
        }
    }
    kept
}
