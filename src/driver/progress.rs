//! The progress display of long commands (`partition`, `bench`) on standard error: a bar on a
//! terminal, lines every few seconds with `--progress` elsewhere, and phase times with
//! `--timings`.

use crate::planning::partition;
use std::time::Instant;

/// The plain progress lines' state: the phase, when it began, when the last line was printed.
type Lines = (String, Instant, Option<Instant>);

/// A progress bar on stderr, shown (between [`Bar::show`] and [`Bar::hide`]) when stderr is a
/// terminal; with `--progress` on another stderr, a line every few seconds instead. With
/// `--timings`, the wall time of each phase on stderr as well.
pub struct Bar {
    bar: std::cell::RefCell<Option<indicatif::ProgressBar>>,
    /// With `--timings`: the current phase and when it began.
    timing: Option<std::cell::RefCell<Option<(String, Instant)>>>,
    /// `--progress` on a stderr that is not a terminal: (phase, its start, last line printed).
    lines_cell: std::cell::OnceCell<std::cell::RefCell<Lines>>,
    /// Progress is wanted even when stderr is not a terminal.
    forced: bool,
}

impl Bar {
    /// A display with phase times (`timings`), shown as lines on a stderr that is not a
    /// terminal when `forced`.
    pub fn new(timings: bool, forced: bool) -> Bar {
        Bar {
            bar: Default::default(),
            timing: timings.then(Default::default),
            lines_cell: std::cell::OnceCell::new(),
            forced,
        }
    }

    /// Shows the bar, if stderr is a terminal (or lines, when forced).
    pub fn show(&self) {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            if self.forced {
                let _ = self.lines_cell.set(std::cell::RefCell::new((
                    String::new(),
                    Instant::now(),
                    None,
                )));
            }
            return;
        }
        let b = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:24} [{bar:30}] {pos}/{len} {elapsed_precise} (ETA {eta})",
        ) {
            b.set_style(style);
        }
        *self.bar.borrow_mut() = Some(b);
    }

    /// Clears the bar from the terminal (before output or diagnostics); timing goes on.
    pub fn hide(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }

    /// Runs `f` (which prints to stderr) with the bar out of the way.
    pub fn hide_for(&self, f: impl FnOnce()) {
        match &*self.bar.borrow() {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Ends the current phase: prints its time (with `--timings`) and starts `next`, if any.
    fn end_phase(&self, next: Option<&str>) {
        let Some(cell) = &self.timing else {
            return;
        };
        let mut current = cell.borrow_mut();
        if let Some((name, began)) = current.take() {
            let line = format!(
                "timing: {name:<24} {:>9.1} ms",
                began.elapsed().as_secs_f64() * 1e3
            );
            match &*self.bar.borrow() {
                Some(b) => b.println(line),
                None => eprintln!("{line}"),
            }
        }
        *current = next.map(|n| (n.to_string(), Instant::now()));
    }

    /// Clears the bar and ends the current phase.
    pub fn finish(&self) {
        self.hide();
        self.end_phase(None);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish();
    }
}

impl partition::Progress for Bar {
    fn phase(&self, name: &str, total: usize) {
        self.end_phase(Some(name));
        if let Some(b) = &*self.bar.borrow() {
            b.set_message(name.to_string());
            b.set_length(total as u64);
            b.set_position(0);
            b.reset_eta();
        }
        if let Some(cell) = self.lines_cell.get() {
            let mut l = cell.borrow_mut();
            *l = (name.to_string(), Instant::now(), None);
        }
    }

    fn step(&self, done: usize) {
        if let Some(b) = &*self.bar.borrow() {
            b.set_position(done as u64);
        }
    }

    fn steps(&self, done: usize, total: usize) {
        if let Some(b) = &*self.bar.borrow() {
            if b.length() != Some(total as u64) {
                b.set_length(total as u64);
                b.reset_eta();
            }
            b.set_position(done as u64);
        }
        if let Some(cell) = self.lines_cell.get() {
            let mut l = cell.borrow_mut();
            let now = Instant::now();
            let due =
                l.2.is_none_or(|t| now.duration_since(t).as_secs_f64() >= 5.0);
            if total > 0 && (due || done == total) {
                let spent = now.duration_since(l.1).as_secs_f64();
                let eta = if done > 0 && done < total {
                    format!(
                        ", about {:.0} s left",
                        spent / done as f64 * (total - done) as f64
                    )
                } else {
                    String::new()
                };
                eprintln!("progress: {} {done}/{total} after {spent:.0} s{eta}", l.0);
                l.2 = Some(now);
            }
        }
    }
}

impl crate::pipeline::Progress for Bar {
    fn pause(&self, f: &mut dyn FnMut()) {
        self.hide_for(f)
    }

    fn finish(&self) {
        Bar::finish(self)
    }
}
