//! `qada calibrate heads`: per-head thresholds `tau_{l,h}` for a criterion.
//!
//! Calibration prompts are run with dense attention (the cache keeping the bulk summaries the
//! criterion reads); at the last `--steps` positions of each, teacher-forced, every layer and
//! query head is probed: the oracle's exact local share and the criterion's estimate (as
//! `qada analyze --criterion NAME` does). `qada_core::calibrate_head_taus` then raises each
//! head's tau until at most `--max-false-local` of the queries the oracle calls long are
//! labeled local. `generate --head-taus FILE` uses the table.

use std::path::PathBuf;

use qada_core::{calibrate_head_taus, HeadObservation, Tau};
use qada_eval::{DenseKeeping, Prober};
use qada_model::ActPrecision;
use qada_model::{Session, SessionOptions};

use super::calibration::{calibration_prompts, probe_prompts, PromptsArgs};
use crate::common::{
    check_output_file, fail, load_model, reports_share, CliResult, CriterionArgs, Fallback,
    ModelArgs,
};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompts: PromptsArgs,
    #[command(flatten)]
    criterion: CriterionArgs,
    /// Largest share, per head, of the calibration queries the oracle calls long that the
    /// criterion may label local.
    #[arg(long, default_value_t = 0.05)]
    max_false_local: f64,
    /// Output file.
    #[arg(long, default_value = "heads.qhta")]
    out: PathBuf,
}

pub fn run(mut a: Args) -> CliResult<()> {
    if a.criterion.criterion.is_none() && a.criterion.setting.is_none() {
        return fail(
            "calibrate heads needs --criterion NAME (approx, mixture, hybrid, bound or oracle)",
        );
    }
    if a.criterion.head_taus.is_some() {
        return fail("calibrate heads starts from one tau for every head: leave out --head-taus");
    }
    if !(0.0..=1.0).contains(&a.max_false_local) {
        return fail(format!(
            "--max-false-local must be in [0, 1], got {}",
            a.max_false_local
        ));
    }
    check_output_file("--out", &a.out)?;
    let model = load_model(&a.model, ActPrecision::F32)?;
    if let Some(why) = a.criterion.resolve(&model, Fallback::Approx)? {
        eprintln!("{why}");
    }
    let name = a.criterion.name().to_string();
    if !reports_share(&name) {
        return fail(format!(
            "--criterion {name} reports no local share to put a threshold on: use approx, \
             mixture, hybrid, bound or oracle"
        ));
    }
    let tau = Tau::new(a.criterion.tau())?;
    let window = a.criterion.window()?;
    let prompts = calibration_prompts(&model, &a.prompts, window)?;
    let criterion = a.criterion.criterion(&model)?;
    let mut session = Session::new(
        &model,
        SessionOptions {
            criterion: Box::new(DenseKeeping(criterion.bulk_summaries())),
            window,
            moments: a.criterion.moments(&model)?,
            capacity: None,
            kv_dtype: a.criterion.kv,
        },
    )?;
    let mut prober = Prober {
        probes: Vec::new(),
        estimator: Some(criterion),
    };
    let mut observations = Vec::new();
    probe_prompts(
        &mut session,
        &prompts,
        a.prompts.steps,
        "calibration (head thresholds)",
        &mut prober,
        |probes| {
            observations.extend(probes.iter().map(|p| HeadObservation {
                layer: p.layer,
                head: p.head,
                exact: p.oracle_share(),
                estimate: p.approx_share(),
            }));
            Ok(())
        },
    )?;
    let c = model.config();
    let table = calibrate_head_taus(
        &observations,
        model.signature(),
        c.n_heads,
        tau,
        a.max_false_local,
    )?;
    table.save(&a.out)?;
    eprintln!(
        "wrote {}: thresholds of {} layers x {} heads for {name} from tau {} (at most {} of \
         the oracle's long queries local per head; {} prompts x {} positions)",
        a.out.display(),
        c.n_layers,
        c.n_heads,
        tau.get(),
        a.max_false_local,
        prompts.len(),
        a.prompts.steps
    );
    for l in 0..c.n_layers {
        let taus = table.layer(l)?;
        let mean = taus.iter().map(|t| t.get()).sum::<f64>() / taus.len().max(1) as f64;
        let raised = taus.iter().filter(|t| t.get() > tau.get()).count();
        println!(
            "layer {l:>2}: mean tau_h {mean:.3}, {raised} of {} heads raised",
            taus.len()
        );
    }
    Ok(())
}
