//! How the long verbs (`train`, `profile`, `simulate`) show how far they are: an `indicatif`
//! bar when stderr is a terminal; when it is not (a log, CI), a plain line at a stage's first
//! step and its last and at most every ten seconds between, each with the count done of
//! planned, what runs and the time left. The libraries' own log lines pass through either way.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use duet_core::progress::{Event, Progress};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The least time between two plain progress lines.
const PERIOD: Duration = Duration::from_secs(10);

/// Progress shown on stderr.
#[derive(Debug)]
pub struct Shown {
    bars: bool,
    stage: Option<Stage>,
}

#[derive(Debug)]
struct Stage {
    name: String,
    unit: String,
    total: u64,
    done: u64,
    /// The count and time of the first step, where the rate is measured from (a resumed
    /// campaign's first step counts what its journal already holds).
    base: Option<(u64, Instant)>,
    now: String,
    started: Instant,
    printed: Option<Instant>,
    bar: Option<ProgressBar>,
}

impl Shown {
    /// Bars where stderr is a terminal, plain lines otherwise.
    pub fn stderr() -> Shown {
        Shown {
            bars: std::io::stderr().is_terminal(),
            stage: None,
        }
    }

    fn finish(&mut self) {
        if let Some(s) = self.stage.take() {
            match s.bar {
                Some(bar) => bar.finish_and_clear(),
                None if s.printed.is_some() && s.done < s.total => eprintln!("{}", s.line()),
                None => {}
            }
        }
    }
}

impl Drop for Shown {
    fn drop(&mut self) {
        if let Some(bar) = self.stage.as_ref().and_then(|s| s.bar.as_ref()) {
            bar.abandon();
        }
    }
}

fn style(unit: &str) -> ProgressStyle {
    ProgressStyle::with_template(&format!(
        "{{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit} · {{elapsed}}, {{eta}} left · {{wide_msg}}"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// `1h 02m`, `3m 05s`, `12s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Stage {
    /// `train: 40/545 members (7%), seed 7: ...; 1m 05s elapsed, about 13m 20s left`.
    fn line(&self) -> String {
        let elapsed = self.started.elapsed();
        #[allow(clippy::cast_precision_loss)]
        let share = if self.total == 0 {
            100.0
        } else {
            self.done as f64 / self.total as f64 * 100.0
        };
        let mut line = format!(
            "{}: {}/{} {} ({share:.0}%)",
            self.name, self.done, self.total, self.unit
        );
        if !self.now.is_empty() {
            line.push_str(", ");
            line.push_str(&self.now);
        }
        line.push_str(&format!("; {} elapsed", clock(elapsed)));
        let (base, since) = self.base.unwrap_or((0, self.started));
        if self.done > base && self.done < self.total {
            #[allow(clippy::cast_precision_loss)]
            let left = since.elapsed().as_secs_f64() / (self.done - base) as f64
                * (self.total - self.done) as f64;
            line.push_str(&format!(
                ", about {} left",
                clock(Duration::from_secs_f64(left))
            ));
        }
        line
    }
}

impl Progress for Shown {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start { stage, total, unit } => {
                self.finish();
                let bar = self.bars.then(|| {
                    let bar =
                        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                    bar.set_style(style(unit));
                    bar.set_prefix(stage.to_string());
                    bar
                });
                self.stage = Some(Stage {
                    name: stage.to_string(),
                    unit: unit.to_string(),
                    total,
                    done: 0,
                    base: None,
                    now: String::new(),
                    started: Instant::now(),
                    printed: None,
                    bar,
                });
            }
            Event::Step { done, now } => {
                let Some(s) = self.stage.as_mut() else {
                    return;
                };
                s.done = done.min(s.total);
                if s.base.is_none() {
                    s.base = Some((s.done, Instant::now()));
                }
                if let Some(bar) = &s.bar {
                    bar.set_position(s.done);
                    bar.set_message(now.to_string());
                } else if s.done == s.total || s.printed.is_none_or(|p| p.elapsed() >= PERIOD) {
                    now.clone_into(&mut s.now);
                    eprintln!("{}", s.line());
                    s.printed = Some(Instant::now());
                } else {
                    now.clone_into(&mut s.now);
                }
            }
            Event::Line(line) => match self.stage.as_ref().and_then(|s| s.bar.as_ref()) {
                Some(bar) => bar.println(line),
                None => eprintln!("{line}"),
            },
            Event::Finish => self.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_say_how_far_and_how_long() {
        let s = Stage {
            name: "train".into(),
            unit: "members".into(),
            total: 4,
            done: 1,
            base: None,
            now: "seed 7: evaluated random fold 1/5".into(),
            started: Instant::now() - Duration::from_secs(30),
            printed: None,
            bar: None,
        };
        let line = s.line();
        assert!(
            line.starts_with("train: 1/4 members (25%), seed 7: evaluated random fold 1/5; 30s elapsed, about 1m 30s left"),
            "{line}"
        );
        assert_eq!(clock(Duration::from_secs(3725)), "1h 02m");
        assert_eq!(clock(Duration::from_secs(185)), "3m 05s");
    }
}
