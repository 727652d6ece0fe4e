//! `pdgate bench`: command-line flags ([`BenchArgs`]) and [`run`], which loads or generates
//! the workload, replays it and prints the report.

use crate::ceiling::{sim_prompt_tokens, Ceiling};
use crate::chat::{chat_workload, ChatWorkloadConfig};
use crate::client::first_model;
use crate::engine_cache::{fleet_geometry, CacheCounters, FleetReuse};
use crate::engine_metrics::{metrics_url, read_all};
use crate::mooncake::{mooncake_work, MOONCAKE_BLOCK_TOKENS};
use crate::replay::{replay, ReplayConfig};
use crate::report::Report;
use crate::targets::Targets;
use crate::trace::load_mooncake;
use crate::work::{WorkItem, WorkPrompt};
use std::path::PathBuf;

/// Names accepted by `--workload`.
pub const WORKLOADS: &[&str] = &["chat"];

/// Flags of `pdgate bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Base URL of any OpenAI-compatible server. Repeat it (or give a comma list) to send
    /// the requests to several in turn, request i to URL i mod n (router replicas behind a
    /// Service without affinity); the report then counts requests per URL.
    #[arg(
        long = "url",
        value_name = "URL",
        default_value = "http://127.0.0.1:8000",
        value_delimiter = ','
    )]
    pub urls: Vec<String>,
    /// Mooncake JSONL trace to replay (`timestamp` ms, `input_length`, `output_length`,
    /// `hash_ids`); replaces --workload.
    #[arg(long, value_name = "FILE", conflicts_with = "workload")]
    pub trace: Option<PathBuf>,
    /// Built-in workload: `chat` (multi-turn chat over shared system prompts).
    #[arg(long, value_name = "NAME", default_value = "chat")]
    pub workload: String,
    /// Arrival times are divided by this; `0` or `inf` = as fast as --concurrency allows.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speedup)]
    pub speedup: f64,
    /// Replay only the first N requests (in arrival order).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Most requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = parse_concurrency)]
    pub concurrency: usize,
    /// `model` of every request; default: the first id of GET {url}/v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Cap on each request's output length (`max_tokens`), in tokens (at least 1).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: Option<u32>,
    /// Also write the report, with per-request records, as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// No progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// Seed of the built-in workload generators.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Send each request only after the previous one's response head came back, so the
    /// server sees the exact trace order (for order-sensitive baselines such as round-robin).
    #[arg(long)]
    pub ordered: bool,
    /// Extra header on every request, `NAME: VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// An engine's `/metrics` URL (or base URL; `/metrics` is then added), repeatable or a
    /// comma list: read before and after the run, the report gives each engine's and the
    /// fleet's Δ`vllm:prefix_cache_hits_total` / Δ`vllm:prefix_cache_queries_total` (tokens),
    /// and the ceiling takes the engines' `vllm:cache_config_info` geometry.
    #[arg(long = "engine-metrics", value_name = "URL", value_delimiter = ',')]
    pub engine_metrics: Vec<String>,
    /// Block size of the offline ceiling, tokens [default: the engines' `block_size`].
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub ceiling_block_size: Option<u32>,
    /// Capacity of the ceiling's LRU model, blocks, for the whole fleet [default: Σ the
    /// engines' `num_gpu_blocks`].
    #[arg(long, value_name = "BLOCKS")]
    pub ceiling_capacity_blocks: Option<u64>,
    /// Append this run's routing-quality row (under --label) to FILE, with the header when
    /// FILE is new or empty.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Name of this run's row in --summary (e.g. the router and policy).
    #[arg(long, value_name = "NAME", default_value = "run")]
    pub label: String,
    /// Send every prompt as token ids to `/v1/completions`: chat messages become the ids the
    /// simulator computes for them (flattened and tokenized by its rules, see
    /// [`sim_prompt_tokens`]), so the engine sees the same tokens as for the chat request.
    /// For comparing routers whose prefix index keys token ids (a precise index with no
    /// tokenizer in front) with the others on the same prompts.
    #[arg(long)]
    pub token_prompts: bool,
}

fn parse_speedup(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a number >= 0 (use 0 or inf for no pacing)"
        )),
    }
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("`{s}` is not an integer >= 1")),
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!("`{s}` is not `NAME: VALUE`")),
    }
}

/// The workload the flags select: the trace (first `--limit` records), or the built-in
/// workload generated from `--seed` and cut to `--limit` items.
///
/// Errors: an unreadable or malformed trace, or an unknown workload name.
pub fn build_work(args: &BenchArgs) -> anyhow::Result<Vec<WorkItem>> {
    let mut work = if let Some(path) = &args.trace {
        mooncake_work(&load_mooncake(path, args.limit)?, MOONCAKE_BLOCK_TOKENS)
    } else {
        match args.workload.as_str() {
            "chat" => chat_workload(&ChatWorkloadConfig {
                seed: args.seed,
                ..ChatWorkloadConfig::default()
            }),
            other => anyhow::bail!(
                "unknown workload `{other}` (built-in: {})",
                WORKLOADS.join(", ")
            ),
        }
    };
    if let Some(limit) = args.limit {
        work.truncate(limit);
    }
    if args.token_prompts {
        as_token_prompts(&mut work);
    }
    Ok(work)
}

/// Replaces every chat prompt of `work` by the token ids the simulator computes for it
/// ([`sim_prompt_tokens`]); token prompts are kept.
pub fn as_token_prompts(work: &mut [WorkItem]) {
    for item in work.iter_mut() {
        if matches!(item.prompt, WorkPrompt::Chat(_)) {
            item.prompt = WorkPrompt::Tokens(sim_prompt_tokens(item));
        }
    }
}

/// Runs `pdgate bench`: [`execute`], then prints the table on stdout, writes `--json` and
/// appends the `--summary` row when asked.
///
/// Errors: those of [`execute`] or of writing the files; and, after the report is printed, a
/// replay in which no request succeeded.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let report = execute(&args).await?;
    print!("{}", report.render_table());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("writing report {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.summary {
        crate::quality::append_row(path, &args.label, &report)?;
    }
    if report.requests > 0 && report.ok == 0 {
        anyhow::bail!("no request succeeded (errors: {:?})", report.errors);
    }
    Ok(())
}

/// Builds the workload, finds the model, reads the engines' counters (`--engine-metrics`),
/// computes the ceiling, replays, reads the counters again, and returns the report.
///
/// Errors: those of [`build_work`], model discovery, [`replay`]; a bad `--engine-metrics`
/// URL, or an engine that cannot be read before the run (naming it). An engine that cannot
/// be read after the run is reported as unreadable, not an error.
pub async fn execute(args: &BenchArgs) -> anyhow::Result<Report> {
    let work = build_work(args)?;
    let targets = Targets::new(&args.urls)?;
    let client = reqwest::Client::new();
    let model = match &args.model {
        Some(m) => m.clone(),
        None => first_model(&client, targets.for_request(0)).await?,
    };
    let engines = args
        .engine_metrics
        .iter()
        .filter(|u| !u.trim().is_empty())
        .map(|u| metrics_url(u))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut before: Vec<CacheCounters> = Vec::with_capacity(engines.len());
    for (url, reading) in engines.iter().zip(read_all(&client, &engines).await) {
        before.push(reading.map_err(|e| anyhow::anyhow!("before the run: {e}"))?);
        tracing::debug!(%url, "engine counters read before the run");
    }
    let geometry = ceiling_geometry(args, &before);
    let prompts: Vec<Vec<u32>> = match geometry {
        Some(_) => work.iter().map(sim_prompt_tokens).collect(),
        None => Vec::new(),
    };
    if !args.quiet {
        let source = args.trace.as_ref().map_or_else(
            || format!("workload {}", args.workload),
            |p| format!("trace {}", p.display()),
        );
        eprintln!(
            "replaying {} requests ({source}) against {} with model {model}",
            work.len(),
            targets.all().join(", ")
        );
    }
    let cfg = ReplayConfig {
        speedup: args.speedup,
        concurrency: args.concurrency,
        max_output_tokens: args.max_output_tokens,
        progress: !args.quiet,
        ordered: args.ordered,
        headers: args.headers.clone(),
        urls: targets.all().to_vec(),
        ..ReplayConfig::new("", model)
    };
    let mut report = replay(&cfg, work).await?;
    if !engines.is_empty() {
        let after = read_all(&client, &engines).await;
        let readings: Vec<_> = engines
            .into_iter()
            .zip(before)
            .zip(after)
            .map(|((u, b), a)| (u, b, a))
            .collect();
        report.engine_cache = Some(FleetReuse::from_readings(&readings));
    }
    // The ceiling covers the prompts the engines ran: a request that failed (a 400 for a prompt
    // over the engine's limits, a transport error) cached nothing.
    report.ceiling = geometry.map(|(block_size, capacity)| {
        let ran: Vec<Vec<u32>> = (report.records.iter().zip(prompts))
            .filter(|(r, _)| r.ok)
            .map(|(_, p)| p)
            .collect();
        Ceiling::compute(&ran, block_size, capacity)
    });
    Ok(report)
}

/// The ceiling's `(block size, fleet capacity in blocks)` from the flags, else from the
/// engines' readings; `None` (with a note on stderr unless --quiet) when either is unknown
/// or the engines disagree on the block size.
fn ceiling_geometry(args: &BenchArgs, engines: &[CacheCounters]) -> Option<(usize, usize)> {
    let note = |why: &str| {
        if !args.quiet {
            eprintln!("no cache ceiling: {why}");
        }
    };
    let geometry = fleet_geometry(engines).unwrap_or_else(|e| {
        note(&e);
        None
    });
    let block_size = (args.ceiling_block_size.map(|b| b as usize)).or(geometry.map(|g| g.0));
    let capacity = (args.ceiling_capacity_blocks.map(|c| c as usize)).or(geometry.map(|g| g.1));
    match (block_size, capacity) {
        (Some(bs), Some(cap)) => Some((bs, cap)),
        _ => {
            if !engines.is_empty() {
                note("the engines export no vllm:cache_config_info geometry; give --ceiling-block-size and --ceiling-capacity-blocks");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn defaults_and_flags() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (
                a.urls.as_slice(),
                a.workload.as_str(),
                a.speedup,
                a.concurrency,
                a.seed
            ),
            (
                &["http://127.0.0.1:8000".to_string()][..],
                "chat",
                1.0,
                64,
                42
            )
        );
        let a = parse(&[
            "--trace",
            "t.jsonl",
            "--speedup",
            "inf",
            "--limit",
            "5",
            "--concurrency",
            "2",
            "--model",
            "m",
            "--max-output-tokens",
            "16",
            "--json",
            "r.json",
            "--quiet",
            "--header",
            "x-a: 1",
        ])
        .unwrap();
        assert_eq!(a.trace, Some(PathBuf::from("t.jsonl")));
        assert!(a.speedup.is_infinite());
        assert_eq!(
            (a.limit, a.concurrency, a.max_output_tokens),
            (Some(5), 2, Some(16))
        );
        assert_eq!(a.headers, vec![("x-a".to_string(), "1".to_string())]);
        assert!(a.quiet);
    }

    #[test]
    fn several_urls_repeated_or_comma_separated() {
        let a = parse(&["--url", "http://a:1", "--url", "http://b:2,http://c:3"]).unwrap();
        assert_eq!(a.urls, ["http://a:1", "http://b:2", "http://c:3"]);
        let a = parse(&["--url", "http://a:1"]).unwrap();
        assert_eq!(a.urls, ["http://a:1"]);
    }

    #[test]
    fn engine_metrics_ceiling_and_summary_flags() {
        let a = parse(&[]).unwrap();
        assert!(a.engine_metrics.is_empty());
        assert_eq!(
            (a.ceiling_block_size, a.ceiling_capacity_blocks),
            (None, None)
        );
        assert_eq!((a.summary, a.label.as_str()), (None, "run"));
        let a = parse(&[
            "--engine-metrics",
            "http://a:1/metrics,http://b:2",
            "--engine-metrics",
            "http://c:3",
            "--ceiling-block-size",
            "32",
            "--ceiling-capacity-blocks",
            "160",
            "--summary",
            "t.txt",
            "--label",
            "pdgate-precise",
        ])
        .unwrap();
        assert_eq!(
            a.engine_metrics,
            ["http://a:1/metrics", "http://b:2", "http://c:3"]
        );
        assert_eq!(
            (a.ceiling_block_size, a.ceiling_capacity_blocks),
            (Some(32), Some(160))
        );
        assert_eq!(
            (a.summary, a.label.as_str()),
            (Some(PathBuf::from("t.txt")), "pdgate-precise")
        );
        assert!(parse(&["--ceiling-block-size", "0"]).is_err());
    }

    #[test]
    fn token_prompts_turn_chat_into_the_simulator_token_ids() {
        let a = parse(&["--limit", "3"]).unwrap();
        assert!(!a.token_prompts);
        let chat = build_work(&a).unwrap();
        assert!(chat.iter().all(|w| matches!(w.prompt, WorkPrompt::Chat(_))));
        let a = parse(&["--limit", "3", "--token-prompts"]).unwrap();
        let tokens = build_work(&a).unwrap();
        assert_eq!(tokens.len(), 3);
        for (c, t) in chat.iter().zip(&tokens) {
            // Same ids the simulator computes for the chat body; same arrival and length.
            assert_eq!(t.prompt, WorkPrompt::Tokens(sim_prompt_tokens(c)));
            assert_eq!(
                (t.at_ms, t.max_tokens, t.conversation),
                (c.at_ms, c.max_tokens, c.conversation)
            );
            assert_eq!(t.api(), pdgate_api::ApiKind::Completions);
        }
        let WorkPrompt::Tokens(first) = &tokens[0].prompt else {
            unreachable!()
        };
        assert!(
            first.len() > 10,
            "a chat turn has a system prompt: {}",
            first.len()
        );
    }

    #[test]
    fn bad_flags_are_rejected() {
        assert!(parse(&["--speedup", "-2"]).is_err());
        assert!(parse(&["--concurrency", "0"]).is_err());
        assert!(parse(&["--trace", "t", "--workload", "chat"]).is_err());
        assert!(parse(&["--header", "nocolon"]).is_err());
    }

    #[test]
    fn build_work_limits_and_names_unknown_workloads() {
        let mut a = parse(&["--limit", "7"]).unwrap();
        assert_eq!(build_work(&a).unwrap().len(), 7);
        a.workload = "nope".into();
        assert_eq!(
            build_work(&a).unwrap_err().to_string(),
            "unknown workload `nope` (built-in: chat)"
        );
    }
}
