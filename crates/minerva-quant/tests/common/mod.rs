//! What the test binaries of this crate share.

// Each binary uses part of it.
#![allow(dead_code)]

use std::io::Write;

/// Whether this CPU runs the AVX2 kernels (x86-64 with AVX2, FMA and F16C). A test that checks
/// those kernels and finds them missing says so on stderr, past the test harness's capture, so
/// the run's output shows what was not checked. Under CI (`CI` set) on x86-64 it fails instead:
/// every CI machine has had AVX2, and a silent pass there would hide a check that stopped running.
pub fn avx2_or_say_why_not(test: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    let has = std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    let has = false;
    if !has {
        let message = format!("{test}: NOT RUN, this CPU lacks AVX2 + FMA + F16C (the kernels it checks)");
        assert!(!cfg!(target_arch = "x86_64") || std::env::var_os("CI").is_none(), "{message}; CI must run it");
        let _ = writeln!(std::io::stderr(), "{message}");
    }
    has
}

/// A small deterministic generator (xorshift64*), so that inputs of any size cost nothing to build.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}
