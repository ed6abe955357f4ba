//! Minerva's generation layer.
//!
//! * [`harmony`] — OpenAI's Harmony chat format (GPT-OSS): render system / developer / user /
//!   assistant / tool messages with channels into the prompt text, and split a generated
//!   completion into its messages (`analysis`, `commentary`, `final`). Checked against strings
//!   PyPI `openai-harmony` produces (`fixtures/harmony`).

pub mod harmony;
