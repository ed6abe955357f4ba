//! Speculative-decoding flags of `run`, `chat` and `bench` (`--spec ngram|draft`, `--draft-model`),
//! and the `--stats` words for what it did.

use std::path::PathBuf;

use minerva_generate::{DraftModel, Drafter, NgramDrafter, SpacingClasses, SpecStats, Speculation, Tokenizer};
use minerva_model::Backend;

use crate::error::CliError;
use crate::load::Loaded;

/// `--spec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SpecKind {
    /// Plain decoding: one token per pass.
    #[default]
    None,
    /// Prompt lookup: drafts what followed the latest earlier occurrence of the last few tokens.
    Ngram,
    /// A smaller model of the same vocabulary drafts (--draft-model).
    Draft,
}

/// Speculative decoding: drafted tokens verified by the model in one pass; greedy output is
/// unchanged, sampled output keeps the model's distribution.
#[derive(Debug, Clone, clap::Args)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` drafts from earlier text (prompt lookup), `draft` from
    /// --draft-model; greedy output stays token for token the same.
    #[arg(long, value_enum, default_value_t)]
    pub spec: SpecKind,
    /// Shortest n-gram --spec ngram looks up (the acceptance of each match length is measured
    /// apart, so one-token matches draft only while they hold).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub spec_ngram_min: usize,
    /// Longest n-gram --spec ngram looks up.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub spec_ngram_max: usize,
    /// Most tokens drafted per pass (fewer where the measured acceptance and pass times say they
    /// do not pay; longer drafts are reached by doubling).
    #[arg(long, default_value_t = 32, value_name = "K")]
    pub spec_draft_max: usize,
    /// Always draft --spec-draft-max tokens where the drafter has them (no adaptation; in serve,
    /// in every step of at most --spec-max-batch decoding sequences): for measurements.
    #[arg(long)]
    pub spec_fixed: bool,
    /// The draft model of --spec draft (GGUF or SafeTensors; the same vocabulary as the model);
    /// given alone, it selects --spec draft.
    #[arg(long, value_name = "PATH")]
    pub draft_model: Option<PathBuf>,
}

impl SpecArgs {
    /// The speculation the flags ask for, checked: `None` for plain decoding.
    pub fn kind(&self) -> Result<SpecKind, CliError> {
        match (self.spec, &self.draft_model) {
            (SpecKind::None, Some(_)) | (SpecKind::Draft, Some(_)) => Ok(SpecKind::Draft),
            (SpecKind::Draft, None) => Err(CliError::Usage("--spec draft needs --draft-model PATH".into())),
            (SpecKind::Ngram, Some(_)) => {
                Err(CliError::Usage("--draft-model drafts for --spec draft, not --spec ngram".into()))
            }
            (kind, None) => Ok(kind),
        }
    }

    /// The draft model to load beside the model, if any.
    pub fn draft_path(&self) -> Result<Option<&std::path::Path>, CliError> {
        Ok(if self.kind()? == SpecKind::Draft { self.draft_model.as_deref() } else { None })
    }

    /// The session's speculation for `loaded` (and its draft model, loaded by
    /// [`crate::load::with_model`] from [`SpecArgs::draft_path`]), with a context of `context`;
    /// prompt lookup matches `tokenizer`'s tokens by their text without leading spaces
    /// ([`SpacingClasses`]).
    pub fn speculation<'m, B: Backend>(
        &self,
        loaded: &'m Loaded<B>,
        tokenizer: &Tokenizer,
        context: usize,
    ) -> Result<Option<Speculation<'m>>, CliError> {
        let drafter: Box<dyn Drafter + 'm> = match self.kind()? {
            SpecKind::None => return Ok(None),
            SpecKind::Ngram => Box::new(
                NgramDrafter::new(self.spec_ngram_min, self.spec_ngram_max)
                    .map_err(|e| CliError::Usage(format!("--spec-ngram-min/--spec-ngram-max: {e}")))?
                    .with_spacing_classes(SpacingClasses::new(tokenizer)),
            ),
            SpecKind::Draft => {
                let draft = loaded.draft.as_deref().ok_or_else(|| CliError::Usage("no draft model loaded".into()))?;
                let draft_tok = draft.tokenizer()?;
                minerva_generate::check_same_vocabulary(&loaded.tokenizer()?, &draft_tok)
                    .map_err(|e| CliError::Usage(format!("--draft-model {}: {e}", draft.path.display())))?;
                Box::new(
                    DraftModel::new(&draft.model, context)
                        .map_err(|e| CliError::Generate { path: draft.path.clone(), source: e })?,
                )
            }
        };
        let speculation = if self.spec_fixed {
            Speculation::fixed(drafter, self.spec_draft_max)
        } else {
            Speculation::adaptive(drafter, self.spec_draft_max)
        };
        speculation.map(Some).map_err(|e| CliError::Usage(format!("--spec-draft-max: {e}")))
    }
}

impl SpecArgs {
    /// The server's speculation (`serve --spec ngram`, `serve --draft-model PATH`), checked;
    /// `None` for plain decoding. `max_batch`: `--spec-max-batch`, a bound over the measured
    /// choice of which sequences draft.
    pub fn server_config(&self, max_batch: Option<usize>) -> Result<Option<minerva_server::SpecConfig>, CliError> {
        let drafter = match self.kind()? {
            SpecKind::None => return Ok(None),
            SpecKind::Draft => minerva_server::SpecDrafter::DraftModel,
            SpecKind::Ngram => {
                // The same checks the sequences' drafters will make.
                NgramDrafter::new(self.spec_ngram_min, self.spec_ngram_max)
                    .map_err(|e| CliError::Usage(format!("--spec-ngram-min/--spec-ngram-max: {e}")))?;
                minerva_server::SpecDrafter::Ngram { min: self.spec_ngram_min, max: self.spec_ngram_max }
            }
        };
        if !(1..=Speculation::K_LIMIT).contains(&self.spec_draft_max) {
            return Err(CliError::Usage(format!(
                "--spec-draft-max: draft length {}: need 1 to {} tokens",
                self.spec_draft_max,
                Speculation::K_LIMIT
            )));
        }
        if max_batch == Some(0) {
            return Err(CliError::Usage("--spec-max-batch must be at least 1".into()));
        }
        Ok(Some(minerva_server::SpecConfig {
            drafter,
            draft_max: self.spec_draft_max,
            max_batch: max_batch.unwrap_or(usize::MAX),
            fixed: self.spec_fixed,
        }))
    }
}

/// `--stats` words for what speculation did in a generation of `generated` tokens.
pub fn stats_words(stats: &SpecStats, generated: usize) -> String {
    format!(
        "spec {}: {} of {} drafted kept ({:.0} %), {:.2} tokens per pass ({} passes, {} verifying)",
        stats.drafter,
        stats.accepted,
        stats.drafted,
        100.0 * stats.acceptance(),
        // The prompt's pass gives the first token.
        generated as f64 / (stats.passes + 1) as f64,
        stats.passes + 1,
        stats.verify_passes
    )
}
