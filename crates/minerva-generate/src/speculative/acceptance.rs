//! What the verdicts so far say about how likely drafted tokens are to be kept.

use super::DECAY;

/// Kept tokens and refusals assumed before any verdict (decayed with the verdicts').
const PRIOR: f64 = 1.0;

/// The evidence on the rate `a` at which a sequence's drafted tokens are kept (each given the
/// ones before it): kept tokens and refusals, each decayed per verdict so the estimate follows
/// the text as it changes, starting from one of each. Read as a Beta(kept, refused) belief about
/// `a`, the chance that a draft's first `j` tokens are all kept is `E[aʲ]`, not `E[a]ʲ`: with
/// little evidence the difference is large (one of each: `1/(j + 1)` against `2⁻ʲ`, 1/8 against
/// 1/128 for the 7th token), so a new generation tries drafts long enough to learn whether they
/// hold, and with much evidence the two agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Acceptance {
    /// Kept drafted tokens, decayed.
    pub kept: f64,
    /// Refused drafts (a verdict that stopped before the draft's end), decayed.
    pub refused: f64,
}

impl Default for Acceptance {
    fn default() -> Self {
        Acceptance { kept: PRIOR, refused: PRIOR }
    }
}

impl Acceptance {
    /// Evidence worth `weight` verdicts at rate `a` (tests, and planners told a rate).
    pub fn at_rate(a: f64, weight: f64) -> Acceptance {
        let a = a.clamp(0.0, 1.0);
        Acceptance { kept: a * weight, refused: (1.0 - a) * weight }
    }

    /// The expected rate `kept / (kept + refused)`; 0.5 (the prior's) if both counts have
    /// decayed to nothing.
    pub fn rate(&self) -> f64 {
        let total = self.kept + self.refused;
        if total > f64::MIN_POSITIVE { self.kept / total } else { 0.5 }
    }

    /// Notes that `accepted` of `drafted` tokens were kept.
    pub(crate) fn record(&mut self, drafted: usize, accepted: usize) {
        self.kept = DECAY * self.kept + accepted as f64;
        self.refused = DECAY * self.refused + f64::from(u8::from(accepted < drafted));
    }

    /// The chances that a draft's first 1, 2, 3, … tokens are all kept: `E[aʲ]` for
    /// `a ~ Beta(kept, refused)`, `Π_{i<j} (kept + i) / (kept + refused + i)`.
    pub fn chances(self) -> impl Iterator<Item = f64> {
        let (kept, total) = (self.kept.max(0.0), (self.kept + self.refused).max(0.0));
        let mut chance = 1.0;
        (0..).map(move |i| {
            let i = f64::from(i);
            chance *= if total + i > f64::MIN_POSITIVE { (kept + i) / (total + i) } else { 0.5 };
            chance
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chances_are_the_beta_moments() {
        // One of each: E[aʲ] = 1/(j + 1).
        let prior: Vec<f64> = Acceptance::default().chances().take(4).collect();
        for (j, c) in prior.iter().enumerate() {
            assert!((c - 1.0 / (j as f64 + 2.0)).abs() < 1e-12, "{prior:?}");
        }
        // Much evidence: E[aʲ] ≈ aʲ.
        let firm: Vec<f64> = Acceptance::at_rate(0.8, 1e9).chances().take(3).collect();
        for (j, c) in firm.iter().enumerate() {
            assert!((c - 0.8f64.powi(j as i32 + 1)).abs() < 1e-6, "{firm:?}");
        }
        // Never kept: every chance 0; always kept: 1.
        assert!(Acceptance { kept: 0.0, refused: 3.0 }.chances().take(5).all(|c| c == 0.0));
        assert!(Acceptance { kept: 3.0, refused: 0.0 }.chances().take(5).all(|c| c == 1.0));
    }

    #[test]
    fn verdicts_decay_the_prior_away() {
        let mut a = Acceptance::default();
        assert_eq!(a.rate(), 0.5);
        // One-token drafts, all kept: the rate approaches 1.
        for _ in 0..60 {
            a.record(1, 1);
        }
        assert!(a.rate() > 0.99, "{}", a.rate());
        // Refusals pull it down; decayed to nothing, the prior's rate.
        for _ in 0..40 {
            a.record(8, 0);
        }
        assert!(a.rate() < 0.1, "{}", a.rate());
        assert_eq!(Acceptance { kept: 0.0, refused: 0.0 }.rate(), 0.5);
    }
}
