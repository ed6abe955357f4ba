//! `minerva serve`: the OpenAI-compatible server (crate `minerva-server`) on one model.

use std::sync::Arc;
use std::time::Duration;

use minerva_model::Backend;
use minerva_server::{
    EngineConfig, EngineHandle, EngineRunner, Metrics, Served, ServerConfig, SpecConfig, SpecDrafter,
};

use crate::error::CliError;
use crate::load::{self, Loaded, ModelArgs, ModelTask};

/// `serve` flags beyond the model's.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The model name clients use (default: the file or directory name without extension).
    #[arg(long)]
    pub alias: Option<String>,
    /// Address to listen on (127.0.0.1: this machine only).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the startup line says which).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences decoded together (KV-cache slots).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// Context of each sequence (default: the model's, capped so that one sequence fits the KV cache).
    #[arg(long, short = 'c')]
    pub ctx_size: Option<usize>,
    /// Memory of the KV cache's block pool, shared by all sequences as they grow (`2GiB`, `512MiB`,
    /// `1.5G`, bytes; default: enough for every slot at full context, within half the free memory).
    #[arg(long, value_name = "SIZE", value_parser = crate::load::parse_size)]
    pub kv_memory: Option<u64>,
    /// Most tokens in one forward step (long prompts are prefilled in chunks of this size).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_tokens: u32,
    /// Most prompt tokens in a step that also decodes running sequences (bounds their inter-token
    /// latency while a new prompt is prefilled).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill_chunk: u32,
    /// Most requests waiting for a slot; more are answered 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1/* (also from MINERVA_API_KEY).
    #[arg(long, env = "MINERVA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Seconds a connection may take to send a request's headers, idle keep-alive time included;
    /// then it is closed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,
    /// Most requests being read, parsed and prompted at once (default: twice --parallel plus
    /// --max-queue); more are answered 503 with Retry-After.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_inflight: Option<u32>,
    /// How /v1/embeddings pools each input's hidden states: mean, cls or last (default: the
    /// model's GGUF pooling_type, else mean).
    #[arg(long, value_parser = parse_pooling)]
    pub pooling: Option<minerva_model::Pooling>,
    /// Do not serve the chat page at `/`.
    #[arg(long)]
    pub no_ui: bool,
    /// Responses of /v1/responses kept in memory for `previous_response_id` and
    /// `GET /v1/responses/ID` (the most recently used; 0: none; lost on restart).
    #[arg(long, default_value_t = 256)]
    pub responses_store: usize,
    /// Leave /metrics open when --api-key is set (for Prometheus scrapers).
    #[arg(long)]
    pub metrics_public: bool,
    /// Allow browser requests from this origin (repeatable; `*` for any).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Longest a request may run, in seconds; then it ends with finish_reason "length".
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Seconds running requests get to finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
    /// How the model writes tool calls, over what its chat template shows: hermes
    /// (`<tool_call>`, Qwen), llama3 (a JSON answer), mistral (`[TOOL_CALLS]`) or generic (a JSON
    /// object that calls or replies; for templates that know no tools).
    #[arg(long, value_parser = parse_tool_format)]
    pub tool_format: Option<minerva_generate::ToolFormat>,
    #[command(flatten)]
    pub spec: crate::spec::SpecArgs,
    /// With --spec: draft only while a step decodes at most this many sequences. Without it,
    /// the server chooses each step's drafts from the step times it measures (docs/speculative.md).
    #[arg(long, value_name = "N")]
    pub spec_max_batch: Option<usize>,
}

fn parse_tool_format(s: &str) -> Result<minerva_generate::ToolFormat, String> {
    s.parse().map_err(|e: minerva_generate::GenerateError| e.to_string().trim_start_matches("grammar: ").to_string())
}

fn parse_pooling(s: &str) -> Result<minerva_model::Pooling, String> {
    s.parse().map_err(|e: minerva_model::embedding::UnknownPooling| e.to_string())
}

/// Half the memory available now, for the KV cache when the context size is automatic (4 GiB
/// where the system does not say).
fn kv_budget() -> u64 {
    minerva_model::cpu::available_memory().map_or(4 << 30, |bytes| bytes / 2)
}

/// Resolves SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(t) => t,
            Err(_) => {
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Runs the command.
pub fn run(model: &ModelArgs, args: &ServeArgs) -> Result<(), CliError> {
    let path = load::model_path(model)?;
    let name = args.alias.clone().unwrap_or_else(|| {
        let stem = if path.is_dir() { path.file_name() } else { path.file_stem() };
        stem.map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    });
    let engine_config = EngineConfig {
        parallel: usize::from(args.parallel),
        ctx_size: args.ctx_size,
        batch_tokens: args.batch_tokens as usize,
        prefill_chunk: args.prefill_chunk as usize,
        max_queue: args.max_queue,
        kv_budget_bytes: kv_budget(),
        kv_memory: args.kv_memory,
        tool_format: args.tool_format,
        speculation: args.spec.server_config(args.spec_max_batch)?,
    };
    let config = ServerConfig {
        model_name: name.clone(),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        cors_origins: args.cors_origins.clone(),
        metrics_public: args.metrics_public,
        header_timeout: Duration::from_secs(args.header_timeout),
        max_inflight: args.max_inflight.map_or(2 * (usize::from(args.parallel) + args.max_queue), |n| n as usize),
        request_timeout: Duration::from_secs(args.timeout),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        responses_store: args.responses_store,
        pooling: args.pooling,
        ui: !args.no_ui,
        ..ServerConfig::default()
    };
    config.check().map_err(CliError::Usage)?;
    let engine_spec = engine_config.speculation;
    let metrics = Arc::new(Metrics::new());
    let (engine, runner) = EngineHandle::new(engine_config, metrics.clone());
    let model_args = ModelArgs { path: Some(path.clone()), model: None, hf: None, ..model.clone() };
    let draft_path = args.spec.draft_path()?.map(std::path::Path::to_path_buf);
    let draft_load = draft_path.clone();
    // The engine thread loads the model (on the backend --device names) and then serves; the
    // HTTP side answers /health with 503 meanwhile.
    let loader_handle = engine.clone();
    let device = Arc::new(std::sync::OnceLock::new());
    let cpu = format!("cpu ({} threads)", model.threads.unwrap_or_else(minerva_quant::pool::current_threads));
    let task = ServeTask { runner, device: device.clone(), cpu };
    std::thread::Builder::new()
        .name("minerva-engine".into())
        .spawn(move || {
            if let Err(e) = load::with_models(&model_args, draft_load.as_deref(), task) {
                loader_handle.fail(e.to_string());
            }
        })
        .map_err(|e| CliError::Usage(format!("cannot start the engine thread: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .map_err(|e| CliError::Usage(format!("cannot listen on {}:{}: {e}", args.host, args.port)))?;
        let address = listener.local_addr().map_err(|e| CliError::Usage(e.to_string()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = stopped => {}
            }
        };
        let server = tokio::spawn(minerva_server::serve(listener, engine.clone(), metrics, config, shutdown));
        loop {
            match engine.info() {
                Some(Ok(info)) => {
                    let device = device.get().map_or("?", String::as_str);
                    let spec = engine_spec.as_ref().map_or_else(String::new, |c| spec_words(c, draft_path.as_deref()));
                    eprintln!(
                        "minerva serve: model {name} ({}, {}) on {device} | {} slots × {} tokens of context ({}) | {}{spec} | http://{address}",
                        info.arch,
                        path.display(),
                        info.slots,
                        info.ctx_size,
                        info.ctx_note,
                        info.kv_note,
                    );
                    break;
                }
                Some(Err(message)) => {
                    let _ = stop.send(());
                    let _ = server.await;
                    return Err(CliError::Usage(message));
                }
                None if !engine.is_alive() => {
                    let _ = stop.send(());
                    let _ = server.await;
                    return Err(CliError::Usage("the engine thread stopped while loading the model".into()));
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        // A server whose engine has died can answer nothing: it stops (with /health at 503
        // meanwhile) and exits non-zero, so a supervisor restarts it.
        let mut server = server;
        loop {
            tokio::select! {
                done = &mut server => {
                    return match done {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(CliError::Usage(format!("server: {e}"))),
                        Err(e) => Err(CliError::Usage(format!("server: {e}"))),
                    };
                }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if !engine.is_alive() {
                        let _ = stop.send(());
                        let _ = server.await;
                        return Err(CliError::Usage("the engine thread stopped; the server exits".into()));
                    }
                }
            }
        }
    })
}

/// Runs the engine on the loaded model (on the engine thread).
struct ServeTask {
    runner: EngineRunner,
    /// Filled with where the model runs, for the startup line.
    device: Arc<std::sync::OnceLock<String>>,
    /// The CPU's description (`cpu (N threads)`).
    cpu: String,
}

impl ModelTask for ServeTask {
    type Output = ();

    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<(), CliError> {
        let tokenizer = loaded.tokenizer()?;
        let draft = match loaded.draft {
            Some(d) => {
                let draft_tokenizer = d.tokenizer()?;
                Some((d.model, draft_tokenizer))
            }
            None => None,
        };
        let device = loaded.device.as_ref().map_or(self.cpu, |adapter| format!("wgpu ({adapter})"));
        let device = device + &repack_words(loaded.model.backend.repacked(), loaded.model.backend.repack_declined());
        let _ = self.device.set(device);
        self.runner.run_served(move || Ok(Served { model: loaded.model, tokenizer, draft }));
        Ok(())
    }
}

/// The startup line's words for the matrices repacked and those the repacking memory budget left
/// in place (none: nothing).
fn repack_words((repacked, bytes): (usize, usize), (declined, declined_bytes): (usize, usize)) -> String {
    let mib = |bytes: usize| bytes as f64 / (1 << 20) as f64;
    let mut words = String::new();
    if repacked > 0 {
        words += &format!(", {repacked} matrices repacked ({:.1} MiB)", mib(bytes));
    }
    if declined > 0 {
        words += &format!(", {declined} left in place for memory ({:.1} MiB)", mib(declined_bytes));
    }
    words
}

/// The startup line's words for the server's speculation.
fn spec_words(config: &SpecConfig, draft: Option<&std::path::Path>) -> String {
    let drafter = match (config.drafter, draft) {
        (SpecDrafter::Ngram { min, max }, _) => format!("n-gram {min}-{max}"),
        (SpecDrafter::DraftModel, Some(path)) => format!("draft model {}", path.display()),
        (SpecDrafter::DraftModel, None) => "draft model".into(),
    };
    let bound = if config.max_batch == usize::MAX {
        "batches chosen by measured step times".to_string()
    } else {
        format!("batches of up to {} sequences", config.max_batch)
    };
    format!(" | speculative: {drafter}, up to {} drafted, {bound}", config.draft_max)
}
