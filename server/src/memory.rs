//! Memory the C allocator keeps after a burst of large requests, given back to the system.
//!
//! glibc keeps what a request freed for the next one (its threshold for blocks mapped on their
//! own rises to the largest freed, up to 32 MiB), which saves the next request its page faults;
//! but after a burst of large bodies that memory stays resident: sixteen clients' 5 MB bodies at
//! once left a server at 192 MiB of its 252 MiB peak, and the next burst grows from there.
//! Mapping every large block on its own instead gives it back at once, at 4 ms more for a
//! 10,000-pair request (BENCHMARKS.md, "Memory after a burst"). So the memory is given back only
//! where the process holds more than the work it admits can explain: after a large request, once
//! resident memory is over its mark, the allocator trims every arena.

/// Resident bytes of this process (`VmRSS` of `/proc/self/status`); `None` where it cannot be
/// read.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Gives the allocator's free memory back to the system where this process holds more than
/// `mark` bytes resident; `true` where it did.
pub fn trim_above(mark: u64) -> bool {
    match resident_bytes() {
        Some(resident) if resident > mark => trim(),
        _ => false,
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() -> bool {
    // SAFETY: `malloc_trim` gives free pages of glibc's arenas back to the system under each
    // arena's own lock; it takes an integer and touches no memory of the caller.
    unsafe { libc::malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn resident_memory_is_read_and_trimmed_only_above_its_mark() {
        let resident = super::resident_bytes().expect("statm");
        assert!(resident > 1 << 20, "{resident}");
        assert!(!super::trim_above(u64::MAX));
        assert_eq!(
            super::trim_above(0),
            cfg!(all(target_os = "linux", target_env = "gnu"))
        );
    }
}
