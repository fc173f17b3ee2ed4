//! The timing protocol: how one compiled kernel (or one whole model) is timed.
//!
//! It follows TVM's `estimate_seconds` (docs/collage.md, "Costs") with a budget, because here
//! thousands of candidates are timed on a shared machine:
//!
//! 1. **First call**, untimed: lazy initialisation (JIT, first-time reorders, page faults of
//!    fresh buffers) is never part of a cost. Compilation happened before and is not timed
//!    either.
//! 2. **Warm-up**: calls until [`Settings::warmup`] has passed (at least one call). Their mean
//!    time sets the calls per repeat (`number`): enough for one repeat to last at least
//!    [`Settings::min_repeat`] (TVM's `min_repeat_ms`).
//! 3. **Repeats** of `number` calls each, recording each repeat's mean time per call, until
//!    the spread of the repeats is at most [`Settings::max_spread`] (after at least
//!    [`Settings::min_repeats`]), or [`Settings::max_repeats`] are done, or the next repeat
//!    would overrun the time [`Settings::budget`] of this measurement. At least one repeat is
//!    always made.
//!
//! The result is the **median of the repeats' means** (TVM's figure) and their **spread**: the
//! median absolute deviation of the repeats' means divided by their median, a relative figure
//! that one disturbed repeat does not move.
//!
//! With [`Settings::cold`] (candidates by default), every timed call is preceded by an untimed
//! preparation (the caller evicts the caches, see [`super::flush`]) and each call is timed on
//! its own; a repeat's mean is then the mean of its calls' own times. Warm-up calls are not
//! prepared.
//!
//! Several kernels are timed together in rounds by one round-robin driver
//! ([`measure_rounds`]): one repeat of each per round, so that a disturbance of the machine
//! falls on one repeat of many kernels rather than on every repeat of one. Its [`Policy`] says
//! how the kernels are warmed up and when the rounds stop: candidates ([`measure_many`]) each
//! stop alone, the placements of `collage bench` ([`time_in_rounds`]) all together.
//!
//! The clock and the kernel are parameters, so the protocol is tested on a fake clock.

use std::time::{Duration, Instant};

/// The protocol's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Warm-up time after the first call (at least one warm-up call is made).
    pub warmup: Duration,
    /// The shortest repeat: `number` calls last at least this long.
    pub min_repeat: Duration,
    /// Repeats made before the spread may stop the measurement.
    pub min_repeats: usize,
    /// Repeats at most.
    pub max_repeats: usize,
    /// The spread (relative median absolute deviation) at which repeating stops.
    pub max_spread: f64,
    /// Time for the whole measurement, first call included; no repeat starts that would
    /// overrun it, but one repeat is always made.
    pub budget: Duration,
    /// Whether each timed call is preceded by the caller's (untimed) preparation.
    pub cold: bool,
    /// Untimed calls right before each timed repeat in a round ([`Policy::MODELS`] only):
    /// calls of the same kernel until they have taken this long, at most
    /// [`LEAD_IN_MAX_CALLS`]; none when the kernel's last call alone took this long.
    /// Zero: no lead-in.
    pub lead_in: Duration,
    /// Untimed calls at the start of each cold repeat ([`timed_calls`] with `prepared`), each
    /// after its preparation like the timed ones. In the rounds a candidate's repeat follows
    /// the other candidates' repeats, which leave the caches, the TLB and the OpenMP team to
    /// them; inside a model a partition that takes most of a run comes back to the state its
    /// own last call left. Two calls: MobileNetV2 as one oneDNN partition was estimated 4.2 ms
    /// without them and 3.4 ms with them, against 3.1 ms inside the model.
    pub lead_in_calls: u64,
}

/// The most untimed lead-in calls before one timed repeat ([`Settings::lead_in`]).
pub const LEAD_IN_MAX_CALLS: u32 = 20;

impl Settings {
    /// For candidates with cold weights (the default; `--cold-candidates`): 20 ms of warm-up,
    /// then repeats of calls each timed alone after its kernels' buffers are evicted, enough
    /// calls for 2 ms of timed calls per repeat, 5 to 20 repeats, stop at 2 % spread, 1 s per
    /// candidate. Several calls per repeat because a repeat is one hand-over to the worker
    /// pool: a call right after the hand-over shares the cores with the pool's other workers
    /// going back to sleep, which no call inside a whole model does.
    pub fn candidates_cold() -> Settings {
        Settings {
            warmup: Duration::from_millis(20),
            min_repeat: Duration::from_millis(2),
            min_repeats: 5,
            max_repeats: 20,
            max_spread: 0.02,
            budget: Duration::from_secs(1),
            cold: true,
            lead_in: Duration::ZERO,
            lead_in_calls: 2,
        }
    }

    /// For candidates, TVM's warm loop (`--warm-candidates`): 20 ms of warm-up, repeats of at least 10 ms, 3 to 10
    /// repeats, stop at 2 % spread, 1 s per candidate; nothing is evicted between calls.
    pub fn candidates() -> Settings {
        Settings {
            warmup: Duration::from_millis(20),
            min_repeat: Duration::from_millis(10),
            min_repeats: 3,
            max_repeats: 10,
            max_spread: 0.02,
            budget: Duration::from_secs(1),
            cold: false,
            lead_in: Duration::ZERO,
            lead_in_calls: 0,
        }
    }

    /// For whole models (`collage bench`): one warm-up call, one timed call per repeat after
    /// 100 ms of untimed lead-in calls of the same model (at most 20), 5 to 15 repeats, stop
    /// at 2 % spread, 20 s per model.
    pub fn models() -> Settings {
        Settings {
            warmup: Duration::ZERO,
            min_repeat: Duration::ZERO,
            min_repeats: 5,
            max_repeats: 15,
            max_spread: 0.02,
            budget: Duration::from_secs(20),
            cold: false,
            lead_in: Duration::from_millis(100),
            lead_in_calls: 0,
        }
    }
}

/// A measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// The median of the repeats' mean times per call, in seconds.
    pub seconds: f64,
    /// The median absolute deviation of the repeats' means, relative to their median.
    pub spread: f64,
    /// The repeats' mean times per call, in seconds, in the order they were made.
    pub repeats: Vec<f64>,
    /// Calls per repeat.
    pub number: u64,
    /// The first call's time, in seconds (never part of the result).
    pub first_call: f64,
    /// Calls made in all (first call and warm-up included).
    pub calls: u64,
    /// Wall time of the whole measurement, in seconds.
    pub elapsed: f64,
}

/// A source of time.
pub trait Clock {
    /// Time since some fixed point.
    fn now(&self) -> Duration;
}

/// The real monotonic clock.
pub struct Monotonic(Instant);

impl Monotonic {
    /// A clock starting now.
    pub fn new() -> Monotonic {
        Monotonic(Instant::now())
    }
}

impl Default for Monotonic {
    fn default() -> Monotonic {
        Monotonic::new()
    }
}

impl Clock for Monotonic {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The median of a list (the mean of the middle two for an even length); NaN for an empty list,
/// which has none. This is the one median of the crate: latencies, repeats and deviations.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The median absolute deviation from the median, relative to the median (0 for fewer than two
/// values or a zero median).
pub fn spread(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = median(v);
    if m.is_nan() || m <= 0.0 {
        return 0.0;
    }
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    median(&dev) / m
}

/// Calls per repeat for a call time of `per_call`: enough to last `min_repeat`, at least one,
/// at most a million.
fn calls_per_repeat(per_call: Duration, min_repeat: Duration) -> u64 {
    if min_repeat.is_zero() {
        return 1;
    }
    let per = per_call.as_secs_f64();
    if per <= 0.0 {
        return 1_000_000;
    }
    (min_repeat.as_secs_f64() / per).ceil().clamp(1.0, 1e6) as u64
}

/// Runs `number` calls of one kernel and returns the time they took: `repeat(k, number,
/// prepared)` for kernel `k`; with `prepared`, each call is preceded by the caller's untimed
/// preparation and timed on its own. The caller runs the calls where they belong (on the
/// kernel's worker pool), so only the calls are timed, not the hand-over.
pub type Repeat<'a, E> = dyn FnMut(usize, u64, bool) -> Result<Duration, E> + 'a;

/// One kernel's measurement in progress.
struct Progress {
    first_call: f64,
    calls: u64,
    number: u64,
    repeats: Vec<f64>,
    /// Wall time spent on this kernel so far (hand-overs and preparations included).
    spent: Duration,
    /// The time of this kernel's last call, when known.
    last_call: Option<Duration>,
}

/// How the round-robin driver ([`measure_rounds`]) warms kernels up before the rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmUp {
    /// By the protocol, kernel by kernel: an untimed first call, then warm-up calls for
    /// [`Settings::warmup`], whose mean time sets the calls per repeat.
    Protocol,
    /// By the caller, before the driver starts: one call per repeat; a kernel whose warm-up
    /// failed is handed over as failed and never run.
    Done,
}

/// When the rounds of [`measure_rounds`] stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Each kernel leaves the rounds on its own (candidates): after [`Settings::max_repeats`]
    /// repeats, once its spread is within [`Settings::max_spread`] after
    /// [`Settings::min_repeats`], or when its next repeat, as long as its last, would overrun
    /// its own [`Settings::budget`] (the wall time spent on it alone).
    Alone,
    /// All kernels stop together (whole models in `collage bench`): after
    /// [`Settings::max_repeats`] rounds, once every kernel still running has
    /// [`Settings::min_repeats`] repeats and a spread within [`Settings::max_spread`], or when
    /// the next round, as long as the last, would overrun the budget of one kernel times
    /// their number. One round is always made.
    Together,
}

/// How kernels are timed together: their warm-up and the stop rule of the rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The warm-up.
    pub warm_up: WarmUp,
    /// The stop rule.
    pub stop: Stop,
}

impl Policy {
    /// Candidates ([`measure_many`]): the protocol's warm-up, each kernel stops alone.
    pub const CANDIDATES: Policy = Policy {
        warm_up: WarmUp::Protocol,
        stop: Stop::Alone,
    };
    /// Whole models ([`time_in_rounds`]): warmed up by the caller, all stop together.
    pub const MODELS: Policy = Policy {
        warm_up: WarmUp::Done,
        stop: Stop::Together,
    };
}

/// Times `n` kernels by the protocol, **in rounds**: each kernel gets its first call and its
/// warm-up, then every round makes one repeat of each kernel still measuring. A disturbance of
/// the machine (another process taking a core for a second) thus lands on one repeat of many
/// kernels, which the median of each one's repeats ignores, instead of on every repeat of one
/// kernel, which would make its cost wrong (by 2x on 2 threads) for as long as it is cached.
/// Each kernel's budget counts the wall time spent on it alone. An error of a kernel ends its
/// measurement with that error; the others go on. `finished(k, result)` is called as soon as
/// kernel `k`'s measurement ends (so a caller can keep it at once); the results are also
/// returned, in kernel order. This is [`measure_rounds`] with [`Policy::CANDIDATES`].
pub fn measure_many<E>(
    clock: &dyn Clock,
    settings: &Settings,
    n: usize,
    repeat: &mut Repeat<'_, E>,
    finished: &mut dyn FnMut(usize, &Result<Timing, E>),
) -> Vec<Result<Timing, E>> {
    let failed = (0..n).map(|_| None).collect();
    measure_rounds(
        clock,
        settings,
        Policy::CANDIDATES,
        failed,
        &mut |_| {},
        repeat,
        finished,
        &mut |_, _| {},
    )
}

/// Runs whole placements **in rounds** and returns each one's run times (seconds): every round
/// runs each placement once (`run(k)` runs placement `k` and returns its time), so that a
/// change of the machine's load during the timing (a shared machine's usual state) falls on
/// all of them alike and their ratios stay fair, where timing them one after the other would
/// let a busy minute land on one placement only. The caller has warmed every placement up; one
/// whose warm-up failed (`failed[k]`), or whose run fails, leaves the rounds with that error.
/// The rounds stop together ([`Stop::Together`]); `progress(round, max_rounds)` follows them.
/// `turn(k)` is called when placement `k`'s turn in a round begins, before its lead-in and
/// untimed: what it spends (waiting for the threads of the placement before to go quiet, say)
/// counts neither as a run nor toward the lead-in.
/// This is [`measure_rounds`] with [`Policy::MODELS`].
pub fn time_in_rounds(
    failed: &[Option<String>],
    settings: &Settings,
    clock: &dyn Clock,
    turn: &mut dyn FnMut(usize),
    run: &mut dyn FnMut(usize) -> Result<f64, String>,
    progress: &dyn Fn(usize, usize),
) -> Vec<Result<Vec<f64>, String>> {
    let mut repeat = |k: usize, _: u64, _: bool| -> Result<Duration, String> {
        run(k).map(|t| Duration::from_secs_f64(t.max(0.0)))
    };
    measure_rounds(
        clock,
        settings,
        Policy::MODELS,
        failed.to_vec(),
        turn,
        &mut repeat,
        &mut |_, _| {},
        &mut |done, total| progress(done, total),
    )
    .into_iter()
    .map(|r| r.map(|t| t.repeats))
    .collect()
}

/// The round-robin timing driver behind [`measure_many`] and [`time_in_rounds`]: warms the
/// kernels up as `policy` says (`failed[k]`: kernel `k` failed before, and is not run), then
/// makes one repeat of every kernel still measuring per round until the policy's stop rule
/// ends each one. `turn(k)` is called as kernel `k`'s turn in a round begins, before its
/// lead-in; `finished(k, result)` as soon as kernel `k` is done; `progress(round,
/// max_rounds)` after each round (and with 0 before the first).
#[allow(clippy::too_many_arguments)]
pub fn measure_rounds<E>(
    clock: &dyn Clock,
    settings: &Settings,
    policy: Policy,
    failed: Vec<Option<E>>,
    turn: &mut dyn FnMut(usize),
    repeat: &mut Repeat<'_, E>,
    finished: &mut dyn FnMut(usize, &Result<Timing, E>),
    progress: &mut dyn FnMut(usize, usize),
) -> Vec<Result<Timing, E>> {
    let n = failed.len();
    let mut results: Vec<Option<Result<Timing, E>>> = (0..n).map(|_| None).collect();
    let mut end = |k: usize, r: Result<Timing, E>, results: &mut Vec<Option<Result<Timing, E>>>| {
        finished(k, &r);
        results[k] = Some(r);
    };
    let mut measuring: Vec<(usize, Progress)> = Vec::new();
    for (k, f) in failed.into_iter().enumerate() {
        if let Some(e) = f {
            end(k, Err(e), &mut results);
            continue;
        }
        match policy.warm_up {
            WarmUp::Protocol => match warm_up(clock, settings, k, repeat) {
                Ok(p) => measuring.push((k, p)),
                Err(e) => end(k, Err(e), &mut results),
            },
            WarmUp::Done => measuring.push((
                k,
                Progress {
                    first_call: 0.0,
                    calls: 0,
                    number: 1,
                    repeats: Vec::new(),
                    spent: Duration::ZERO,
                    last_call: None,
                },
            )),
        }
    }
    // Rounds, until every kernel is done.
    let start = clock.now();
    let all_budget = settings
        .budget
        .saturating_mul(u32::try_from(n.max(1)).unwrap_or(u32::MAX));
    let max = settings.max_repeats.max(1);
    progress(0, max);
    let mut round = 0;
    while !measuring.is_empty() {
        round += 1;
        let round_start = clock.now();
        let mut still = Vec::with_capacity(measuring.len());
        for (k, mut p) in measuring {
            turn(k);
            if let Err(e) = lead_in(clock, settings, k, &mut p, repeat) {
                end(k, Err(e), &mut results);
                continue;
            }
            let s = clock.now();
            match repeat(k, p.number, settings.cold) {
                Ok(d) => {
                    let took = clock.now() - s;
                    p.spent += took;
                    p.calls += p.number;
                    p.last_call = Some(d / (p.number.min(u32::MAX as u64) as u32));
                    p.repeats.push(d.as_secs_f64() / p.number as f64);
                    let r = p.repeats.len();
                    let done = policy.stop == Stop::Alone
                        && (r >= max
                            || (r >= settings.min_repeats
                                && spread(&p.repeats) <= settings.max_spread)
                            // The next repeat, as long as this one, would overrun the budget.
                            || p.spent + took > settings.budget);
                    if done {
                        end(k, Ok(p.timing()), &mut results);
                    } else {
                        still.push((k, p));
                    }
                }
                Err(e) => end(k, Err(e), &mut results),
            }
        }
        measuring = still;
        progress(round, max);
        if policy.stop == Stop::Together {
            let settled = measuring.iter().all(|(_, p)| {
                p.repeats.len() >= settings.min_repeats && spread(&p.repeats) <= settings.max_spread
            });
            let now = clock.now();
            // The next round, as long as this one, would overrun the budget.
            if round >= max || settled || (now - start) + (now - round_start) > all_budget {
                for (k, p) in std::mem::take(&mut measuring) {
                    end(k, Ok(p.timing()), &mut results);
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every kernel's measurement ended"))
        .collect()
}

/// The untimed calls of kernel `k` right before its timed repeat ([`Settings::lead_in`]): a
/// kernel timed after other kernels ran (a round) finds its caches, its threads and the
/// core's clock as they left them; a few calls of its own bring it back to the state it
/// runs in when called in a loop, the state its candidates' costs were measured in. A kernel
/// whose last call alone lasted the lead-in needs none: its own start is a small part of it.
fn lead_in<E>(
    clock: &dyn Clock,
    settings: &Settings,
    k: usize,
    p: &mut Progress,
    repeat: &mut Repeat<'_, E>,
) -> Result<(), E> {
    if settings.lead_in.is_zero() || p.last_call.is_some_and(|t| t >= settings.lead_in) {
        return Ok(());
    }
    let start = clock.now();
    let mut calls = 0;
    while calls < LEAD_IN_MAX_CALLS && clock.now() - start < settings.lead_in {
        let d = repeat(k, 1, false)?;
        calls += 1;
        p.calls += 1;
        p.last_call = Some(d);
    }
    p.spent += clock.now() - start;
    Ok(())
}

/// A kernel's first call and warm-up by the protocol: the calls per repeat follow from the
/// warm-up calls' mean time.
fn warm_up<E>(
    clock: &dyn Clock,
    settings: &Settings,
    k: usize,
    repeat: &mut Repeat<'_, E>,
) -> Result<Progress, E> {
    let start = clock.now();
    let first = repeat(k, 1, false)?;
    let warm_start = clock.now();
    let (mut warm, mut warm_time) = (0u64, Duration::ZERO);
    loop {
        let d = repeat(k, 1, false)?;
        warm += 1;
        warm_time += d;
        let now = clock.now();
        if now - warm_start >= settings.warmup || now - start >= settings.budget {
            break;
        }
    }
    let per_call = warm_time / (warm.min(u32::MAX as u64) as u32);
    Ok(Progress {
        first_call: first.as_secs_f64(),
        calls: 1 + warm,
        number: calls_per_repeat(per_call, settings.min_repeat),
        repeats: Vec::new(),
        spent: clock.now() - start,
        last_call: Some(per_call),
    })
}

impl Progress {
    fn timing(self) -> Timing {
        Timing {
            seconds: median(&self.repeats),
            spread: spread(&self.repeats),
            number: self.number,
            first_call: self.first_call,
            calls: self.calls,
            elapsed: self.spent.as_secs_f64(),
            repeats: self.repeats,
        }
    }
}

/// Times one kernel by the protocol: `call` runs it once; with [`Settings::cold`], `prepare`
/// runs (untimed) before each timed call. An error of any call ends the measurement with that
/// error.
pub fn measure<E>(
    clock: &dyn Clock,
    settings: &Settings,
    prepare: &mut dyn FnMut(),
    call: &mut dyn FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    let mut repeat = |_: usize, number: u64, prepared: bool| -> Result<Duration, E> {
        timed_calls(
            clock,
            number,
            prepared,
            settings.lead_in_calls,
            prepare,
            call,
        )
    };
    measure_many(clock, settings, 1, &mut repeat, &mut |_, _| {})
        .pop()
        .expect("one kernel")
}

/// Runs `call` `number` times and returns the time the calls took: all of them at once, or
/// with `prepared`, each after an untimed `prepare`, timed on its own, after `lead_in` untimed
/// calls (each after its `prepare` too).
pub fn timed_calls<E>(
    clock: &dyn Clock,
    number: u64,
    prepared: bool,
    lead_in: u64,
    prepare: &mut dyn FnMut(),
    call: &mut dyn FnMut() -> Result<(), E>,
) -> Result<Duration, E> {
    if !prepared {
        let s = clock.now();
        for _ in 0..number {
            call()?;
        }
        return Ok(clock.now() - s);
    }
    for _ in 0..lead_in {
        prepare();
        call()?;
    }
    let mut t = Duration::ZERO;
    for _ in 0..number {
        prepare();
        let s = clock.now();
        call()?;
        t += clock.now() - s;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock that only moves when the fake kernel says so.
    struct Fake(Cell<Duration>);

    impl Clock for Fake {
        fn now(&self) -> Duration {
            self.0.get()
        }
    }

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1e3)
    }

    /// Runs the protocol on a kernel whose k-th call (from 0) takes `times(k)` milliseconds.
    fn run(settings: &Settings, times: impl Fn(u64) -> f64) -> Timing {
        let clock = Fake(Cell::new(Duration::ZERO));
        let mut k = 0u64;
        let mut call = || -> Result<(), ()> {
            clock.0.set(clock.0.get() + ms(times(k)));
            k += 1;
            Ok(())
        };
        let t = measure(&clock, settings, &mut || {}, &mut call).unwrap();
        assert_eq!(t.calls, k, "every call is counted");
        t
    }

    #[test]
    fn the_first_call_and_the_warm_up_are_not_part_of_the_cost() {
        // A first call of 500 ms (lazy JIT) and three slow warm-up calls, then 1 ms per call.
        let t = run(&Settings::candidates(), |k| match k {
            0 => 500.0,
            1..=3 => 5.0,
            _ => 1.0,
        });
        assert_eq!(t.first_call, 0.5);
        assert!((t.seconds - 1e-3).abs() < 1e-9, "{t:?}");
        assert_eq!(t.spread, 0.0);
        // Steady repeats stop at the minimum number.
        assert_eq!(t.repeats.len(), 3);
    }

    #[test]
    fn calls_per_repeat_fill_the_minimum_repeat_time() {
        // 0.1 ms per call: 10 ms repeats need 100 calls.
        let t = run(&Settings::candidates(), |_| 0.1);
        assert_eq!(t.number, 100);
        assert!((t.seconds - 1e-4).abs() < 1e-12);
        // A call longer than the minimum repeat: one call per repeat.
        let t = run(&Settings::candidates(), |_| 40.0);
        assert_eq!(t.number, 1);
        assert_eq!(calls_per_repeat(Duration::ZERO, ms(10.0)), 1_000_000);
        assert_eq!(calls_per_repeat(ms(3.0), Duration::ZERO), 1);
    }

    #[test]
    fn the_result_is_the_median_of_the_repeats_means() {
        // Repeats of one call taking 1, 2, ..., 10 ms never converge, so all ten repeats are
        // made: the median is 5.5 ms, the median absolute deviation 2.5 ms. (No warm-up time:
        // one warm-up call.)
        let s = Settings {
            min_repeat: Duration::ZERO,
            warmup: Duration::ZERO,
            ..Settings::candidates()
        };
        let t = run(&s, |k| if k < 2 { 1.0 } else { (k - 1) as f64 });
        assert_eq!(t.repeats.len(), 10);
        assert!((t.seconds - 5.5e-3).abs() < 1e-9, "{t:?}");
        assert!((t.spread - 2.5 / 5.5).abs() < 1e-9, "{}", t.spread);
    }

    #[test]
    fn one_disturbed_repeat_does_not_move_the_result() {
        let s = Settings {
            min_repeat: Duration::ZERO,
            ..Settings::candidates()
        };
        // The third repeat is preempted (10x slower).
        let t = run(&s, |k| if k == 4 { 20.0 } else { 2.0 });
        assert_eq!(t.repeats.len(), 3);
        assert!((t.seconds - 2e-3).abs() < 1e-9);
        assert_eq!(t.spread, 0.0);
    }

    #[test]
    fn repeats_stop_when_the_budget_is_spent() {
        // Calls slowing down from 100 ms by 10 ms each never converge; with a 1 s budget: the
        // first call (100), one warm-up call (110), then repeats while the next one fits
        // (120, 130, 140, 150, 160: 910 ms; a sixth would end at 1080).
        let t = run(&Settings::candidates(), |k| 100.0 + 10.0 * k as f64);
        assert_eq!(t.repeats.len(), 5, "{t:?}");
        assert!(t.elapsed <= 1.0, "{t:?}");
        assert!((t.seconds - 0.14).abs() < 1e-9);
        // A single call longer than the budget still gives one repeat.
        let t = run(&Settings::candidates(), |_| 3000.0);
        assert_eq!(t.repeats.len(), 1);
        assert_eq!(t.calls, 3);
        assert!((t.seconds - 3.0).abs() < 1e-9);
    }

    #[test]
    fn cold_calls_are_timed_alone_after_an_untimed_preparation() {
        // Evicting takes 30 ms; a call right after it takes 3 ms, a call on warm caches 1 ms.
        let clock = Fake(Cell::new(Duration::ZERO));
        let cold = Cell::new(false);
        let prepared = Cell::new(0u64);
        let mut prepare = || {
            clock.0.set(clock.0.get() + ms(30.0));
            cold.set(true);
            prepared.set(prepared.get() + 1);
        };
        let mut call = || -> Result<(), ()> {
            let t = if cold.replace(false) { 3.0 } else { 1.0 };
            clock.0.set(clock.0.get() + ms(t));
            Ok(())
        };
        let s = Settings::candidates_cold();
        let t = measure(&clock, &s, &mut prepare, &mut call).unwrap();
        // Two calls per repeat (2 ms of warm calls), each prepared, after two untimed lead-in
        // calls, prepared too; warm-up calls are not.
        assert_eq!(t.number, 2);
        assert_eq!(s.lead_in_calls, 2);
        assert_eq!(prepared.get(), (2 + 2) * t.repeats.len() as u64);
        assert_eq!(t.repeats.len(), s.min_repeats);
        assert!((t.seconds - 3e-3).abs() < 1e-9, "{t:?}");
        assert_eq!(t.spread, 0.0);
        // The preparation counts against the budget: in 200 ms about six prepared calls fit,
        // fewer than the 20 repeats a kernel whose times never settle would otherwise get.
        let mut k = 0u64;
        let mut noisy = || -> Result<(), ()> {
            k += 1;
            clock
                .0
                .set(clock.0.get() + ms(if k.is_multiple_of(2) { 1.0 } else { 4.0 }));
            Ok(())
        };
        let slow = Settings {
            budget: Duration::from_millis(200),
            ..s
        };
        let mut slow_prepare = || clock.0.set(clock.0.get() + ms(30.0));
        let t = measure(&clock, &slow, &mut slow_prepare, &mut noisy).unwrap();
        assert!(t.elapsed <= 0.2, "{t:?}");
        assert!(t.repeats.len() < slow.max_repeats, "{t:?}");
    }

    #[test]
    fn kernels_measured_in_rounds_shrug_off_a_busy_second() {
        // Three kernels of 20, 30 and 40 ms per call (one call per repeat, ten repeats each,
        // about 1.1 s in all). From 0.3 s to 0.6 s of the fake clock, everything runs twice as
        // slow (another process took a core). Timed one after the other, most repeats of the
        // second kernel would fall in the busy spell; in rounds, each kernel has only a few
        // repeats there, and its median is its true time.
        let clock = Fake(Cell::new(Duration::ZERO));
        let s = Settings {
            min_repeat: Duration::ZERO,
            warmup: Duration::ZERO,
            max_spread: -1.0,
            ..Settings::candidates()
        };
        let base = [20.0, 30.0, 40.0];
        let mut order: Vec<usize> = Vec::new();
        let mut repeat = |k: usize, number: u64, _: bool| -> Result<Duration, ()> {
            let now = clock.0.get().as_secs_f64();
            let slow = if (0.3..0.6).contains(&now) { 2.0 } else { 1.0 };
            let d = ms(base[k] * slow) * number as u32;
            clock.0.set(clock.0.get() + d);
            order.push(k);
            Ok(d)
        };
        let mut ended: Vec<usize> = Vec::new();
        let t = measure_many(&clock, &s, 3, &mut repeat, &mut |k, r| {
            assert!(r.is_ok());
            ended.push(k);
        });
        for (k, t) in t.iter().enumerate() {
            let t = t.as_ref().unwrap();
            assert_eq!(t.repeats.len(), s.max_repeats, "{t:?}");
            assert!((t.seconds - base[k] / 1e3).abs() < 1e-9, "{k}: {t:?}");
        }
        // After each kernel's first call and warm-up call, the rounds alternate.
        assert_eq!(&order[6..12], [0, 1, 2, 0, 1, 2]);
        // Each kernel ended once.
        ended.sort_unstable();
        assert_eq!(ended, [0, 1, 2]);
    }

    #[test]
    fn a_failing_kernel_leaves_the_rounds_and_the_others_go_on() {
        let clock = Fake(Cell::new(Duration::ZERO));
        let s = Settings::candidates();
        let mut calls = [0u32; 2];
        let mut repeat = |k: usize, number: u64, _: bool| -> Result<Duration, &'static str> {
            calls[k] += 1;
            if k == 0 && calls[k] == 4 {
                return Err("broke");
            }
            let d = ms(1.0) * number as u32;
            clock.0.set(clock.0.get() + d);
            Ok(d)
        };
        let mut ended = Vec::new();
        let t = measure_many(&clock, &s, 2, &mut repeat, &mut |k, r| {
            ended.push((k, r.is_ok()))
        });
        assert_eq!(t[0], Err("broke"));
        assert!(t[1].is_ok());
        assert_eq!(ended, [(0, false), (1, true)]);
    }

    #[test]
    fn a_failing_call_ends_the_measurement() {
        let clock = Fake(Cell::new(Duration::ZERO));
        let mut k = 0;
        let mut call = || {
            clock.0.set(clock.0.get() + ms(1.0));
            k += 1;
            if k == 5 {
                Err("division by zero")
            } else {
                Ok(())
            }
        };
        assert_eq!(
            measure(&clock, &Settings::candidates(), &mut || {}, &mut call),
            Err("division by zero")
        );
    }

    #[test]
    fn placements_are_timed_in_rounds_so_a_busy_spell_falls_on_all() {
        // Two placements of 10 and 11 ms; the machine gets twice as slow from the 7th run on
        // (the fourth round). Timed one after the other, the first would have been timed
        // quiet and the second busy (10 against 22 ms).
        let clock = Fake(Cell::new(Duration::ZERO));
        let order = std::cell::RefCell::new(Vec::new());
        let mut run = |k: usize| -> Result<f64, String> {
            order.borrow_mut().push(k);
            let busy = if order.borrow().len() > 6 { 2.0 } else { 1.0 };
            let t = [10.0, 11.0][k] * busy / 1e3;
            clock.0.set(clock.0.get() + Duration::from_secs_f64(t));
            Ok(t)
        };
        let s = Settings {
            lead_in: Duration::ZERO,
            ..Settings::models()
        };
        let t = time_in_rounds(&[None, None], &s, &clock, &mut |_| {}, &mut run, &|_, _| {});
        let order = order.into_inner();
        // Alternating, the same number of runs each.
        assert_eq!(&order[..4], [0, 1, 0, 1]);
        let (a, b) = (t[0].as_ref().unwrap(), t[1].as_ref().unwrap());
        assert_eq!(a.len(), b.len());
        assert!(a.len() >= s.min_repeats);
        // The busy spell hit both: their medians keep the true 10:11 ratio.
        let ratio = median(b) / median(a);
        assert!((ratio - 1.1).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn each_timed_run_follows_its_own_lead_in() {
        // Placement 0 takes 4 ms a run after the other one ran and 2 ms when it ran just
        // before (a cold start after a pause); placement 1 takes 150 ms, longer than the
        // lead-in. Each timed run of 0 follows lead-in runs of 0 itself, so its runs are the
        // warm 2 ms; 1 gets one lead-in run in the first round (nothing known of it yet), none
        // after.
        let clock = Fake(Cell::new(Duration::ZERO));
        let s = Settings::models();
        let log = std::cell::RefCell::new(Vec::new());
        let mut run = |k: usize| -> Result<f64, String> {
            let warm = log.borrow().last() == Some(&k);
            log.borrow_mut().push(k);
            let t = match (k, warm) {
                (0, true) => 2e-3,
                (0, false) => 4e-3,
                _ => 150e-3,
            };
            clock.0.set(clock.0.get() + Duration::from_secs_f64(t));
            Ok(t)
        };
        let t = time_in_rounds(&[None, None], &s, &clock, &mut |_| {}, &mut run, &|_, _| {});
        let (a, b) = (t[0].as_ref().unwrap(), t[1].as_ref().unwrap());
        assert!(a.iter().all(|&x| x == 2e-3), "{a:?}");
        assert!(b.iter().all(|&x| x == 150e-3), "{b:?}");
        let log = log.into_inner();
        // Round one: 0 runs once cold (4 ms), then warm until 100 ms have passed or twenty
        // lead-in runs are made (4 + 19 x 2 = 42 ms, so twenty), then its timed run; 1 runs
        // once untimed and once timed.
        let lead = LEAD_IN_MAX_CALLS as usize;
        assert_eq!(
            log[..lead + 3],
            [vec![0; lead + 1], vec![1, 1]].concat()[..]
        );
        // Later rounds: the same for 0, one timed run for 1.
        assert_eq!(
            log[lead + 3..2 * lead + 5],
            [vec![0; lead + 1], vec![1]].concat()[..]
        );
        assert_eq!(log.iter().filter(|&&k| k == 1).count(), b.len() + 1);
    }

    #[test]
    fn a_turn_begins_before_the_lead_in_and_its_wait_is_not_part_of_it() {
        // Before each turn the caller waits 40 ms (for another pool's threads to go quiet),
        // longer than the lead-in. Were the wait inside the first lead-in run, the lead-in
        // would end after that one run; it must make its own runs whatever the wait took.
        let clock = Fake(Cell::new(Duration::ZERO));
        let tick = |ms: u64| clock.0.set(clock.0.get() + Duration::from_millis(ms));
        let log = std::cell::RefCell::new(Vec::new());
        let s = Settings::models();
        let t = time_in_rounds(
            &[None, None],
            &s,
            &clock,
            &mut |k| {
                log.borrow_mut().push(format!("turn {k}"));
                tick(40);
            },
            &mut |k| {
                log.borrow_mut().push(format!("run {k}"));
                tick(2);
                Ok(2e-3)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), s.min_repeats);
        let log = log.into_inner();
        let runs = LEAD_IN_MAX_CALLS as usize + 1;
        let turn = |k: usize| [vec![format!("turn {k}")], vec![format!("run {k}"); runs]].concat();
        assert_eq!(log.len(), 2 * s.min_repeats * (runs + 1));
        assert_eq!(log[..2 * (runs + 1)], [turn(0), turn(1)].concat()[..]);
    }

    #[test]
    fn rounds_stop_when_settled_or_out_of_budget_and_failures_leave() {
        let clock = Fake(Cell::new(Duration::ZERO));
        let tick = |ms: f64| {
            clock
                .0
                .set(clock.0.get() + Duration::from_secs_f64(ms / 1e3))
        };
        // Steady placements settle after the minimum number of rounds.
        let s = Settings {
            lead_in: Duration::ZERO,
            ..Settings::models()
        };
        let t = time_in_rounds(
            &[None, None],
            &s,
            &clock,
            &mut |_| {},
            &mut |_| {
                tick(5.0);
                Ok(5e-3)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), s.min_repeats);
        // A placement whose warm-up failed is not run; one that fails later leaves the rounds
        // with its error, the others go on.
        let mut calls = [0usize; 3];
        let t = time_in_rounds(
            &[None, Some("no".into()), None],
            &s,
            &clock,
            &mut |_| {},
            &mut |k| {
                calls[k] += 1;
                tick(5.0);
                if k == 2 && calls[k] == 2 {
                    Err("broke".into())
                } else {
                    Ok(5e-3)
                }
            },
            &|_, _| {},
        );
        assert_eq!(calls, [s.min_repeats, 0, 2]);
        assert_eq!(t[1], Err("no".to_string()));
        assert_eq!(t[2], Err("broke".to_string()));
        // Runs that slow down round after round (never settling: round r takes r/2 s per
        // placement), against a budget of 2 x 20 s: after round 7 (28 s in all) the next
        // fits (36 s), after round 8 it would not (45 s).
        let mut runs = 0usize;
        let t = time_in_rounds(
            &[None, None],
            &s,
            &clock,
            &mut |_| {},
            &mut |_| {
                runs += 1;
                let secs = 0.5 * ((runs - 1) / 2 + 1) as f64;
                tick(secs * 1e3);
                Ok(secs)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), 8);
        assert_eq!(t[1].as_ref().unwrap().len(), 8);
        let short = Settings {
            budget: Duration::from_millis(1),
            ..s
        };
        let t = time_in_rounds(
            &[None],
            &short,
            &clock,
            &mut |_| {},
            &mut |_| {
                tick(3000.0);
                Ok(3.0)
            },
            &|_, _| {},
        );
        assert_eq!(t[0].as_ref().unwrap().len(), 1);
    }

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(spread(&[5.0]), 0.0);
        assert_eq!(spread(&[0.0, 0.0]), 0.0);
        // Deviations from 2: 1, 0, 1 → 1, relative 0.5.
        assert_eq!(spread(&[1.0, 2.0, 3.0]), 0.5);
    }
}
