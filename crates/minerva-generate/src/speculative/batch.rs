//! How many tokens each sequence of a batch drafts, chosen for the whole step.
//!
//! In a batch, a drafted token is one more row of the step that every sequence waits for, so one
//! sequence's measurements cannot say whether its draft pays: the rows the step already runs use
//! what the extra rows need (on a CPU, the compute of the tiles; on a GPU, little until the rows
//! fill it). [`BatchPlanner`] measures the step's time by its row count and gives the extra rows
//! to the drafted tokens most likely to be kept, as many as raise the expected tokens per second
//! of the whole step — none when a plain step is best, as happens once the batch alone keeps the
//! hardware busy. The crossover is measured on the machine it runs on, not fixed.

use super::Acceptance;
use super::pass_times::PassTimes;

/// A sequence that may draft this step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftCandidate {
    /// How likely its drafted tokens are kept ([`super::Speculation::evidence`]).
    pub acceptance: Acceptance,
    /// The most tokens it may draft (what its drafter proposed, for cheap drafters).
    pub max: usize,
    /// Seconds its drafter takes per drafted token (0 for lookups).
    pub draft_seconds: f64,
    /// It has not drafted for a while: it drafts one token if it may, to measure again.
    pub probe: bool,
}

/// Step times by row count, and the choice of draft lengths that they and the acceptance rates
/// say maximizes a step's expected tokens per second.
#[derive(Clone, Debug)]
pub struct BatchPlanner {
    /// Seconds of a step by its rows, every row a decoding one.
    steps: PassTimes,
}

impl BatchPlanner {
    /// A planner for steps of at most `max_rows` rows.
    pub fn new(max_rows: usize) -> BatchPlanner {
        BatchPlanner { steps: PassTimes::new(max_rows) }
    }

    /// The most rows a step may hold.
    pub fn max_rows(&self) -> usize {
        self.steps.max_rows()
    }

    /// Notes a step of `rows` decoding rows (drafted tokens included) that took `secs`.
    pub fn record_step(&mut self, rows: usize, secs: f64) {
        self.steps.record(rows, secs);
    }

    /// The draft length of each of `candidates` in a step of `decoding` sequences (the
    /// candidates among them) that each decode one token without a draft.
    ///
    /// A sequence's first `j` drafted tokens are all kept with chance `cⱼ` (its
    /// [`Acceptance::chances`], falling with `j`), so the step's extra rows go to the tokens of
    /// highest `cⱼ` first; of the `K` extra rows, the count chosen maximizes
    /// `(decoding + Σ cⱼ) / (t(decoding + K) + Σ draft seconds)`, with `decoding + K` at most
    /// twice the largest step measured (larger steps are reached by doubling, each measured before
    /// the next). A candidate due a probe drafts at least one token.
    pub fn plan(&self, decoding: usize, candidates: &[DraftCandidate]) -> Vec<usize> {
        let mut lengths = vec![0; candidates.len()];
        let room = self.steps.reach().saturating_sub(decoding);
        // (gain, candidate) of every token a candidate could draft, the likeliest kept first;
        // a candidate's tokens come in its own order, since cⱼ falls with j.
        let mut tokens: Vec<(f64, usize)> = Vec::new();
        for (c, cand) in candidates.iter().enumerate() {
            tokens.extend(cand.acceptance.chances().take(cand.max).map(|gain| (gain, c)));
        }
        tokens.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        tokens.truncate(room);
        let rate = |expected: f64, secs: f64| expected / secs.max(super::SECONDS_FLOOR);
        let mut best = (0, rate(decoding as f64, self.steps.assumed(decoding)));
        let (mut expected, mut drafting) = (decoding as f64, 0.0);
        for (k, &(gain, c)) in tokens.iter().enumerate() {
            expected += gain;
            drafting += candidates[c].draft_seconds;
            let r = rate(expected, self.steps.assumed(decoding + k + 1) + drafting);
            if r > best.1 {
                best = (k + 1, r);
            }
        }
        for &(_, c) in &tokens[..best.0] {
            lengths[c] += 1;
        }
        let mut extra = best.0;
        for (c, cand) in candidates.iter().enumerate() {
            if cand.probe && cand.max > 0 && lengths[c] == 0 && decoding + extra < self.max_rows() {
                lengths[c] = 1;
                extra += 1;
            }
        }
        lengths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(acceptance: f64, max: usize) -> DraftCandidate {
        // Firm evidence: the chances are the rate's powers.
        DraftCandidate { acceptance: Acceptance::at_rate(acceptance, 1e9), max, draft_seconds: 0.0, probe: false }
    }

    /// A planner whose steps cost `base` seconds plus `per_row` per row.
    fn linear(max_rows: usize, base: f64, per_row: f64) -> BatchPlanner {
        let mut p = BatchPlanner::new(max_rows);
        for r in 1..=max_rows {
            p.record_step(r, base + per_row * r as f64);
        }
        p
    }

    #[test]
    fn steps_grow_by_doubling_the_largest_measured() {
        // Nothing measured: a step of at most 8 rows.
        let mut p = BatchPlanner::new(40);
        let two = [candidate(0.5, 16), candidate(0.5, 16)];
        assert_eq!(p.plan(2, &two), vec![3, 3]);
        // Each measured step at most doubles the next, while the rows cost nothing.
        p.record_step(8, 0.010);
        assert_eq!(p.plan(2, &two), vec![7, 7]);
        p.record_step(16, 0.010);
        assert_eq!(p.plan(2, &two), vec![15, 15]);
        p.record_step(32, 0.010);
        assert_eq!(p.plan(2, &two), vec![16, 16]);
        assert_eq!(p.plan(1, &[candidate(0.1, 3)]), vec![3]);
        assert_eq!(p.plan(40, &[candidate(0.9, 3)]), vec![0]);
    }

    #[test]
    fn cheap_rows_go_to_the_likeliest_tokens() {
        // Rows nearly free: every token of positive gain is drafted.
        let p = linear(64, 0.010, 0.00001);
        assert_eq!(p.plan(3, &[candidate(0.9, 4), candidate(0.5, 4), candidate(0.0, 4)]), vec![4, 4, 0]);
        // Each row 2 % of a one-row step: the second sequence's first token (kept 30 % of the
        // time) pays, its second (9 %) does not once the first has raised the step's rate.
        let p = linear(64, 0.010, 0.0002);
        let lengths = p.plan(2, &[candidate(0.95, 8), candidate(0.3, 8)]);
        assert_eq!(lengths[0], 8);
        assert_eq!(lengths[1], 1, "{lengths:?}");
    }

    #[test]
    fn a_busy_batch_stops_drafting() {
        // A step of r rows costs r times one row (compute-bound): a drafted token adds its
        // row's full cost and gives less than a token, so no draft pays at any batch size.
        let p = linear(64, 0.0, 0.005);
        assert_eq!(p.plan(1, &[candidate(0.8, 8)]), vec![0]);
        // Flat to 4 rows (memory-bound), then each row costs a one-row step: one sequence
        // drafts up to the knee, eight sequences draft nothing.
        let mut p = BatchPlanner::new(64);
        for r in 1..=64 {
            p.record_step(r, 0.010 * (r.max(4) - 3) as f64);
        }
        assert_eq!(p.plan(1, &[candidate(0.9, 8)]), vec![3]);
        let eight = vec![candidate(0.9, 8); 8];
        assert_eq!(p.plan(8, &eight), vec![0; 8]);
    }

    #[test]
    fn draft_time_counts_against_a_draft() {
        let p = linear(64, 0.010, 0.0001);
        let free = candidate(0.6, 6);
        let slow = DraftCandidate { draft_seconds: 0.010, ..free };
        assert_eq!(p.plan(1, &[free]), vec![6]);
        assert_eq!(p.plan(1, &[slow]), vec![0]);
        let fair = DraftCandidate { draft_seconds: 0.002, ..free };
        let k = p.plan(1, &[fair])[0];
        assert!((1..6).contains(&k), "{k}");
    }

    #[test]
    fn a_batch_smaller_than_any_measured_drafts_when_larger_ones_were_cheap() {
        // Steps of 5–7 rows were measured (a fuller batch, plain); now 4 sequences decode: the
        // base is taken as fast as 5 rows, so drafting into the measured sizes is weighed, not
        // dwarfed by an unmeasured base.
        let mut p = BatchPlanner::new(64);
        for r in 5..=7 {
            p.record_step(r, 0.010 + 0.0001 * r as f64);
        }
        let lengths = p.plan(4, &[candidate(0.9, 2), candidate(0.9, 2)]);
        assert_eq!(lengths, vec![2, 2]);
    }

    #[test]
    fn probes_draft_one_token_where_there_is_room() {
        let p = linear(4, 0.0, 0.005);
        let probe = DraftCandidate { probe: true, ..candidate(0.8, 8) };
        assert_eq!(p.plan(2, &[probe, candidate(0.8, 8)]), vec![1, 0]);
        assert_eq!(p.plan(4, &[probe]), vec![0]);
        assert_eq!(p.plan(1, &[DraftCandidate { max: 0, ..probe }]), vec![0]);
    }
}
