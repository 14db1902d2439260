//! How a long call (a training run, a profiling campaign, a simulation) tells its caller how far
//! it has come, without knowing how that is shown: the `duet` binary draws a bar on a terminal
//! and writes plain lines to a log.

/// One report of a long-running call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A counted stage begins: `total` steps of `unit` (members, settings, jobs).
    Start {
        stage: &'a str,
        total: u64,
        unit: &'a str,
    },
    /// `done` of the current stage's steps are complete; `now` says what the call is at.
    Step { done: u64, now: &'a str },
    /// A line for the log: a finished fold or measurement, a policy's outcome, a warning.
    Line(&'a str),
    /// The current stage is over.
    Finish,
}

/// Whoever watches a long call.
pub trait Progress {
    fn event(&mut self, event: Event<'_>);

    /// Shorthand for `event(Event::Line(line))`.
    fn line(&mut self, line: &str) {
        self.event(Event::Line(line));
    }
}

impl<F: FnMut(Event<'_>)> Progress for F {
    fn event(&mut self, event: Event<'_>) {
        self(event);
    }
}

/// A watcher that hears only the lines, for callers that draw no progress (tests, the
/// trainings inside `simulate --feedback`).
#[derive(Debug)]
pub struct Lines<F>(pub F);

impl<F: FnMut(&str)> Progress for Lines<F> {
    fn event(&mut self, event: Event<'_>) {
        if let Event::Line(line) = event {
            (self.0)(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_hear_only_lines_and_closures_hear_everything() {
        let mut heard = Vec::new();
        let mut lines = Lines(|l: &str| heard.push(l.to_string()));
        lines.event(Event::Start {
            stage: "train",
            total: 3,
            unit: "members",
        });
        lines.line("fold 1/3");
        lines.event(Event::Step { done: 1, now: "" });
        lines.event(Event::Finish);
        assert_eq!(heard, ["fold 1/3"]);
        let mut events = 0;
        let mut all = |_: Event<'_>| events += 1;
        all.line("x");
        all.event(Event::Finish);
        assert_eq!(events, 2);
    }
}
