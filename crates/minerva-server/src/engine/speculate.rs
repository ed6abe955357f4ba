//! The scheduler's side of speculative decoding (`--spec ngram`, `--draft-model`): before a step,
//! each decoding sequence that may speculate proposes a draft (prompt lookup from its own prompt
//! and output, or its own cache of the draft model), the batch's planner chooses how much of each
//! the step runs, and the drafted tokens run in the step after each sequence's last one; after the
//! step, the drafts are verified against their logits rows (`minerva_generate::verify_draft`:
//! greedy output unchanged, sampled output distributed as the model's), the kept tokens are sent
//! as if decoded one by one, and the sequence's positions past the last kept token are forgotten
//! (the next step writes over them).
//!
//! The planner (`minerva_generate::BatchPlanner`) measures the step's time by its row count and
//! gives extra rows to the drafted tokens likeliest to be kept while they raise the step's
//! expected tokens per second: a lone sequence drafts as far as its acceptance pays for, a full
//! batch whose rows already keep the cores busy drafts nothing.

use std::sync::Arc;
use std::time::Instant;

use minerva_generate::{
    DraftCandidate, DraftModel, Drafter, NgramDrafter, Speculation, Tokenizer, draft_room, verify_draft,
};
use minerva_model::{Backend, Model};

use super::scheduler::{Pick, Scheduler};
use super::sequence::{Finish, Sequence};
use super::{GenerationRequest, SpecConfig, SpecDrafter};
use crate::error::ApiError;

/// The weight of history in the server's draft-model time per token (per draft).
const DRAFT_TIME_DECAY: f64 = 0.9;

/// The draft model the scheduler keeps: the loaded one where the server drafts with it (its
/// vocabulary checked against the model's), none otherwise.
pub(super) fn check_draft<B: Backend>(
    spec: Option<SpecConfig>,
    tokenizer: &Tokenizer,
    draft: Option<(Model<B>, Tokenizer)>,
) -> Result<Option<Arc<Model<B>>>, String> {
    if spec.map(|s| s.drafter) != Some(SpecDrafter::DraftModel) {
        return Ok(None);
    }
    let Some((model, draft_tokenizer)) = draft else {
        return Err("speculative decoding with a draft model, but no draft model was loaded".into());
    };
    minerva_generate::check_same_vocabulary(tokenizer, &draft_tokenizer)
        .map_err(|e| format!("the draft model: {e}"))?;
    Ok(Some(Arc::new(model)))
}

impl<B: Backend> Scheduler<B> {
    /// The speculation of a choice of `request`, where the server speculates and the request
    /// allows it; a draft model's cache holds what the choice can reach. None where the choice
    /// could not draft anyway (a grammar, log-probabilities) or the cache cannot be had.
    pub(super) fn new_speculation(&self, request: &GenerationRequest) -> Option<Speculation<'static>> {
        let config = self.spec.filter(|_| request.speculative)?;
        if request.constraint.is_some() || request.logprobs.is_some() {
            return None;
        }
        // The flags were checked at start-up; a setting refused here only turns speculation off.
        let drafter: Box<dyn Drafter> = match config.drafter {
            SpecDrafter::Ngram { min, max } => {
                let drafter = NgramDrafter::new(min, max).ok()?;
                Box::new(match &self.spacing {
                    Some(classes) => drafter.with_spacing_classes(classes.clone()),
                    None => drafter,
                })
            }
            SpecDrafter::DraftModel => {
                let reach = request.prompt.len().saturating_add(request.max_tokens).min(self.ctx_size);
                Box::new(DraftModel::shared(self.draft.clone()?, reach.max(1)).ok()?)
            }
        };
        let speculation = if config.fixed {
            Speculation::fixed(drafter, config.draft_max)
        } else {
            Speculation::adaptive(drafter, config.draft_max)
        };
        speculation.ok()
    }

    /// Drafts for the decoding sequences that may speculate, when the step holds at most
    /// `max_batch` decoding sequences, as long as the planner chooses: each sequence's drafted
    /// tokens go at the end of its `tokens`, so the plan runs them after its last token. Whether
    /// any sequence drafted.
    pub(super) fn draft_all(&mut self) -> bool {
        let Some(config) = self.spec else { return false };
        let decoding = self.running.iter().filter(|s| s.prefilled()).count();
        if decoding == 0 || decoding > config.max_batch {
            return false;
        }
        let (model, vocab, tokenizer) = (&self.model.config, self.model.config.vocab, &self.tokenizer);
        // Each candidate's proposal: cheap drafters draft their longest now, and are cut to the
        // planned length; a draft model drafts once its length is chosen.
        let mut candidates = Vec::new();
        let mut who = Vec::new();
        for (i, seq) in self.running.iter_mut().enumerate() {
            // One token to run (not a prompt being rebuilt), no grammar to mask the rows, no
            // log-probabilities to report for them.
            if !seq.prefilled() || seq.tokens.len() != seq.fed + 1 || seq.constraint.is_some() || seq.logprobs.is_some()
            {
                continue;
            }
            let room = draft_room(model, seq.fed, self.ctx_size);
            let wanted = seq.max_tokens.saturating_sub(seq.generated() + 1);
            let Some(spec) = seq.speculation.as_mut() else { continue };
            let limit = room.min(wanted).min(spec.k_max());
            let max = if spec.costly() {
                limit
            } else if spec.propose(&seq.tokens, limit, vocab).is_ok() {
                spec.end_at(|t| tokenizer.ends_generation(t, seq.output.is_harmony()));
                spec.drafted().len()
            } else {
                continue;
            };
            candidates.push(DraftCandidate {
                acceptance: spec.evidence(),
                max,
                // Every sequence drafts with the same draft model: the server's measurement.
                draft_seconds: if spec.costly() { self.draft_token_secs } else { 0.0 },
                // About one probe per step in all, whatever the batch: each costs a row. A
                // draft model is not probed: its probe would first run every token since its
                // last draft (a whole prompt, at first).
                probe: !spec.costly() && spec.probe_due_in(decoding),
            });
            who.push(i);
        }
        let lengths = if config.fixed {
            candidates.iter().map(|c| c.max).collect()
        } else {
            self.planner.plan(decoding, &candidates)
        };
        let mut drafted = false;
        for (&i, &k) in who.iter().zip(&lengths) {
            let seq = &mut self.running[i];
            let Some(spec) = seq.speculation.as_mut() else { continue };
            if spec.costly() && k > 0 {
                let steady = spec.drafted_last_step();
                let started = Instant::now();
                // A draft model that fails drafts nothing this step; the sequence decodes plainly.
                if spec.propose(&seq.tokens, k, vocab).is_err() {
                    spec.keep(0);
                    continue;
                }
                spec.end_at(|t| tokenizer.ends_generation(t, seq.output.is_harmony()));
                // Per drafted token, in steady drafting (the draft model had only the last step's
                // tokens to catch up on): what drafting adds to a step. A first draft also runs the
                // prompt, a cost the target's prefill has too.
                if steady {
                    let per_token = started.elapsed().as_secs_f64() / spec.drafted().len().max(1) as f64;
                    self.draft_token_secs = if self.draft_token_secs > 0.0 {
                        DRAFT_TIME_DECAY * self.draft_token_secs + (1.0 - DRAFT_TIME_DECAY) * per_token
                    } else {
                        per_token
                    };
                }
            }
            spec.keep(k);
            seq.tokens.extend_from_slice(spec.drafted());
            seq.drafted = spec.drafted().len();
            drafted |= seq.drafted > 0;
        }
        drafted
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
