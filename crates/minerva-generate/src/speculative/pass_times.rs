//! Pass (or step) times by row count: what was measured, what is assumed for a count that was
//! not, and how far past the measured counts a choice may reach.

use super::DECAY;

/// Seconds of a forward pass of `r` rows at index `r` (moving averages; 0: not measured).
///
/// Shared by one sequence's choice of draft length ([`super::Speculation::choose`]) and a batch's
/// ([`super::BatchPlanner`]): both weigh a draft's expected tokens against the time its rows add.
#[derive(Clone, Debug)]
pub(crate) struct PassTimes {
    secs: Vec<f64>,
}

impl PassTimes {
    /// Times of passes of at most `max_rows` rows.
    pub(crate) fn new(max_rows: usize) -> PassTimes {
        PassTimes { secs: vec![0.0; max_rows.max(1) + 1] }
    }

    /// The most rows a pass may hold.
    pub(crate) fn max_rows(&self) -> usize {
        self.secs.len() - 1
    }

    /// The measured seconds by row count (index: rows; 0: not measured).
    pub(crate) fn measured(&self) -> &[f64] {
        &self.secs
    }

    /// Notes a pass of `rows` rows that took `secs` (row counts past [`PassTimes::max_rows`]
    /// are not kept).
    pub(crate) fn record(&mut self, rows: usize, secs: f64) {
        if let Some(t) = self.secs.get_mut(rows) {
            *t = if *t > 0.0 { DECAY * *t + (1.0 - DECAY) * secs } else { secs };
        }
    }

    /// The time assumed for a pass of `rows` rows: its measurement; between two measured row
    /// counts, the straight line through them (so a count never tried is weighed without being
    /// tried); past the largest measured, that one's time (so a larger pass is tried once, then
    /// known); below the smallest measured, that one's (fewer rows take no longer); 0 when none
    /// is.
    pub(crate) fn assumed(&self, rows: usize) -> f64 {
        let rows = rows.min(self.max_rows());
        let below = (0..=rows).rev().find(|&r| self.secs[r] > 0.0);
        let above = (rows..self.secs.len()).find(|&r| self.secs[r] > 0.0);
        match (below, above) {
            (Some(b), Some(a)) if a > b => {
                let (tb, ta) = (self.secs[b], self.secs[a]);
                tb + (ta - tb) * (rows - b) as f64 / (a - b) as f64
            }
            (Some(r), _) | (None, Some(r)) => self.secs[r],
            (None, None) => 0.0,
        }
    }

    /// The most rows a choice may run now: twice the largest count measured, at least
    /// [`PassTimes::FIRST_REACH`], at most [`PassTimes::max_rows`]. Since a count past the
    /// largest measured is assumed to cost no more than it, an unbounded choice would jump to the
    /// largest pass allowed on its first guess — on a CPU, 33 rows cost 10 plain steps of SmolLM2,
    /// spent whether or not the drafts hold. Doubling reaches a 32-token draft in 3 passes where
    /// drafts hold and stops where the measured line says larger passes do not pay.
    pub(crate) fn reach(&self) -> usize {
        let largest = (1..self.secs.len()).rev().find(|&r| self.secs[r] > 0.0).unwrap_or(1);
        largest.saturating_mul(2).max(Self::FIRST_REACH).min(self.max_rows())
    }

    /// The rows a choice may reach before larger passes are measured: a 7-token draft, whose pass
    /// costs 3–4 plain steps on a 2-core CPU, and which a short answer quoting its input fills.
    pub(crate) const FIRST_REACH: usize = 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_row_counts_are_read_off_the_measured_ones() {
        let mut p = PassTimes::new(16);
        assert_eq!(p.assumed(3), 0.0);
        p.record(2, 0.010);
        p.record(8, 0.030);
        // Below every measurement: the smallest measured above.
        assert_eq!(p.assumed(1), 0.010);
        assert_eq!(p.assumed(2), 0.010);
        // Between two: on the line through them.
        assert!((p.assumed(5) - 0.020).abs() < 1e-12);
        assert!((p.assumed(7) - 0.030 * 5.0 / 6.0 - 0.010 / 6.0).abs() < 1e-12);
        // Past the largest: its time.
        assert_eq!(p.assumed(12), 0.030);
        p.record(8, 0.020);
        assert!((p.assumed(9) - 0.029).abs() < 1e-12);
        // Past the most rows kept: not kept.
        p.record(17, 1.0);
        assert_eq!(p.measured().len(), 17);
        assert!((p.assumed(40) - 0.029).abs() < 1e-12);
    }

    #[test]
    fn the_reach_doubles_the_largest_measured_pass() {
        let mut p = PassTimes::new(40);
        assert_eq!(p.reach(), PassTimes::FIRST_REACH);
        p.record(1, 0.010);
        p.record(3, 0.012);
        assert_eq!(p.reach(), 8);
        p.record(5, 0.014);
        assert_eq!(p.reach(), 10);
        p.record(17, 0.030);
        assert_eq!(p.reach(), 34);
        p.record(33, 0.050);
        assert_eq!(p.reach(), 40);
        assert_eq!(PassTimes::new(4).reach(), 4);
    }
}
