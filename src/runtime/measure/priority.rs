//! Measuring on a shared machine: raising the scheduling weight of this process's autogroup.
//!
//! Linux groups processes by session ("autogroups") and shares the CPUs fairly between the
//! groups first. A build in another session then keeps a whole core even at `nice 19`, and a
//! kernel timed on two threads gets about one core: its threads wait for each other at every
//! barrier, and times come out quantised to the scheduler's slices (docs/measure.md, "On a
//! shared machine").
//! Writing a negative nice value to `/proc/self/autogroup` gives this session's group more
//! weight. It needs the right to raise priority (root, or `CAP_SYS_NICE`) and applies to the
//! whole session, so it is opt-in (`--raise-priority`) and undone when the command ends.

/// The autogroup's nice value while alive; the previous value is written back on drop.
#[derive(Debug)]
pub struct Raised {
    previous: i32,
}

const PATH: &str = "/proc/self/autogroup";

/// The nice value in the text of `/proc/self/autogroup` (`/autogroup-49 nice 0`).
pub fn parse_nice(text: &str) -> Option<i32> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "nice" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// Sets the autogroup's nice value to `nice` (−20 is the most weight), or says why it cannot.
pub fn raise(nice: i32) -> Result<Raised, String> {
    let text = std::fs::read_to_string(PATH).map_err(|e| format!("cannot read `{PATH}`: {e}"))?;
    let previous = parse_nice(&text).ok_or_else(|| format!("`{PATH}` reads `{}`", text.trim()))?;
    std::fs::write(PATH, nice.to_string()).map_err(|e| format!("cannot write `{PATH}`: {e}"))?;
    Ok(Raised { previous })
}

impl Drop for Raised {
    fn drop(&mut self) {
        let _ = std::fs::write(PATH, self.previous.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nice_value_is_read() {
        assert_eq!(parse_nice("/autogroup-49 nice 0\n"), Some(0));
        assert_eq!(parse_nice("/autogroup-7 nice -20"), Some(-20));
        assert_eq!(parse_nice("garbage"), None);
        assert_eq!(parse_nice("nice"), None);
    }
}
