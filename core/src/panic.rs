//! Caught panics, as text.

use std::any::Any;

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
