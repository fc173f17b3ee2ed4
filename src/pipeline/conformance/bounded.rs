//! Running many jobs in one process, each under a time bound and a panic guard.
//!
//! Worker threads take jobs in order. Each worker has a one-thread rayon pool of its own for the
//! executables it builds. A job runs under `catch_unwind`: a panic becomes
//! [`Ended::Panicked`] with its message and place (the panic hook prints nothing for these
//! threads). A job that runs past the time bound becomes [`Ended::TimedOut`]: its worker is
//! abandoned (a thread cannot be stopped from outside; it is left to finish or to hang until the
//! process ends) and a fresh worker takes its place. After [`MAX_HUNG`] abandoned workers the
//! jobs not started yet are not run ([`Ended::NotRun`]), so a run never holds more than that
//! many stuck threads.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// The most workers abandoned to hung jobs before the remaining jobs are given up.
pub const MAX_HUNG: usize = 4;

/// How a job ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended<R> {
    /// It returned.
    Returned(R),
    /// It panicked: the message and, when known, the place (`src/x.rs:10:5`).
    Panicked(String),
    /// It ran past the time bound.
    TimedOut,
    /// It was not started (too many jobs hung before it).
    NotRun,
}

/// A job's end and its wall time.
#[derive(Clone, Debug)]
pub struct Done<R> {
    /// How it ended.
    pub ended: Ended<R>,
    /// How long it ran (the bound, for a job that timed out).
    pub time: Duration,
}

/// Where the panic hook leaves the place of a panic of this thread (shared by a worker and its
/// pool's thread).
type Slot = Arc<Mutex<Option<String>>>;

thread_local! {
    static PANIC_SLOT: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

/// Installs (once per process) a panic hook that stays quiet on the threads of these workers
/// and records the panic's place for them; other threads get the previous hook.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let slot = PANIC_SLOT.with(|s| s.borrow().clone());
            match slot {
                Some(slot) => {
                    let place = info
                        .location()
                        .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = place;
                }
                None => previous(info),
            }
        }));
    });
}

fn payload_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// A live worker: its abandonment flag, and the job it runs with its start.
type Live = (Arc<AtomicBool>, Option<(usize, Instant)>);

enum Msg<R> {
    Started(usize, usize),
    Finished(usize, usize, Ended<R>, Duration),
    /// The worker found no job left and ended.
    Exited(usize),
}

/// The state a worker thread needs.
struct Worker<R, F> {
    id: usize,
    next: Arc<AtomicUsize>,
    n: usize,
    job: Arc<F>,
    abandoned: Arc<AtomicBool>,
    tx: mpsc::Sender<Msg<R>>,
}

impl<R: Send + 'static, F: Fn(usize, &Arc<rayon::ThreadPool>) -> R + Send + Sync + 'static>
    Worker<R, F>
{
    fn spawn(self) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name(format!("conformance-{}", self.id))
            .stack_size(16 << 20)
            .spawn(move || self.work())
            .map(|_| ())
    }

    fn work(self) {
        let slot: Slot = Arc::new(Mutex::new(None));
        PANIC_SLOT.with(|s| *s.borrow_mut() = Some(slot.clone()));
        let pool_slot = slot.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .stack_size(16 << 20)
            .start_handler(move |_| {
                PANIC_SLOT.with(|s| *s.borrow_mut() = Some(pool_slot.clone()));
            })
            .build()
            .map(Arc::new);
        loop {
            let i = self.next.fetch_add(1, Ordering::SeqCst);
            if i >= self.n {
                let _ = self.tx.send(Msg::Exited(self.id));
                return;
            }
            if self.tx.send(Msg::Started(self.id, i)).is_err() {
                return;
            }
            let start = Instant::now();
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let ended = match &pool {
                Ok(pool) => match catch_unwind(AssertUnwindSafe(|| (self.job)(i, pool))) {
                    Ok(r) => Ended::Returned(r),
                    Err(p) => {
                        let place = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                        let msg = payload_message(p.as_ref());
                        Ended::Panicked(match place {
                            Some(place) => format!("{msg} (at {place})"),
                            None => msg,
                        })
                    }
                },
                Err(e) => Ended::Panicked(format!("cannot start a worker thread: {e}")),
            };
            if self.abandoned.load(Ordering::SeqCst) {
                return;
            }
            let time = start.elapsed();
            if self
                .tx
                .send(Msg::Finished(self.id, i, ended, time))
                .is_err()
            {
                return;
            }
        }
    }
}

/// Runs `job(0)`, ..., `job(n - 1)` on `workers` threads, each under `timeout`. `progress` is
/// called on the calling thread after each job ends, with the number ended so far.
pub fn run<R, F>(
    n: usize,
    workers: usize,
    timeout: Duration,
    job: F,
    progress: &mut dyn FnMut(usize, &Done<R>),
) -> Vec<Done<R>>
where
    R: Send + 'static,
    F: Fn(usize, &Arc<rayon::ThreadPool>) -> R + Send + Sync + 'static,
{
    install_hook();
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<Msg<R>>();
    let mut results: Vec<Option<Done<R>>> = (0..n).map(|_| None).collect();
    let mut ended = 0usize;
    // Per live worker: its abandonment flag and the job it runs with its start.
    let mut live: BTreeMap<usize, Live> = BTreeMap::new();
    let mut next_id = 0usize;
    let mut hung = 0usize;
    let spawn = |live: &mut BTreeMap<_, _>, next_id: &mut usize| {
        let abandoned = Arc::new(AtomicBool::new(false));
        let w = Worker {
            id: *next_id,
            next: next.clone(),
            n,
            job: job.clone(),
            abandoned: abandoned.clone(),
            tx: tx.clone(),
        };
        let ok = w.spawn().is_ok();
        if ok {
            live.insert(*next_id, (abandoned, None));
        }
        *next_id += 1;
        ok
    };
    for _ in 0..workers.clamp(1, n.max(1)) {
        spawn(&mut live, &mut next_id);
    }
    let tick = Duration::from_millis(50).min(timeout);
    while ended < n {
        if live.is_empty() {
            // No worker could be started (or all hung): what is left is not run.
            next.store(n, Ordering::SeqCst);
            for r in results.iter_mut() {
                if r.is_none() {
                    let d = Done {
                        ended: Ended::NotRun,
                        time: Duration::ZERO,
                    };
                    progress(ended + 1, &d);
                    *r = Some(d);
                    ended += 1;
                }
            }
            break;
        }
        match rx.recv_timeout(tick) {
            Ok(Msg::Started(w, i)) => {
                if let Some(l) = live.get_mut(&w) {
                    l.1 = Some((i, Instant::now()));
                }
            }
            Ok(Msg::Finished(w, i, e, time)) => {
                if let Some(l) = live.get_mut(&w) {
                    l.1 = None;
                }
                if results[i].is_none() {
                    let d = Done { ended: e, time };
                    ended += 1;
                    progress(ended, &d);
                    results[i] = Some(d);
                }
            }
            Ok(Msg::Exited(w)) => {
                live.remove(&w);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        // Abandon the workers whose job is over the bound.
        let over: Vec<(usize, usize)> = live
            .iter()
            .filter_map(|(&w, (_, run))| {
                run.filter(|(_, t)| t.elapsed() > timeout)
                    .map(|(i, _)| (w, i))
            })
            .collect();
        for (w, i) in over {
            if let Some((flag, _)) = live.remove(&w) {
                flag.store(true, Ordering::SeqCst);
            }
            hung += 1;
            if results[i].is_none() {
                let d = Done {
                    ended: Ended::TimedOut,
                    time: timeout,
                };
                ended += 1;
                progress(ended, &d);
                results[i] = Some(d);
            }
            if hung < MAX_HUNG {
                spawn(&mut live, &mut next_id);
            }
        }
        if hung >= MAX_HUNG && next.load(Ordering::SeqCst) < n {
            // Stop handing out jobs; those already running finish.
            let start = next.swap(n, Ordering::SeqCst).min(n);
            for r in results.iter_mut().skip(start) {
                if r.is_none() {
                    let d = Done {
                        ended: Ended::NotRun,
                        time: Duration::ZERO,
                    };
                    ended += 1;
                    progress(ended, &d);
                    *r = Some(d);
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or(Done {
                ended: Ended::NotRun,
                time: Duration::ZERO,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_with_panics_caught() {
        let mut seen = 0;
        let out = run(
            20,
            3,
            Duration::from_secs(30),
            |i, _| {
                if i == 7 {
                    panic!("job {i} fails");
                }
                i * 2
            },
            &mut |k, _| seen = k,
        );
        assert_eq!(seen, 20);
        for (i, d) in out.iter().enumerate() {
            match &d.ended {
                Ended::Returned(r) => assert_eq!(*r, i * 2),
                Ended::Panicked(m) => {
                    assert_eq!(i, 7);
                    assert!(m.starts_with("job 7 fails (at "), "{m}");
                    assert!(m.contains("bounded.rs"), "{m}");
                }
                e => panic!("job {i}: {e:?}"),
            }
        }
    }

    #[test]
    fn a_panic_on_the_pool_is_caught_too() {
        let out = run(
            2,
            1,
            Duration::from_secs(30),
            |i, pool| {
                pool.install(|| {
                    if i == 1 {
                        panic!("on the pool");
                    }
                    i
                })
            },
            &mut |_, _| {},
        );
        assert_eq!(out[0].ended, Ended::Returned(0));
        assert!(matches!(&out[1].ended, Ended::Panicked(m) if m.starts_with("on the pool")));
    }

    #[test]
    fn hung_jobs_time_out_and_the_rest_still_run() {
        let out = run(
            6,
            2,
            Duration::from_millis(200),
            |i, _| {
                if i == 1 {
                    std::thread::sleep(Duration::from_secs(5));
                }
                i
            },
            &mut |_, _| {},
        );
        assert_eq!(out[1].ended, Ended::TimedOut);
        for i in [0, 2, 3, 4, 5] {
            assert_eq!(out[i].ended, Ended::Returned(i));
        }
    }

    #[test]
    fn after_too_many_hung_jobs_the_rest_is_not_run() {
        let out = run(
            MAX_HUNG + 3,
            1,
            Duration::from_millis(100),
            |i, _| {
                std::thread::sleep(Duration::from_secs(3));
                i
            },
            &mut |_, _| {},
        );
        let timed = out.iter().filter(|d| d.ended == Ended::TimedOut).count();
        let not_run = out.iter().filter(|d| d.ended == Ended::NotRun).count();
        assert_eq!((timed, not_run), (MAX_HUNG, 3));
    }
}
