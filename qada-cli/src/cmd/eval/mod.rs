//! `qada eval`: quality against sparsity and K/V bytes on a real model, over RULER-style
//! tasks, the passkey and next-token fidelity.
//!
//! Tasks (`qada_eval::tasks`), each prompt prefilled once densely and run under every
//! configuration from the checkpoint after prefill:
//! - **passkey**: a 5-digit pass key hidden at a depth of real corpus text;
//! - the **RULER** tasks `niah-single`, `niah-multikey`, `niah-multivalue`, `niah-multiquery`,
//!   `vt`, `cwe`, `fwe`, generated with fixed seeds from the evaluation half of the corpus,
//!   scored as RULER does (the share of expected strings in the answer);
//! - **fidelity**: held-out text, dense prefill, then teacher-forced steps under each
//!   configuration against dense: NLL, top-1 agreement, KL(dense || sparse).
//!
//! Dense runs first on every (task, length); other methods are compared only where dense
//! reaches 0.5. Every (prompt, configuration) is appended to `records.jsonl` as it finishes
//! (`--resume` skips those already there); the rows, tables and plots are rewritten after
//! each (task, length). The pieces: [`configs`] (what is compared), [`sweep`] (running it),
//! [`records`] (the log), [`rows`] (records summed), [`report`] (files and tables).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use qada_core::{StaticTable, Tau};
use qada_eval::{PasskeyTask, RulerPrompts};
use qada_kv::WindowConfig;
use qada_model::ActPrecision;
use qada_model::Model;
use qada_stats::MomentTable;
use serde_json::json;

use super::calibration::{corpus_prompts, moment_table, static_table};
use crate::common::{fail, load_model, CacheArgs, CliResult, ModelArgs};
use crate::corpus::{Corpus, Part};

pub(crate) mod configs;
mod merge;
mod progress;
pub(crate) mod records;
mod report;
pub(crate) mod rows;
mod shard;
pub(crate) mod sweep;
mod times;

use configs::{configs, parse_groups, parse_list, parse_methods, parse_reuses, with_reuse, Config};
use records::{read_records, Record, RecordLog};
use shard::{Shard, ShardFile};
use sweep::{EvalTask, Sweep, FIDELITY_STEPS, FIDELITY_TEXTS};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Folder of corpus speeches (default: the setup script's).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Tasks, comma-separated: passkey, niah-single, niah-multikey, niah-multivalue,
    /// niah-multiquery, vt, cwe, fwe, fidelity; `ruler` for its seven, `all` for every one.
    #[arg(long, default_value = "all")]
    task: String,
    /// Prompt lengths in tokens, comma-separated (default: 1024 doubling to 16384, within the
    /// model's context; --quick: 1024).
    #[arg(long)]
    lengths: Option<String>,
    /// Prompts per task and length (default 4; --quick 1). Needles go at depths spread over
    /// [0.1, 0.9].
    #[arg(long, alias = "seeds")]
    samples: Option<usize>,
    /// A small sweep for tests (under 2 minutes on SmolLM2 here).
    #[arg(long)]
    quick: bool,
    /// Methods, comma-separated, among dense, dense-int8, window, oracle, approx-current,
    /// approx-calibration, static, bound, mixture, hybrid, pages, certified, quest,
    /// pages-oracle, channels, channels-ungated and channels-union (dense always runs;
    /// dense-int8 decodes densely with int8 activations, generate's default, from the same
    /// checkpoint: the fast path's own drift beside the criteria's; bound onward over --taus
    /// with pages of --page keys, 4 clusters, margin of 1 nat and --channels channels; pages,
    /// certified, pages-oracle and channels select pages of the bulk per KV group behind
    /// QAdA's gate (pages-oracle behind the oracle's, channels-ungated behind none;
    /// channels-union's heads each compute over their group's union of pages); quest reads
    /// 512, 1024, 2048 and 4096 tokens of pages per head, its parameter).
    #[arg(
        long,
        default_value = "dense,window,oracle,approx-current,approx-calibration,static"
    )]
    methods: String,
    /// Thresholds tau of the oracle and QAdA, comma-separated.
    #[arg(long)]
    taus: Option<String>,
    /// channels, channels-ungated, channels-union: key channels every bulk key is scored with
    /// (those of largest |q_j| (max k_j - min k_j) over the group's long heads).
    #[arg(long, default_value_t = qada_core::DEFAULT_CHANNELS)]
    channels: usize,
    /// Bulk keys per page of bound, hybrid and the page selections (pages, certified, quest,
    /// pages-oracle and the channels methods), at most the shortest length; --resume refuses
    /// another page than its records were made with (run.json).
    #[arg(long, default_value_t = qada_core::DEFAULT_SELECT_PAGE)]
    page: usize,
    /// Group decisions, comma-separated, among head (each query head alone, the paper), all
    /// (a GQA group is local only when all its heads are) and mass (one decision per group
    /// from its summed masses); every adaptive method runs once per mode, named `METHOD@all`
    /// and `METHOD@mass` for the last two.
    #[arg(long, default_value = "head")]
    groups: String,
    /// Page selections: also run each with its page choices reused, per comma-separated
    /// entry `STEPS:COSINE` or `STEPS:COSINE:DRIFT` (as --reuse-steps, --reuse-cosine and
    /// --reuse-drift of generate and bench: a group reads its chosen pages again for up to
    /// STEPS further steps while each long head's query keeps a cosine of at least COSINE
    /// and drifts by at most DRIFT nats); named `METHOD+reuseSTEPScCOSINE` (`dDRIFT` added).
    #[arg(long)]
    reuse: Option<String>,
    /// Static heads' alphas, comma-separated.
    #[arg(long)]
    alphas: Option<String>,
    /// Calibration moment table (default: made here from random words of the calibration
    /// part, saved in --out-dir).
    #[arg(long)]
    moments_table: Option<PathBuf>,
    /// Static table (default: made here from calibration prompts at tau_static 0.6, saved in
    /// --out-dir).
    #[arg(long)]
    static_table: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
    /// Folder for records, CSV, JSON, PNG and the summary.
    #[arg(long, default_value = "eval-out")]
    out_dir: PathBuf,
    /// Continue the run in --out-dir: keep its records and skip every (prompt, method) done.
    #[arg(long)]
    resume: bool,
    /// Run every method even where dense is below 0.5.
    #[arg(long)]
    no_gate: bool,
    /// Redraw plots and the summary from --out-dir's records.jsonl; run nothing.
    #[arg(long)]
    replot: bool,
    /// Append the records of the runs in DIR... that --out-dir lacks (those already there are
    /// kept), then redraw; run nothing. The runs must share run.json and calibration tables;
    /// shards (folders of --shard runs) must come from one sweep split once.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with = "replot")]
    merge: Vec<PathBuf>,
    /// Run shard K of N (K from 1 to N): whole (task, length) units, split the same way on
    /// every machine (longest prompts first, each to the shard with the least work). Run each
    /// shard into its own --out-dir, then --merge them. Calibration tables are then given
    /// (--moments-table, --static-table), made once by a run with --tables-only.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Make the calibration tables --methods needs in --out-dir, then stop (the first step of
    /// a sharded sweep).
    #[arg(long, conflicts_with_all = ["replot", "merge", "shard", "resume"])]
    tables_only: bool,
    /// Write the prompts the sweep would run to `prompts.jsonl` in --out-dir (per task, length
    /// and sample: token ids, expected answers, needle and haystack token ranges), then stop:
    /// the exact prompts, to probe (`cargo run --example page_ranking`) or to feed another tool.
    #[arg(long, conflicts_with_all = ["replot", "merge", "shard", "resume", "tables_only"])]
    prompts_only: bool,
    /// Which half of the corpus the prompts come from: evaluation (speeches from 1900 on) or
    /// calibration (before 1900: the prompts `calibrate tau` decides on, to see there what a
    /// method it cannot choose does, such as pages-oracle; tables made here then come from
    /// the same half).
    #[arg(long, value_enum, default_value = "evaluation")]
    part: Part,
}

const FULL_TAUS: &[f64] = &[0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];
const FULL_ALPHAS: &[f64] = &[0.15, 0.35, 0.55, 0.75, 0.95];
const QUICK_TAUS: &[f64] = &[0.6, 0.9];
const QUICK_ALPHAS: &[f64] = &[0.5];

/// Tokens kept free after the longest prompt (answers and fidelity steps).
pub(crate) const ANSWER_ROOM: usize = 512;

/// The default lengths: 1024 doubling to 16384, the last clipped to the context less
/// [`ANSWER_ROOM`].
fn default_lengths(ctx: usize) -> Vec<usize> {
    let top = ctx.saturating_sub(ANSWER_ROOM);
    let mut v = Vec::new();
    let mut l = 1024;
    while l <= 16384 {
        v.push(l.min(top));
        if l >= top {
            break;
        }
        l *= 2;
    }
    v.dedup();
    v
}

/// Refuse a `--page` longer than the shortest prompt of `lengths`: its bulk would never fill
/// one page.
pub(crate) fn check_page(page: usize, lengths: &[usize]) -> CliResult<()> {
    match lengths.iter().min() {
        Some(&shortest) if page > shortest => fail(format!(
            "--page {page}: a page holds at most the shortest prompt's {shortest} keys; use a \
             page of 16 to 128 keys (default 32)"
        )),
        _ => Ok(()),
    }
}

/// What a resumed run (of `eval` or `calibrate tau`) must share with the run it continues.
pub(crate) fn run_identity(
    model: &Model,
    file: &Path,
    cache: &CacheArgs,
    channels: usize,
    page: usize,
) -> serde_json::Value {
    let file = file.file_name().map(|f| f.to_string_lossy().into_owned());
    json!({
        "model": file,
        "kv": cache.kv.name(),
        "sink": cache.window.sink,
        "local": cache.window.local,
        "activations": model.activations().name(),
        "channels": channels,
        "page": page,
        "fidelity_texts": FIDELITY_TEXTS,
    })
}

/// A run identity with the fields added since the first runs filled in as those runs had them:
/// f32 activations, 8 channels, pages of 32 keys.
fn with_defaults(id: &serde_json::Value) -> serde_json::Value {
    let mut id = id.clone();
    if let Some(o) = id.as_object_mut() {
        o.entry("activations").or_insert_with(|| json!("f32"));
        o.entry("channels")
            .or_insert_with(|| json!(qada_core::DEFAULT_CHANNELS));
        o.entry("page")
            .or_insert_with(|| json!(qada_core::DEFAULT_SELECT_PAGE));
        o.entry("fidelity_texts").or_insert_with(|| json!(1));
    }
    id
}

/// Write `id` to `dir/run.json`; on `resume`, first refuse a folder whose run.json differs
/// (naming the flags that differ; `dir_flag` is the command's folder flag).
pub(crate) fn check_identity(
    dir: &Path,
    id: &serde_json::Value,
    resume: bool,
    dir_flag: &str,
) -> CliResult<()> {
    let path = dir.join("run.json");
    let id = &with_defaults(id);
    if resume && path.exists() {
        let old: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        let old = with_defaults(&old);
        if &old != id {
            // a field a run.json lacks is the flag's default
            let plain = |v: &serde_json::Value| match v {
                serde_json::Value::Null => "(default)".to_string(),
                v => v.as_str().map_or(v.to_string(), str::to_string),
            };
            let mut keys: Vec<&String> =
                id.as_object().into_iter().flatten().map(|e| e.0).collect();
            keys.extend(old.as_object().into_iter().flatten().map(|e| e.0));
            keys.sort();
            keys.dedup();
            let differs: Vec<String> = keys
                .into_iter()
                .filter(|k| old.get(k.as_str()) != id.get(k.as_str()))
                .map(|k| match k.as_str() {
                    // not a flag: the way this build draws fidelity's texts
                    "fidelity_texts" => format!(
                        "fidelity's held-out texts drawn as in version {} (this build: {})",
                        plain(&old[k.as_str()]),
                        plain(&id[k.as_str()])
                    ),
                    _ => format!(
                        "--{k} {} (now {})",
                        plain(&old[k.as_str()]),
                        plain(&id[k.as_str()])
                    ),
                })
                .collect();
            return fail(format!(
                "--resume: {} was made with {old}, this run is {id} (differs: {}); use the same \
                 flags as that run, or another {dir_flag}",
                path.display(),
                differs.join(", ")
            ));
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(id)?)?;
    Ok(())
}

/// The calibration tables the methods need (moments for approx-calibration, head labels for
/// static): given, saved by an earlier run in `dir` (with `--resume`), or made here and saved
/// there.
fn tables(
    a: &Args,
    methods: &[&str],
    model: &Model,
    corpus: &Corpus,
    window: WindowConfig,
) -> CliResult<(Option<MomentTable>, Option<StaticTable>)> {
    let sig = model.signature();
    let ctx = model.config().context_length;
    let (moments_len, static_prompts, static_len) = if a.quick {
        (2048.min(ctx), 1, 1024)
    } else {
        (ctx.min(16384), 4, 2048)
    };
    let saved_m = a.out_dir.join("moments.qmom");
    let m = if !methods.contains(&"approx-calibration") {
        None
    } else {
        match table_file(a.moments_table.as_deref(), &saved_m, a, "--moments-table")? {
            Some(p) => Some(
                MomentTable::load(&p, Some(&sig)).map_err(|e| format!("{}: {e}", p.display()))?,
            ),
            None => {
                eprintln!(
                    "calibrating moments: random words from pre-{} speeches, {moments_len} tokens",
                    crate::corpus::SPLIT_YEAR
                );
                let t = moment_table(model, corpus, moments_len, 256, 0)?;
                t.save(&saved_m)?;
                Some(t)
            }
        }
    };
    let saved_s = a.out_dir.join("static.qsta");
    let s = if !methods.contains(&"static") {
        None
    } else {
        match table_file(a.static_table.as_deref(), &saved_s, a, "--static-table")? {
            Some(p) => Some(
                StaticTable::load(&p, Some(&sig)).map_err(|e| format!("{}: {e}", p.display()))?,
            ),
            None => {
                eprintln!(
                "calibrating static heads: {static_prompts} prompts of {static_len} tokens from \
                 pre-{} speeches",
                crate::corpus::SPLIT_YEAR
            );
                let prompts = corpus_prompts(model, corpus, static_prompts, static_len, 0)?;
                let steps = 32.min(static_len / 4);
                let t = static_table(model, &prompts, window, steps, Tau::new(0.6)?)?;
                t.save(&saved_s)?;
                Some(t)
            }
        }
    };
    Ok((m, s))
}

/// Where a calibration table comes from: the file `given` by its flag (its bytes copied to
/// `saved`, beside the records, so that a folder names the tables its records were made
/// with), or `saved` itself from an earlier run (with `--resume`); `None`: make it here, which
/// a shard may not (shards must share their tables byte for byte to be merged).
fn table_file(
    given: Option<&Path>,
    saved: &Path,
    a: &Args,
    flag: &str,
) -> CliResult<Option<PathBuf>> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    if let Some(p) = given {
        let bytes = read(p)?;
        if a.resume && saved.exists() && read(saved)? != bytes {
            return fail(format!(
                "--resume: {} differs from {flag} {}, so the records there were made with \
                 another table; give the same table or use another --out-dir",
                saved.display(),
                p.display()
            ));
        }
        std::fs::write(saved, &bytes).map_err(|e| format!("{}: {e}", saved.display()))?;
        return Ok(Some(p.to_path_buf()));
    }
    if a.resume && saved.exists() {
        return Ok(Some(saved.to_path_buf()));
    }
    if let Some(shard) = a.shard {
        let name = saved.file_name().unwrap_or_default().to_string_lossy();
        return fail(format!(
            "--shard {shard}: every shard must use the same calibration tables; make them once \
             with the same flags and --tables-only --out-dir DIR, then give each shard \
             {flag} DIR/{name}"
        ));
    }
    Ok(None)
}

/// The definition of a sweep that every shard of it shares.
fn sweep_definition(
    tasks: &[EvalTask],
    lengths: &[usize],
    samples: usize,
    cfgs: &[Config],
    gate: bool,
) -> serde_json::Value {
    let names: Vec<String> = cfgs
        .iter()
        .map(|c| {
            format!("{} {}", c.method, records::param_text(c.param))
                .trim_end()
                .to_string()
        })
        .collect();
    json!({
        "tasks": tasks.iter().map(|t| t.name()).collect::<Vec<_>>(),
        "lengths": lengths,
        "samples": samples,
        "configs": names,
        "gate": gate,
    })
}

/// `--merge DIR...`: fold each run into --out-dir, then redraw.
fn merge_all(a: &Args) -> CliResult<()> {
    let said = shard::check_shards(&a.merge)?;
    for from in &a.merge {
        let added = merge::merge_runs(from, &a.out_dir).map_err(|e| {
            format!(
                "merging {} into {}: {e}",
                from.display(),
                a.out_dir.display()
            )
        })?;
        eprintln!("{added} records added from {}", from.display());
    }
    let records = read_records(&a.out_dir.join("records.jsonl"))?;
    println!("{}", report_all(&a.out_dir, &records)?);
    eprintln!("{} records in {}", records.len(), a.out_dir.display());
    for line in said {
        eprintln!("warning: {line}");
    }
    Ok(())
}

/// Rows, tables and plots from every record so far.
fn report_all(dir: &Path, records: &[Record]) -> CliResult<String> {
    let rows = rows::rows(records);
    report::write_outputs(dir, records, &rows)
}

pub fn run(a: Args) -> CliResult<()> {
    let tasks = EvalTask::parse_list(&a.task)?;
    if a.replot {
        let records = read_records(&a.out_dir.join("records.jsonl"))?;
        println!("{}", report_all(&a.out_dir, &records)?);
        return Ok(());
    }
    if !a.merge.is_empty() {
        return merge_all(&a);
    }
    let methods = parse_methods(&a.methods)?;
    let groups = parse_groups(&a.groups)?;
    let (taus, alphas) = (a.taus()?, a.alphas()?);
    let model_path = crate::common::resolve_model(a.model.model.as_deref())?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    let lengths = a.lengths(model.config().context_length)?;
    let samples = a.samples.unwrap_or(if a.quick { 1 } else { 4 });
    if samples == 0 {
        return fail("--samples must be at least 1");
    }
    let corpus = Corpus::load(a.corpus.as_deref())?;
    let window = a.cache.window.window()?;
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", a.out_dir.display()))?;
    if a.prompts_only {
        let sweep = eval_sweep(&a, &model, &corpus, samples, window)?;
        let path = a.out_dir.join("prompts.jsonl");
        let n = sweep.write_prompts(&sweep::units(&tasks, &lengths), &path)?;
        eprintln!("{n} prompts in {}", path.display());
        return Ok(());
    }
    check_page(a.page, &lengths)?;
    let mut id = run_identity(&model, &model_path, &a.cache, a.channels, a.page);
    if a.part == Part::Calibration {
        // runs on the evaluation half (all before this flag) have no such field
        id["part"] = json!("calibration");
    }
    check_identity(&a.out_dir, &id, a.resume, "--out-dir")?;
    let started = std::time::Instant::now();
    let (table, statics) = tables(&a, &methods, &model, &corpus, window)?;
    if a.tables_only {
        say_tables_made(&a, table.is_some(), statics.is_some());
        return Ok(());
    }
    let table = table.map(Arc::new);
    let cfgs = configs(
        &methods,
        &taus,
        &alphas,
        statics.as_ref(),
        &groups,
        a.channels,
        a.page,
    )?;
    let cfgs = with_reuse(cfgs, &parse_reuses(a.reuse.as_deref().unwrap_or(""))?);
    let mut units = sweep::units(&tasks, &lengths);
    let shard_file = match a.shard {
        None => None,
        Some(sh) => {
            units = shard::units_of(&units, sh, |&(_, len)| (len * samples) as u64);
            let sweep = sweep_definition(&tasks, &lengths, samples, &cfgs, !a.no_gate);
            let f = start_shard(&a, sh, &units, sweep)?;
            eprintln!(
                "shard {sh}: {} of the sweep's {} (task, length) units",
                units.len(),
                tasks.len() * lengths.len()
            );
            Some(f)
        }
    };
    let mut log = RecordLog::open(&a.out_dir.join("records.jsonl"), a.resume)?;
    let run = crate::host::run_info(model.activations().name(), a.cache.kv.name());
    log.name_run(run.clone());
    let mut times = times::TimeLog::open(&a.out_dir, a.resume, run)?;
    let sweep = Sweep {
        cfgs: &cfgs,
        table: table.as_ref(),
        ..eval_sweep(&a, &model, &corpus, samples, window)?
    };
    let pb = sweep.progress("eval", &units, &log);
    sweep.run(&units, &mut log, &pb, |log, time| {
        times.push(time)?;
        report_all(&a.out_dir, log.records()).map(|_| ())
    })?;
    let (at, total) = pb.position();
    debug_assert_eq!(at, total, "the progress bar ends at its total");
    pb.finish();
    if let Some(mut f) = shard_file {
        f.finished = true;
        f.write(&a.out_dir)?;
    }
    let summary = report_all(&a.out_dir, log.records())?;
    println!("{summary}");
    eprintln!(
        "{} records in {:.1} s; records.jsonl, times.jsonl, CSV, JSON, PNG and summary.md in {}",
        log.records().len(),
        started.elapsed().as_secs_f64(),
        a.out_dir.display()
    );
    Ok(())
}

/// The sweep `qada eval` runs on `--part` (the evaluation half by default), with no
/// configuration yet (`cfgs` and `table` are the caller's to fill).
fn eval_sweep<'a>(
    a: &Args,
    model: &'a Model,
    corpus: &'a Corpus,
    samples: usize,
    window: WindowConfig,
) -> CliResult<Sweep<'a>> {
    Ok(Sweep {
        model,
        corpus,
        cfgs: &[],
        table: None,
        samples,
        fidelity_steps: if a.quick { 16 } else { FIDELITY_STEPS },
        gate: !a.no_gate,
        passkey: PasskeyTask::new(model.tokenizer())?,
        ruler: RulerPrompts::new(model.tokenizer())?,
        part: a.part,
        kv: a.cache.kv,
        window,
    })
}

impl Args {
    /// `--taus`, or the quick or full sweep's.
    fn taus(&self) -> CliResult<Vec<f64>> {
        match &self.taus {
            Some(t) => parse_list("--taus", t),
            None if self.quick => Ok(QUICK_TAUS.to_vec()),
            None => Ok(FULL_TAUS.to_vec()),
        }
    }

    /// `--alphas`, or the quick or full sweep's.
    fn alphas(&self) -> CliResult<Vec<f64>> {
        match &self.alphas {
            Some(t) => parse_list("--alphas", t),
            None if self.quick => Ok(QUICK_ALPHAS.to_vec()),
            None => Ok(FULL_ALPHAS.to_vec()),
        }
    }

    /// `--lengths`, or the quick or full sweep's for a context of `ctx`; each with room for
    /// the answer.
    fn lengths(&self, ctx: usize) -> CliResult<Vec<usize>> {
        let lengths: Vec<usize> = match &self.lengths {
            Some(l) => parse_list("--lengths", l)?,
            None if self.quick => vec![1024],
            None => default_lengths(ctx),
        };
        if let Some(&l) = lengths.iter().find(|&&l| l + ANSWER_ROOM > ctx) {
            return fail(format!(
                "--lengths: {l} tokens and room for the answer ({ANSWER_ROOM}) exceed the \
                 model's context of {ctx}"
            ));
        }
        Ok(lengths)
    }
}

/// `--tables-only`: which tables were made, or that the methods need none.
fn say_tables_made(a: &Args, moments: bool, statics: bool) {
    let made: Vec<&str> = [("moments.qmom", moments), ("static.qsta", statics)]
        .iter()
        .filter(|t| t.1)
        .map(|t| t.0)
        .collect();
    if made.is_empty() {
        eprintln!(
            "--tables-only: --methods {} needs no calibration table",
            a.methods
        );
    } else {
        eprintln!("{} in {}", made.join(" and "), a.out_dir.display());
    }
}

/// The shard's `shard.json`, written (after checking, on `--resume`, that the folder holds
/// the same shard of the same sweep).
fn start_shard(
    a: &Args,
    sh: Shard,
    units: &[(EvalTask, usize)],
    sweep: serde_json::Value,
) -> CliResult<ShardFile> {
    let f = ShardFile {
        k: sh.k,
        n: sh.n,
        sweep,
        units: units
            .iter()
            .map(|&(t, l)| (t.name().to_string(), l))
            .collect(),
        finished: false,
    };
    if a.resume {
        f.check_resume(&a.out_dir)?;
    }
    f.write(&a.out_dir)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_lengths_double_within_the_context() {
        assert_eq!(default_lengths(8192), [1024, 2048, 4096, 7680]);
        assert_eq!(default_lengths(32768), [1024, 2048, 4096, 8192, 16384]);
        assert_eq!(default_lengths(1500), [988]);
    }

    #[test]
    fn a_page_may_hold_the_shortest_prompt_and_no_more() {
        assert!(check_page(1024, &[4096, 1024]).is_ok());
        let err = check_page(1025, &[4096, 1024]).unwrap_err().to_string();
        assert!(
            err.contains("--page 1025") && err.contains("1024 keys"),
            "{err}"
        );
    }
}
