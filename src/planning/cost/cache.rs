//! The cost cache: candidates are priced once per structural key ([`crate::planning::enumerate::key`]),
//! which includes the target, so structurally identical candidates (the same fused layer in each
//! of a transformer's blocks) cost one estimator call between them.

use super::{Cost, Estimate, Estimator, Request};
use crate::planning::enumerate::key::{Key, Signatures};
use crate::planning::enumerate::{Candidate, DataflowGraph};
use crate::rules::ruletree::Program;
use std::collections::HashMap;

/// Costs of candidates, with the number of estimator calls made.
pub struct Estimates {
    /// The cost of each candidate, in candidate order.
    pub costs: Vec<Cost>,
    /// Why each candidate's cost is unusable, where its estimator said (candidate order).
    pub why: Vec<Option<String>>,
    /// Estimator calls (distinct structures priced).
    pub calls: usize,
}

/// Prices every candidate; host candidates cost zero and are not estimated. Slow estimators
/// (see [`Estimator::parallel`]) run on several threads; the result does not depend on timing.
pub fn estimate_all(
    g: &DataflowGraph<'_>,
    program: &Program,
    candidates: &[Candidate],
    estimator: &dyn Estimator,
    progress: &dyn Fn(usize, usize),
) -> Estimates {
    let mut sigs = Signatures::new(g);
    let mut slot_of: HashMap<Key, usize> = HashMap::new();
    // The candidate priced for each distinct key, in first-appearance order.
    let mut first: Vec<usize> = Vec::new();
    let mut slot: Vec<Option<usize>> = Vec::with_capacity(candidates.len());
    for (k, c) in candidates.iter().enumerate() {
        if program.targets[c.target].is_host {
            slot.push(None);
            continue;
        }
        let key = sigs.key(g, c);
        let next = first.len();
        let s = *slot_of.entry(key).or_insert(next);
        if s == next {
            first.push(k);
        }
        slot.push(Some(s));
    }
    let reqs: Vec<Request<'_, '_>> = first
        .iter()
        .map(|&k| Request {
            graph: g,
            program,
            candidate: &candidates[k],
        })
        .collect();
    let mut distinct: Vec<Estimate> = estimator.estimate_many(&reqs, progress);
    // The contract's range, whatever the estimator: a cost above the ceiling is unusable.
    for e in &mut distinct {
        if let (true, Err(why)) = (e.cost.is_known(), super::check_seconds(e.cost.seconds())) {
            *e = Estimate::because(
                Cost::INVALID,
                format!("{}: the estimate {} {why}", estimator.name(), e.cost),
            );
        }
    }
    progress(first.len(), first.len());
    Estimates {
        costs: slot
            .iter()
            .map(|s| s.map_or(Cost::ZERO, |s| distinct[s].cost))
            .collect(),
        why: slot
            .iter()
            .map(|s| s.and_then(|s| distinct[s].why.clone()))
            .collect(),
        calls: first.len(),
    }
}

/// `f` over `0..n` on as many threads as there are cores (at least 4: measurers mostly wait).
pub(crate) fn parallel_map(
    n: usize,
    f: &(dyn Fn(usize) -> Estimate + Sync),
    progress: &dyn Fn(usize, usize),
) -> Vec<Estimate> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let out: Vec<Mutex<Estimate>> = (0..n)
        .map(|_| Mutex::new(Estimate::of(Cost::UNKNOWN)))
        .collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(4, |p| p.get())
        .max(4)
        .min(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        break;
                    }
                    let c = f(k);
                    if let Ok(mut slot) = out[k].lock() {
                        *slot = c;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // The calling thread reports progress while the workers run.
        loop {
            progress(done.load(Ordering::Relaxed), n);
            if handles.iter().all(|h| h.is_finished()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|_| Estimate::because(Cost::INVALID, "the estimator panicked"))
        })
        .collect()
}
