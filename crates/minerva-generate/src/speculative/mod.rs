//! Speculative decoding: a [`Drafter`] guesses the next few tokens, the target model runs them in
//! one forward pass (the prefill kernels: each weight block read once for all of them) and keeps
//! the ones it agrees with, so a pass over the weights can give several tokens.
//!
//! ```text
//! emitted token t ─► drafter: d₁…d_k ─► target runs [t, d₁…d_k] in one pass ─► k + 1 next-token rows
//!   at row i: the token plain decoding would take there (argmax, or one draw of the sampler)
//!   keep dᵢ₊₁ while it is that token; the first that is not is replaced by it (always ≥ 1 new token)
//!   cache:   positions after the last kept token are forgotten (rewritten by the next pass)
//! ```
//!
//! **The output is the same, token for token, as without speculation**: greedy, and sampled with
//! the same seed. The CPU and wgpu kernels are batch-invariant (a row's logits do not depend on
//! the rows beside it, prefill or decode), so each row's logits are the ones plain decoding
//! computes at that position, and each emitted token takes the one draw plain sampling would
//! (`tests/speculative.rs` holds every architecture, n-gram and draft-model drafts, EOS, stop
//! strings, token limits and seeded sampling to it; on wgpu, plain sampling draws on the device,
//! summing in f32, so a draw within ~1e-4 of a boundary of the distribution may fall on the
//! neighbouring token there). For drafts of single tokens (point
//! distributions, as both drafters make) this is the rejection-sampling rule of Leviathan et al.
//! 2023 and Chen et al. 2023: a drafted token is kept with the target's probability for it, and a
//! refused one is replaced by a draw from the target's distribution without it.
//!
//! How many tokens to draft ([`Speculation::choose`]) follows what was measured in this
//! generation: the acceptance rate of drafted tokens and the time of a pass of each row count,
//! drafting only where the expected tokens per second beat a plain step — so prompts whose
//! drafts fail cost about what plain decoding does.

use std::sync::Arc;

use minerva_model::{Backend, Model, SequenceInput};

use crate::error::{GenerateError, Result};
use crate::sampler::Sampler;
use crate::speculative::pass_times::PassTimes;
use crate::tokenizer::Tokenizer;

mod acceptance;
mod batch;
mod ngram;
mod pass_times;

pub use acceptance::Acceptance;
pub use batch::{BatchPlanner, DraftCandidate};
pub use ngram::{NgramDrafter, SpacingClasses};

/// Proposes the tokens likely to follow a sequence.
pub trait Drafter {
    /// A short name for statistics (`ngram`, `draft-model`).
    fn name(&self) -> &'static str;

    /// Appends to `out` at most `max` tokens guessed to follow `history` (the prompt and the
    /// tokens generated so far); none where it has no guess.
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()>;

    /// The kind of guess the last [`Drafter::draft`] made: drafts of each kind are kept at a
    /// rate measured apart from the others' (prompt lookup: the length of the match, since a
    /// one-token match continues the text less often than a four-token one). 0 for a drafter of
    /// one kind; kinds from 32 on are measured as one.
    fn kind(&self) -> usize {
        0
    }

    /// Whether each drafted token costs a forward pass (a model): a batch's planner then chooses
    /// the draft's length before drafting ([`BatchPlanner`]). Cheap drafters (lookups) draft
    /// their longest and are cut to the length chosen.
    fn costly(&self) -> bool {
        false
    }
}

/// Kinds of draft measured apart ([`Drafter::kind`]; a larger kind counts as the last).
const KINDS: usize = NgramDrafter::MAX_N + 1;

/// Drafts with a smaller model of the same vocabulary, greedily, in its own KV cache kept in step
/// with the target's sequence: each call runs only the tokens after the longest prefix it has
/// cached, so rejected drafts are rolled back by forgetting them.
pub struct DraftModel<'m, B: Backend> {
    model: ModelRef<'m, B>,
    cache: B::Cache,
    capacity: usize,
    /// The ids whose keys and values are in `cache`, in order.
    cached: Vec<u32>,
}

impl<'m, B: Backend> DraftModel<'m, B> {
    /// A drafter over `model` with a context of `context` positions (the target's).
    pub fn new(model: &'m Model<B>, context: usize) -> Result<DraftModel<'m, B>> {
        Self::with(ModelRef::Borrowed(model), context)
    }

    fn with(model: ModelRef<'m, B>, context: usize) -> Result<DraftModel<'m, B>> {
        let cache = model.get().new_cache(1, context)?;
        Ok(DraftModel { model, cache, capacity: context, cached: Vec::new() })
    }

    fn forward(&mut self, start: usize, tokens: &[u32]) -> Result<u32> {
        let seq = SequenceInput { tokens, start_pos: start, slot: 0 };
        let next = self.model.get().forward_greedy(&mut self.cache, &[seq])?[0];
        self.cached.truncate(start);
        self.cached.extend_from_slice(tokens);
        Ok(next)
    }
}

impl<B: Backend> DraftModel<'static, B> {
    /// A drafter over a model shared with other drafters (a server's sequences each hold one,
    /// with a cache of its own), with a context of `context` positions.
    pub fn shared(model: Arc<Model<B>>, context: usize) -> Result<DraftModel<'static, B>> {
        Self::with(ModelRef::Shared(model), context)
    }
}

/// A draft model borrowed (one generation session) or shared (a server's sequences).
enum ModelRef<'m, B: Backend> {
    Borrowed(&'m Model<B>),
    Shared(Arc<Model<B>>),
}

impl<B: Backend> ModelRef<'_, B> {
    fn get(&self) -> &Model<B> {
        match self {
            ModelRef::Borrowed(m) => m,
            ModelRef::Shared(m) => m,
        }
    }
}

impl<B: Backend> Drafter for DraftModel<'_, B> {
    fn name(&self) -> &'static str {
        "draft-model"
    }

    fn costly(&self) -> bool {
        true
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        // The history and all but the last draft are run: positions up to len + max − 2.
        let max = max.min((self.capacity + 1).saturating_sub(history.len()));
        if max == 0 || history.is_empty() {
            return Ok(());
        }
        let common = self.cached.iter().zip(history).take_while(|(a, b)| a == b).count();
        let reuse = common.min(history.len() - 1);
        let mut next = self.forward(reuse, &history[reuse..])?;
        out.push(next);
        for _ in 1..max {
            next = self.forward(self.cached.len(), &[next])?;
            out.push(next);
        }
        Ok(())
    }
}

/// Checks that a draft model's tokenizer spells every id as the target's does (a draft is a list
/// of ids: they must mean the same tokens); the error names the first id that differs.
pub fn check_same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    if n != m {
        return Err(GenerateError::Request(format!(
            "the draft model's vocabulary has {m} tokens, the model's {n}: a draft model needs the same vocabulary"
        )));
    }
    for id in 0..n as u32 {
        let (a, b) = (target.id_to_token(id), draft.id_to_token(id));
        if a != b {
            return Err(GenerateError::Request(format!(
                "token {id} is {b:?} in the draft model's vocabulary but {a:?} in the model's: a draft model needs the same vocabulary"
            )));
        }
    }
    Ok(())
}

/// How many drafted tokens may follow a token run at position `pos` in a context of `capacity`
/// positions: the positions left after it, and for long-rope models (whose rotation depends on a
/// step's largest position, [`minerva_model::RopeConfig::step_dependent_from`]) no further than
/// the last position below its switch while `pos` is below it — so every row of a verification
/// pass rotates as plain decoding rotates it.
pub fn draft_room(model: &minerva_model::Config, pos: usize, capacity: usize) -> usize {
    let mut room = capacity.saturating_sub(pos + 1);
    if let Some(switch) = model.rope.step_dependent_from()
        && pos < switch
    {
        room = room.min(switch - 1 - pos);
    }
    room
}

/// What speculation did in one generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// The drafter's [`Drafter::name`].
    pub drafter: &'static str,
    /// Forward passes of the target after the prompt's (plain and verifying).
    pub passes: usize,
    /// Passes that verified a draft.
    pub verify_passes: usize,
    /// Drafted tokens run through the target.
    pub drafted: usize,
    /// Drafted tokens the target kept.
    pub accepted: usize,
}

impl SpecStats {
    /// Kept drafted tokens per drafted token (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 { 0.0 } else { self.accepted as f64 / self.drafted as f64 }
    }
}

/// A drafter and the rule for how much of its draft to verify; held by a [`crate::Session`]
/// ([`crate::Session::set_speculation`]) and used by every unconstrained generation of it.
pub struct Speculation<'m> {
    drafter: Box<dyn Drafter + 'm>,
    k_max: usize,
    /// Always draft `k_max` (tests and benchmarks) instead of choosing by the measurements.
    fixed: bool,
    /// The verdicts' evidence on how likely drafted tokens are kept, by the kind of draft
    /// ([`Drafter::kind`]).
    acceptance: [Acceptance; KINDS],
    /// The kind of the draft being chosen and verified.
    kind: usize,
    /// Seconds of a target pass by its rows.
    passes: PassTimes,
    /// Plain steps since the last draft (a draft is tried now and then, to notice drafts
    /// becoming good).
    since_draft: usize,
    /// Drafts kept so far (non-empty [`Speculation::keep`]s).
    drafts: usize,
    /// The draft being verified.
    draft: Vec<u32>,
    pub(crate) stats: SpecStats,
}

/// How often a draft is tried when the measurements say drafting does not pay.
const PROBE_EVERY: usize = 16;
/// The weight of history in the acceptance and time averages (per pass).
const DECAY: f64 = 0.9;
/// The least time a pass is taken to need, so that rates stay finite before any is measured
/// (the choice then drafts as much as allowed, to measure).
const SECONDS_FLOOR: f64 = 1e-9;

impl<'m> Speculation<'m> {
    /// The most tokens a pass may draft.
    pub const K_LIMIT: usize = 64;

    /// Drafts of at most `k_max` tokens (1 ≤ `k_max` ≤ [`Speculation::K_LIMIT`]), as many as the
    /// measured acceptance and pass times say pay.
    pub fn adaptive(drafter: Box<dyn Drafter + 'm>, k_max: usize) -> Result<Speculation<'m>> {
        Self::new(drafter, k_max, false)
    }

    /// Drafts of `k` tokens whenever the drafter has them (for tests and benchmarks).
    pub fn fixed(drafter: Box<dyn Drafter + 'm>, k: usize) -> Result<Speculation<'m>> {
        Self::new(drafter, k, true)
    }

    fn new(drafter: Box<dyn Drafter + 'm>, k_max: usize, fixed: bool) -> Result<Speculation<'m>> {
        if !(1..=Self::K_LIMIT).contains(&k_max) {
            return Err(GenerateError::Request(format!("draft length {k_max}: need 1 to {} tokens", Self::K_LIMIT)));
        }
        let stats = SpecStats { drafter: drafter.name(), ..SpecStats::default() };
        Ok(Speculation {
            drafter,
            k_max,
            fixed,
            acceptance: [Acceptance::default(); KINDS],
            kind: 0,
            passes: PassTimes::new(k_max + 1),
            since_draft: 0,
            drafts: 0,
            draft: Vec::new(),
            stats,
        })
    }

    /// The measured seconds of a target pass of each row count (index: rows; 0: not measured),
    /// moving averages over this speculation's generations.
    pub fn pass_seconds(&self) -> &[f64] {
        self.passes.measured()
    }

    /// Clears the statistics and the acceptance for a new generation: the pass times carry over
    /// (they are the machine's), the acceptance starts again from its prior, since another
    /// text's drafts say little about this one's (after a free-form answer whose drafts failed,
    /// an edit's first drafts were chosen as if they would fail too).
    pub(crate) fn start(&mut self) {
        self.stats = SpecStats { drafter: self.drafter.name(), ..SpecStats::default() };
        self.acceptance = [Acceptance::default(); KINDS];
    }

    /// Drafts at most `limit` tokens after `history` (none: run a plain step), cut before the
    /// first id outside the target's `vocab`; [`Speculation::drafted`] holds them. A cheap
    /// drafter drafts first, so that the length is chosen by its kind of draft's acceptance; a
    /// costly one is told the length.
    pub fn draft(&mut self, history: &[u32], limit: usize, vocab: usize) -> Result<()> {
        let k = if self.costly() {
            let k = self.choose(limit);
            self.propose(history, k, vocab)?;
            k
        } else {
            self.propose(history, limit.min(self.k_max), vocab)?;
            self.choose(limit)
        };
        self.keep(k);
        Ok(())
    }

    /// Drafts at most `k` tokens after `history` with no choice of length, cut before the first
    /// id outside the target's `vocab`: a batch's planner ([`BatchPlanner`]) chooses the length,
    /// then [`Speculation::keep`] ends the draft.
    pub fn propose(&mut self, history: &[u32], k: usize, vocab: usize) -> Result<()> {
        self.draft.clear();
        self.kind = 0;
        if k == 0 {
            return Ok(());
        }
        self.drafter.draft(history, k, &mut self.draft)?;
        self.kind = self.drafter.kind().min(KINDS - 1);
        self.draft.truncate(k);
        let valid = self.draft.iter().take_while(|&&t| (t as usize) < vocab).count();
        self.draft.truncate(valid);
        Ok(())
    }

    /// Cuts the draft after its first token that `ends` the generation (an end-of-sequence
    /// token): nothing drafted after it could be emitted, and verifying it would only add rows —
    /// prompt lookup copies the chat template's turn markers after an end it quotes.
    pub fn end_at(&mut self, ends: impl Fn(u32) -> bool) {
        if let Some(i) = self.draft.iter().position(|&t| ends(t)) {
            self.draft.truncate(i + 1);
        }
    }

    /// Keeps the first `k` tokens of the proposed draft (all of it, when shorter): the draft
    /// [`Speculation::drafted`] gives; none makes this step a plain one.
    pub fn keep(&mut self, k: usize) {
        self.draft.truncate(k);
        if self.draft.is_empty() {
            self.since_draft += 1;
        } else {
            self.since_draft = 0;
            self.drafts += 1;
        }
    }

    /// Whether the last step drafted: a draft model then has only that step's tokens to catch
    /// up on before drafting again.
    pub fn drafted_last_step(&self) -> bool {
        self.drafts > 0 && self.since_draft == 0
    }

    /// The measured rate at which drafted tokens of the last proposed draft's kind are kept
    /// (each given the ones before it): kept tokens over kept tokens and refusals, both decayed
    /// per verdict and starting from one of each. The prior decays with the data: added to the decayed counts instead (Laplace's
    /// +1/+2), it capped the rate at 11/12 where each pass drafts one token — at which long drafts
    /// never looked worth trying, so an edit whose drafts all held kept drafting one token.
    pub fn acceptance(&self) -> f64 {
        self.evidence().rate()
    }

    /// The evidence behind [`Speculation::acceptance`] for the kind of the last proposed draft,
    /// from which a batch's planner weighs each drafted token ([`Acceptance::chances`]).
    pub fn evidence(&self) -> Acceptance {
        self.acceptance[self.kind]
    }

    /// The most tokens a draft may hold.
    pub fn k_max(&self) -> usize {
        self.k_max
    }

    /// Whether the drafter costs a forward pass per token ([`Drafter::costly`]).
    pub fn costly(&self) -> bool {
        self.drafter.costly()
    }

    /// Whether enough plain steps have passed since the last draft that one should be tried
    /// (drafts are probed now and then to notice them becoming good).
    pub fn probe_due(&self) -> bool {
        self.probe_due_in(1)
    }

    /// [`Speculation::probe_due`] for a sequence decoding in a batch of `batch`: probes come
    /// `batch` times less often per sequence, so a batch probes as often as one sequence does
    /// (a probe is a row every sequence of the step waits for).
    pub fn probe_due_in(&self, batch: usize) -> bool {
        self.since_draft + 1 >= PROBE_EVERY.saturating_mul(batch.max(1))
    }

    /// How many tokens to draft, at most `limit`: the `k` that maximizes the expected tokens per
    /// second, `E(k) / t(k + 1)`, where the first `j` drafted tokens are all kept with chance
    /// `cⱼ` ([`Acceptance::chances`]: `E(k) = 1 + c₁ + … + c_k`) and `t(r)` is the time of a pass of
    /// `r` rows, measured or read off the measured ones (`PassTimes::assumed`); `k + 1` is at
    /// most twice the largest pass measured, so long drafts are reached by doubling, each pass
    /// measured before a longer one is weighed.
    pub fn choose(&self, limit: usize) -> usize {
        let limit = limit.min(self.k_max);
        if self.fixed || limit == 0 {
            return limit;
        }
        let limit = limit.min(self.passes.reach() - 1);
        let mut best = (0, 1.0 / self.passes.assumed(1).max(SECONDS_FLOOR));
        let mut expected = 1.0;
        for (k, chance) in (1..=limit).zip(self.acceptance[self.kind].chances()) {
            expected += chance;
            let rate = expected / self.passes.assumed(k + 1).max(SECONDS_FLOOR);
            if rate > best.1 {
                best = (k, rate);
            }
        }
        if best.0 == 0 && self.probe_due() {
            return 1;
        }
        best.0
    }

    /// The tokens the last [`Speculation::draft`] gave.
    pub fn drafted(&self) -> &[u32] {
        &self.draft
    }

    /// Notes a pass of the target over `rows` rows that took `secs` (drafting included).
    pub fn record_pass(&mut self, rows: usize, secs: f64) {
        self.stats.passes += 1;
        self.passes.record(rows, secs);
    }

    /// Notes that `accepted` of `drafted` tokens were kept.
    pub fn record_verdict(&mut self, drafted: usize, accepted: usize) {
        self.stats.verify_passes += 1;
        self.stats.drafted += drafted;
        self.stats.accepted += accepted;
        self.acceptance[self.kind].record(drafted, accepted);
    }
}

/// Which drafted tokens the target keeps, and the token that follows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Drafted tokens kept, from the first.
    pub accepted: usize,
    /// The target's token after them.
    pub next: u32,
}

/// Greedy verification: `argmax[i]` is the target's choice after the pass's token `i` (the last
/// emitted token, then the draft); drafted tokens are kept while they equal it.
pub(crate) fn verify_greedy(draft: &[u32], argmax: &[u32]) -> Verdict {
    let accepted = draft.iter().zip(argmax).take_while(|(d, a)| d == a).count();
    Verdict { accepted, next: argmax[accepted] }
}

/// Verification through the sampler: `row(i)` gives the logits after the pass's token `i` (the
/// last emitted token, then the draft), `history` the sequence before the draft. At each position
/// the sampler draws its token as plain decoding would (one draw of its RNG); a drafted token is
/// kept when it is that token, and the first one that is not is replaced by it.
///
/// Both drafters propose single tokens (point distributions: prompt lookup, a greedy draft
/// model), for which the rejection-sampling rule is "keep `d` with probability `p(d)`, else draw
/// from `p` without `d`, renormalised". Drawing `x ~ p` and keeping `d` when `x = d` follows it
/// exactly — and since each emitted token takes one draw, as in plain decoding, the output is
/// the text plain sampling gives with the same seed, whatever was drafted.
pub fn verify_draft(
    sampler: &mut Sampler,
    draft: &[u32],
    mut row: impl FnMut(usize) -> Vec<f32>,
    history: &[u32],
) -> Verdict {
    let mut seen = history.to_vec();
    for (i, &d) in draft.iter().enumerate() {
        let mut logits = row(i);
        let x = sampler.sample(&mut logits, &seen);
        if x != d {
            return Verdict { accepted: i, next: x };
        }
        seen.push(d);
    }
    let mut logits = row(draft.len());
    Verdict { accepted: draft.len(), next: sampler.sample(&mut logits, &seen) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ngram(min: usize, max: usize, history: &[u32], k: usize) -> Vec<u32> {
        let mut out = Vec::new();
        NgramDrafter::new(min, max).unwrap().draft(history, k, &mut out).unwrap();
        out
    }

    #[test]
    fn ngram_drafts_the_continuation_of_the_longest_latest_match() {
        // "1 2 3" occurred at the start, followed by 4 5 6; the suffix is "1 2 3".
        assert_eq!(ngram(1, 3, &[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 3), vec![4, 5, 6]);
        // At most `k`.
        assert_eq!(ngram(1, 3, &[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 2), vec![4, 5]);
        // The most recent of two matches of the same length.
        assert_eq!(ngram(2, 2, &[5, 6, 1, 5, 6, 2, 5, 6], 1), vec![2]);
        // A longer match wins over a more recent shorter one: "4 5 6" → 7, not "6" → 8.
        assert_eq!(ngram(1, 3, &[4, 5, 6, 7, 6, 8, 4, 5, 6], 1), vec![7]);
        // A text ending in two periods continues its period as far as asked, overlapping the
        // suffix; a match one period back that has not repeated stops at the end of the text.
        assert_eq!(ngram(1, 2, &[3, 3, 3], 4), vec![3, 3, 3, 3]);
        assert_eq!(ngram(2, 4, &[1, 2, 1, 2, 1, 2], 5), vec![1, 2, 1, 2, 1]);
        assert_eq!(ngram(2, 4, &[5, 1, 2, 3, 1, 2], 3), vec![3, 1, 2]);
        assert_eq!(ngram(2, 2, &[7, 8, 9, 7, 8], 5), vec![9, 7, 8]);
        assert_eq!(ngram(2, 2, &[7, 8, 9, 7, 8, 9, 7, 8], 5), vec![9, 7, 8, 9, 7]);
        assert_eq!(ngram(2, 2, &[1, 7, 8, 9, 5, 7, 8], 5), vec![9, 5, 7, 8]);
        assert_eq!(ngram(2, 2, &[4, 9, 7, 8, 9, 7, 8], 5), vec![9, 7, 8, 9, 7]);
    }

    #[test]
    fn an_ngram_draft_is_of_the_kind_of_its_match_length() {
        let mut drafter = NgramDrafter::new(1, 3).unwrap();
        let mut out = Vec::new();
        for (history, kind) in
            [(&[1, 2, 3, 4, 9, 1, 2, 3][..], 3), (&[5, 6, 9, 5, 6], 2), (&[7, 1, 7], 1), (&[1, 2], 0)]
        {
            out.clear();
            drafter.draft(history, 4, &mut out).unwrap();
            assert_eq!(drafter.kind(), kind, "{history:?}");
        }
    }

    #[test]
    fn each_kind_of_draft_is_measured_apart() {
        let times = |spec: &mut Speculation| {
            spec.record_pass(1, 0.010);
            spec.record_pass(9, 0.020);
        };
        let lookup = || Speculation::adaptive(Box::new(NgramDrafter::new(1, 4).unwrap()), 8).unwrap();
        let (mut spec, mut fresh) = (lookup(), lookup());
        times(&mut spec);
        times(&mut fresh);
        // A match of one token (7) and one of four (1 2 3 4).
        let (short, long) = ([7, 5, 6, 8, 7], [1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 4]);
        for _ in 0..20 {
            spec.propose(&short, 8, 100).unwrap();
            spec.keep(4);
            spec.record_verdict(4, 0);
        }
        // Refused one-token matches stop their drafts, not the four-token match's, which is
        // chosen at the prior, as in a fresh generation.
        spec.draft(&short, 8, 100).unwrap();
        assert!(spec.drafted().is_empty());
        assert!(spec.acceptance() < 0.1);
        spec.draft(&long, 8, 100).unwrap();
        fresh.draft(&long, 8, 100).unwrap();
        assert_eq!(spec.evidence(), Acceptance::default());
        assert!(!spec.drafted().is_empty());
        assert_eq!(spec.drafted(), fresh.drafted());
    }

    #[test]
    fn ngram_without_a_match_drafts_nothing() {
        assert!(ngram(2, 4, &[1, 2, 3, 4, 5], 4).is_empty());
        assert!(ngram(1, 1, &[1], 4).is_empty());
        assert!(ngram(1, 1, &[], 4).is_empty());
        assert!(ngram(1, 3, &[1, 2, 1], 0).is_empty());
        // Below `min`: a single repeated token does not count as a match of two.
        assert!(ngram(2, 3, &[9, 1, 2, 9], 3).is_empty());
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(NgramDrafter::new(0, 3).is_err());
        assert!(NgramDrafter::new(4, 3).is_err());
        assert!(NgramDrafter::new(1, NgramDrafter::MAX_N + 1).is_err());
        let drafter = || Box::new(NgramDrafter::new(1, 2).unwrap()) as Box<dyn Drafter>;
        assert!(Speculation::adaptive(drafter(), 0).is_err());
        assert!(Speculation::fixed(drafter(), Speculation::K_LIMIT + 1).is_err());
    }

    #[test]
    fn greedy_verification_keeps_the_agreeing_prefix() {
        assert_eq!(verify_greedy(&[4, 5, 6], &[4, 5, 6, 7]), Verdict { accepted: 3, next: 7 });
        assert_eq!(verify_greedy(&[4, 9, 6], &[4, 5, 6, 7]), Verdict { accepted: 1, next: 5 });
        assert_eq!(verify_greedy(&[1], &[2, 3]), Verdict { accepted: 0, next: 2 });
    }

    fn adaptive(k_max: usize) -> Speculation<'static> {
        Speculation::adaptive(Box::new(NgramDrafter::new(1, 2).unwrap()), k_max).unwrap()
    }

    #[test]
    fn the_choice_follows_acceptance_and_pass_times() {
        let mut spec = adaptive(32);
        // Nothing measured: a draft of at most 7 tokens (a pass of `PassTimes::FIRST_REACH` rows).
        assert_eq!(spec.choose(32), 7);
        assert_eq!(spec.choose(3), 3);
        assert_eq!(spec.choose(0), 0);
        // Passes that cost no more with more rows: the draft doubles with the largest measured
        // pass, up to what is allowed.
        spec.record_pass(1, 0.010);
        spec.record_pass(8, 0.010);
        assert_eq!(spec.choose(32), 15);
        assert_eq!(spec.choose(9), 9);
        spec.record_pass(16, 0.010);
        assert_eq!(spec.choose(32), 31);
        spec.record_pass(32, 0.010);
        assert_eq!(spec.choose(32), 32);
        // Passes of 1 and 9 rows measured: the line through them prices the sizes between, none
        // of which is then tried (at a = 0.5, a 6 ms row does not pay).
        let mut spec = adaptive(8);
        spec.record_pass(1, 0.010);
        spec.record_pass(9, 0.058);
        assert_eq!(spec.choose(8), 0);
        let mut spec = adaptive(8);
        spec.record_pass(1, 0.010);
        spec.record_pass(9, 0.012);
        // At the prior (one kept, one refused) the j-th token's chance is 1/(j + 1), not 2⁻ʲ:
        // E(8) = H₉ = 2.83 tokens in 12 ms beats E(4) = H₅ = 2.28 in 11 ms. (With the rate's
        // powers, E(4) = 1.94 in 11 ms would beat E(8) = 2.00 in 12 ms, and a new text would
        // start on short drafts.)
        assert_eq!(spec.choose(8), 8, "prior: E(8) / 12 ms beats E(4) / 11 ms");
        for _ in 0..3 {
            spec.record_verdict(4, 0);
        }
        // Three refusals (0.73 kept, 3.44 refused: chances 17.5 %, 5.9 %, 2.6 %, …), each row
        // 2.5 % of a pass: two tokens.
        assert_eq!(spec.choose(8), 2);
        for _ in 0..20 {
            spec.record_verdict(4, 4);
        }
        assert_eq!(spec.choose(8), 8);
        // Passes of 2+ rows cost twice a plain one, and drafts are always refused: plain steps.
        let mut spec = adaptive(8);
        spec.record_pass(1, 0.010);
        for r in 2..=9 {
            spec.record_pass(r, 0.020);
        }
        for _ in 0..20 {
            spec.record_verdict(4, 0);
        }
        assert_eq!(spec.choose(8), 0);
        // Drafts always kept and passes nearly free: draft all the way.
        for _ in 0..60 {
            spec.record_verdict(4, 4);
        }
        for r in 2..=9 {
            for _ in 0..60 {
                spec.record_pass(r, 0.0105);
            }
        }
        assert_eq!(spec.choose(8), 8);
        // Half kept, each extra row 30 % of a pass: a few tokens, not all.
        let mut spec = adaptive(8);
        spec.record_pass(1, 0.010);
        for r in 2..=9 {
            spec.record_pass(r, 0.010 + 0.003 * (r - 1) as f64);
        }
        for _ in 0..60 {
            spec.record_verdict(2, 1);
        }
        let k = spec.choose(8);
        assert!((1..=3).contains(&k), "chose {k}");
        // Fixed drafting ignores the measurements.
        let fixed = Speculation::fixed(Box::new(NgramDrafter::new(1, 2).unwrap()), 5).unwrap();
        assert_eq!(fixed.choose(8), 5);
        assert_eq!(fixed.choose(2), 2);
    }

    #[test]
    fn a_draft_is_probed_now_and_then_when_drafting_does_not_pay() {
        let mut spec = adaptive(4);
        spec.record_pass(1, 0.010);
        for r in 2..=5 {
            spec.record_pass(r, 0.030);
        }
        for _ in 0..20 {
            spec.record_verdict(4, 0);
        }
        let history = [1, 2, 1, 2, 1];
        let mut drafted = 0;
        for _ in 0..(4 * PROBE_EVERY) {
            spec.draft(&history, 4, 100).unwrap();
            drafted += usize::from(!spec.drafted().is_empty());
            assert!(spec.drafted().len() <= 1);
        }
        assert_eq!(drafted, 4);
    }

    #[test]
    fn a_generation_starts_from_the_prior_acceptance_and_the_measured_times() {
        let mut spec = adaptive(8);
        spec.record_pass(1, 0.010);
        spec.record_pass(9, 0.020);
        for _ in 0..40 {
            spec.record_verdict(8, 0);
        }
        assert!(spec.acceptance() < 0.1);
        spec.start();
        assert_eq!(spec.evidence(), Acceptance::default());
        assert_eq!(spec.pass_seconds()[9], 0.020);
    }

    #[test]
    fn a_draft_ends_with_its_first_end_of_sequence() {
        let mut spec = adaptive(8);
        spec.propose(&[1, 2, 3, 9, 4, 1, 2], 8, 100).unwrap();
        assert_eq!(spec.drafted(), [3, 9, 4, 1, 2]);
        spec.end_at(|t| t == 9);
        assert_eq!(spec.drafted(), [3, 9]);
        spec.end_at(|t| t == 3);
        assert_eq!(spec.drafted(), [3]);
        spec.end_at(|_| false);
        assert_eq!(spec.drafted(), [3]);
    }

    #[test]
    fn a_batch_probes_as_often_as_one_sequence() {
        let mut spec = adaptive(4);
        for step in 1..4 * PROBE_EVERY {
            spec.keep(0);
            assert_eq!(spec.probe_due(), step + 1 >= PROBE_EVERY, "step {step}");
            assert_eq!(spec.probe_due_in(4), step + 1 >= 4 * PROBE_EVERY, "step {step}");
        }
        assert!(spec.probe_due_in(4) && !spec.probe_due_in(5));
        // A draft resets the count; the next step knows the last one drafted.
        assert!(!spec.drafted_last_step());
        spec.propose(&[1, 2, 1, 2, 1], 2, 100).unwrap();
        spec.keep(2);
        assert_eq!(spec.drafted(), [2, 1]);
        assert!(spec.drafted_last_step() && !spec.probe_due());
        spec.keep(0);
        assert!(!spec.drafted_last_step());
    }
}
