//! Evaluation of a locality criterion against dense decoding, as a library: the tasks
//! `qada eval` runs, the metrics it scores them with, and the probes `qada analyze` and
//! `qada calibrate` read, with no CLI in between.
//!
//! - [`tasks`]: prompts generated from a seed over haystack text the caller passes, each
//!   prefilled once densely ([`tasks::dense_prefill`]) and answered under any criterion from
//!   the checkpoint ([`tasks::answer`]): the passkey needle ([`PasskeyTask`]), RULER's
//!   synthetic tasks ([`RulerPrompts`], [`RulerTask`]), all handed over as a [`TaskPrompt`]
//!   that scores an answer; and teacher-forced fidelity against dense
//!   ([`FidelityReference`], [`FidelityStep`], [`FidelityTotals`]).
//! - [`metrics`]: pure functions of logits, log-probabilities, answers and sweep points
//!   (log-softmax, KL divergence, NLL, top-1 agreement, RULER's recall, interpolation at a
//!   sparsity).
//! - [`analysis`]: per-head probes of the exact and estimated bulk masses ([`HeadProbe`],
//!   [`analysis::probe_layer`], [`analysis::probe_layer_with`]) and what they give at a
//!   threshold ([`Report`], [`Agreement`], [`Summary`]).
//! - [`probe`]: a model decoded densely while a criterion is probed against the oracle at
//!   every position ([`probe::probe_decode`], [`Prober`], [`DenseKeeping`]).
//!
//! Types are re-exported here; functions stay in their modules. Builders take their text
//! and seeds as arguments and return values; nothing here prints. Errors are those of the
//! model ([`qada_model::ModelError`]) or, for the probes of `analysis`, of the criteria
//! ([`qada_core::CoreError`]).
//!
//! # Example: scores without a model
//!
//! An answer scored as RULER scores it, two next-token distributions compared, and two heads'
//! probes scored at `tau = 0.9`: both local by the oracle (the bulk holds `e^-3 / (1 + e^-3)`,
//! about 5 %, of the mass), the second called long by an estimate of the bulk mass as large as
//! the local one.
//!
//! ```
//! use qada_core::Tau;
//! use qada_eval::{metrics, HeadProbe, Report, TaskPrompt};
//!
//! let prompt = TaskPrompt {
//!     task: "niah-multivalue",
//!     ids: vec![1, 2, 3],
//!     expected: vec!["4821".into(), "7730".into()],
//!     answer_tokens: 16,
//!     depth: None,
//!     needles: vec![],
//!     haystack: 0..3,
//! };
//! assert_eq!(prompt.score("The values are 4821 and 1234."), 0.5);
//!
//! let p = metrics::log_softmax(&[2.0, 1.0, 0.0]);
//! let q = metrics::log_softmax(&[2.0, 0.5, 0.0]);
//! assert!(metrics::top1_agreement(&p, &q));
//! assert!(metrics::kl_divergence(&p, &q) > 0.0);
//!
//! let probe = |head, log_bulk_hat| HeadProbe {
//!     layer: 0,
//!     head,
//!     bulk_len: 100,
//!     log_local: 0.0,
//!     log_bulk: -3.0,
//!     log_bulk_hat,
//!     log_missed: f64::NAN,
//! };
//! let report = Report::new(&[probe(0, -3.0), probe(1, 0.0)], Tau::new(0.9)?, 1, 2);
//! assert_eq!(report.frac_local_oracle, 1.0);
//! assert_eq!(report.agreement.false_long, 1);
//! assert_eq!(report.agreement.accuracy(), 0.5);
//! # Ok::<(), qada_core::CoreError>(())
//! ```
//!
//! # Example: a RULER prompt under QAdA
//!
//! One prompt prefilled densely once, then answered from the checkpoint by dense attention
//! and by QAdA at two thresholds (the file names are placeholders):
//!
//! ```no_run
//! use qada_core::{Approx, Dense, LocalityCriterion};
//! use qada_eval::tasks::{answer, dense_prefill};
//! use qada_eval::{RulerPrompts, RulerTask};
//! use qada_kv::WindowConfig;
//! use qada_model::{LoadOptions, Model, Session, SessionOptions};
//!
//! let model = Model::load("model.gguf".as_ref(), &LoadOptions::default())?;
//! let haystack = std::fs::read_to_string("haystack.txt")?;
//! let prompt = RulerPrompts::new(model.tokenizer())?
//!     .prompt(RulerTask::NiahSingle, &haystack, 4096, 0.5, 7)?;
//! let opts = SessionOptions::new(Box::new(Dense), WindowConfig::PAPER);
//! let mut session = Session::new(&model, opts)?;
//! let checkpoint = dense_prefill(&mut session, &prompt.ids)?;
//! let criteria: [Box<dyn LocalityCriterion>; 3] = [
//!     Box::new(Dense),
//!     Box::new(Approx::new(0.9)?),
//!     Box::new(Approx::new(0.99)?),
//! ];
//! for criterion in criteria {
//!     session.restore(&checkpoint)?;
//!     session.set_criterion(criterion)?;
//!     let text = answer(&mut session, prompt.answer_tokens)?;
//!     let sparsity = session.accounting().sparsity();
//!     println!("score {} at sparsity {sparsity:.2}", prompt.score(&text));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
pub mod metrics;
pub mod probe;
pub mod tasks;

pub use analysis::{Agreement, HeadProbe, Report, Summary};
pub use probe::{DenseKeeping, ProbeOptions, ProbeRun, Prober};
pub use tasks::{
    FidelityMeans, FidelityReference, FidelityStep, FidelityTotals, PasskeyPrompt, PasskeyTask,
    RulerPrompts, RulerTask, TaskPrompt,
};
