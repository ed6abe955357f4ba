//! The scheduler's side of speculative decoding (`--spec ngram`): before a step, each decoding
//! sequence that may speculate drafts from its own prompt and output (prompt lookup) and its
//! drafted tokens run in the step after its last one; after the step, the drafts are verified
//! against their logits rows (`minerva_generate::verify_draft`: greedy output unchanged, sampled
//! output distributed as the model's), the kept tokens are sent as if decoded one by one, and the
//! sequence's positions past the last kept token are forgotten (the next step writes over them).
//!
//! Drafts are made only while a step holds at most [`SpecConfig::max_batch`] decoding sequences:
//! with more, the rows a step already runs use what the extra rows would have had.

use minerva_generate::{NgramDrafter, Speculation, draft_room, verify_draft};
use minerva_model::Backend;

use super::SpecConfig;
use super::scheduler::{Pick, Scheduler};
use super::sequence::{Finish, Sequence};
use crate::error::ApiError;

/// What [`Scheduler::draft_all`] did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Drafting {
    /// The step is small enough to speculate: its pass times are measured for the drafters.
    pub(super) eligible: bool,
    /// Some sequence drafted tokens: the step's logits are read back for every row it verifies.
    pub(super) drafted: bool,
}

/// The speculation of a new sequence, where the server speculates and its request allows it.
pub(super) fn new_speculation(config: Option<SpecConfig>, allowed: bool) -> Option<Speculation<'static>> {
    let config = config.filter(|_| allowed)?;
    // The flags were checked at start-up; a setting refused here only turns speculation off.
    let drafter = NgramDrafter::new(config.ngram_min, config.ngram_max).ok()?;
    Speculation::adaptive(Box::new(drafter), config.draft_max).ok()
}

impl<B: Backend> Scheduler<B> {
    /// Drafts for the decoding sequences that may speculate, when the step holds at most
    /// `max_batch` decoding sequences: each sequence's drafted tokens go at the end of its
    /// `tokens`, so the plan runs them after its last token.
    pub(super) fn draft_all(&mut self) -> Drafting {
        let Some(config) = self.spec else { return Drafting::default() };
        let decoding = self.running.iter().filter(|s| s.prefilled()).count();
        if decoding == 0 || decoding > config.max_batch {
            return Drafting::default();
        }
        let mut drafting = Drafting { eligible: true, drafted: false };
        let (model, vocab) = (&self.model.config, self.model.config.vocab);
        for seq in &mut self.running {
            // One token to run (not a prompt being rebuilt), no grammar to mask the rows, no
            // log-probabilities to report for them.
            if !seq.prefilled() || seq.tokens.len() != seq.fed + 1 || seq.constraint.is_some() || seq.logprobs.is_some()
            {
                continue;
            }
            let room = draft_room(model, seq.fed, self.ctx_size);
            let wanted = seq.max_tokens.saturating_sub(seq.generated() + 1);
            let Some(spec) = seq.speculation.as_mut() else { continue };
            if spec.draft(&seq.tokens, room.min(wanted), vocab).is_err() {
                continue;
            }
            seq.tokens.extend_from_slice(spec.drafted());
            seq.drafted = spec.drafted().len();
            drafting.drafted |= seq.drafted > 0;
        }
        drafting
    }

    /// Verifies the draft of the sequence at `i` against its logits `rows` (after its last token,
    /// then after each drafted one), sends the kept tokens and the model's next one through the
    /// usual path (stop strings, EOS, limits: it may end on any of them), and forgets the
    /// positions past the last kept token.
    pub(super) fn verify_and_send(
        &mut self,
        i: usize,
        rows: &mut [Pick<'_>],
        finished: &mut Vec<(usize, Finish)>,
    ) -> Result<(), ApiError> {
        let seq = &mut self.running[i];
        let k = seq.drafted;
        let draft = undraft(seq);
        let mut logits = Vec::with_capacity(rows.len());
        for row in rows.iter_mut() {
            match row {
                Pick::Logits(l) => logits.push(&**l),
                Pick::Token(_) => return Err(ApiError::internal("a drafted sequence's rows were drawn on the device")),
            }
        }
        let verdict = verify_draft(&mut seq.sampler, &draft, |j| logits[j].to_vec(), &seq.tokens);
        // The step ran the last token and the k drafted ones; the cache is valid up to the kept.
        seq.fed -= k - verdict.accepted;
        if let Some(spec) = seq.speculation.as_mut() {
            spec.record_verdict(k, verdict.accepted);
        }
        self.shared.metrics.spec_drafted.inc_by(k as u64);
        self.shared.metrics.spec_accepted.inc_by(verdict.accepted as u64);
        for token in draft[..verdict.accepted].iter().copied().chain([verdict.next]) {
            let before = finished.len();
            self.sample_and_send(i, Pick::Token(token), finished)?;
            if finished.len() > before {
                break;
            }
        }
        Ok(())
    }
}

/// Takes `seq`'s drafted tokens off its `tokens` and returns them.
pub(super) fn undraft(seq: &mut Sequence) -> Vec<u32> {
    let draft = seq.tokens.split_off(seq.tokens.len() - seq.drafted);
    seq.drafted = 0;
    draft
}
