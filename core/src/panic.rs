//! Caught panics, as text, and a library's panics caught without their report.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    /// Set while [`caught_quietly`] runs its work on this thread.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` catching a panic, as `catch_unwind`, without the panic's report on stderr when
/// it happens on this thread: for a library that panics on bad input (polars' Parquet reader
/// on a damaged file), whose panic the caller turns into an error naming the input. A panic on
/// another thread, or outside `work`, is reported as ever (the process's hook is wrapped, once,
/// not replaced).
pub fn caught_quietly<T>(work: impl FnOnce() -> T) -> std::thread::Result<T> {
    static WRAPPED: std::sync::Once = std::sync::Once::new();
    WRAPPED.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                report(info);
            }
        }));
    });
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUIET.set(self.0);
        }
    }
    let _restore = Restore(QUIET.replace(true));
    catch_unwind(AssertUnwindSafe(work))
}

/// The message a caught panic carried (`panic!` with a literal or a formatted string), or an
/// empty string where its payload is of another type.
pub fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn a_quiet_catch_gives_the_panic_and_then_reports_as_before() {
        let caught = super::caught_quietly(|| panic!("damaged")).expect_err("panicked");
        assert_eq!(message(caught.as_ref()), "damaged");
        assert_eq!(super::caught_quietly(|| 7).expect("no panic"), 7);
        assert!(!super::QUIET.get(), "quiet only inside");
    }

    #[test]
    fn a_panics_literal_or_formatted_message_or_nothing() {
        let caught = |f: fn()| std::panic::catch_unwind(f).expect_err("panicked");
        let literal = caught(|| panic!("plain"));
        let formatted = caught(|| panic!("{} and {}", 1, 2));
        let other = caught(|| std::panic::panic_any(7_u8));
        assert_eq!(message(literal.as_ref()), "plain");
        assert_eq!(message(formatted.as_ref()), "1 and 2");
        assert_eq!(message(other.as_ref()), "");
    }
}
