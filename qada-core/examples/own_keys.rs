//! QAdA and the oracle on your own keys, with qada-core alone.
//!
//! ```text
//! cargo run --release -p qada-core --example own_keys                    # synthetic keys
//! cargo run --release -p qada-core --example own_keys -- q.npy keys.npy  # yours (f32)
//! cargo run --release -p qada-core --example own_keys -- --save DIR      # write the synthetic ones
//! ```
//!
//! `q.npy` holds one query (`d`), `keys.npy` the keys of one head (`T x d`). The keys are split
//! into the sink (first 16), the window (last 112) and the bulk between; the bulk's moments
//! feed QAdA's Gaussian estimate `ln A_bulk_hat = ln T_bulk + mu_s + sigma_s^2 / 2`, the bulk's
//! keys the oracle's exact `ln A_bulk`. For several `tau` it prints both decisions, both log
//! local shares and the Gaussian error `ln A_bulk_hat - ln A_bulk`.
//!
//! Without files it draws Gaussian keys (`T = 4096`, `d = 64`) with a sink (the first key, with
//! a large score against the query), once as they are and once with a few retrieval-like
//! outlier keys in the bulk, aligned with the query: the Gaussian model spreads their mass over
//! the whole bulk and underestimates it, so QAdA calls the head local where the oracle does not.

use std::error::Error;
use std::path::PathBuf;

use ndarray::{concatenate, s, Array1, Array2, Axis};
use qada_core::{Bulk, HeadQuery, PreparedQuery};
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

const SINK: usize = 16;
const WINDOW: usize = 112;
const TAUS: [f64; 6] = [0.3, 0.5, 0.6, 0.8, 0.9, 0.95];

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut save: Option<PathBuf> = None;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--save" {
            save = Some(it.next().ok_or("--save needs a directory")?.into());
        } else {
            files.push(PathBuf::from(a));
        }
    }
    match files.as_slice() {
        [q, k] => {
            let q: Array1<f32> = ndarray_npy::read_npy(q)
                .map_err(|e| format!("reading the query {}: {e}", q.display()))?;
            let keys: Array2<f32> = ndarray_npy::read_npy(k)
                .map_err(|e| format!("reading the keys {}: {e}", k.display()))?;
            println!(
                "{} keys of dimension {} from {}",
                keys.nrows(),
                keys.ncols(),
                k.display()
            );
            print_table(&q, &keys)?;
        }
        [] => {
            let (q, plain, outliers) = synthetic(4096, 64, 8, 0x5eed);
            println!("Gaussian keys, T = 4096, d = 64, a sink at position 0:");
            print_table(&q, &plain)?;
            println!("\nthe same keys with 8 retrieval-like outliers in the bulk:");
            print_table(&q, &outliers)?;
            if let Some(dir) = save {
                std::fs::create_dir_all(&dir)?;
                ndarray_npy::write_npy(dir.join("q.npy"), &q)?;
                ndarray_npy::write_npy(dir.join("keys.npy"), &outliers)?;
                println!(
                    "\nwrote {0}/q.npy and {0}/keys.npy (with outliers)",
                    dir.display()
                );
            }
        }
        _ => return Err("usage: own_keys [q.npy keys.npy] [--save DIR]".into()),
    }
    Ok(())
}

/// A query, Gaussian keys with a sink, and the same keys with `n_out` outliers in the bulk.
fn synthetic(
    t: usize,
    d: usize,
    n_out: usize,
    seed: u64,
) -> (Array1<f32>, Array2<f32>, Array2<f32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let q = Array1::from_shape_fn(d, |_| rng.sample::<f32, _>(StandardNormal));
    let mut keys = Array2::from_shape_fn((t, d), |_| rng.sample::<f32, _>(StandardNormal));
    // a key along q with score c: scale q . (c sqrt(d) q / |q|^2) = c
    let along = |c: f32| &q * (c * (d as f32).sqrt() / q.dot(&q));
    keys.row_mut(0).assign(&along(10.0));
    let mut with_outliers = keys.clone();
    for i in 0..n_out {
        let row = SINK + 300 + i * (t - SINK - WINDOW - 600) / n_out.max(1);
        let noise = Array1::from_shape_fn(d, |_| 0.3 * rng.sample::<f32, _>(StandardNormal));
        with_outliers
            .row_mut(row)
            .assign(&(along(rng.gen_range(9.0..10.0)) + noise));
    }
    (q, keys, with_outliers)
}

/// Sink, bulk and window of `keys`; QAdA and the oracle at every `tau`.
fn print_table(q: &Array1<f32>, keys: &Array2<f32>) -> Result<(), Box<dyn Error>> {
    let t = keys.nrows();
    if t <= SINK + WINDOW {
        return Err(format!("need more than {} keys, got {t}", SINK + WINDOW).into());
    }
    let local = concatenate![
        Axis(0),
        keys.slice(s![..SINK, ..]),
        keys.slice(s![t - WINDOW.., ..])
    ];
    let bulk = keys.slice(s![SINK..t - WINDOW, ..]);
    let head = HeadQuery {
        query: q.view(),
        local_keys: local.view(),
        bulk: Bulk::Keys(bulk),
        scale: None,
    };
    let prepared = PreparedQuery::new(&head)?;
    println!(
        "{:>5} | {:>7} {:>7} | {:>12} {:>12} | {:>10}",
        "tau", "oracle", "QAdA", "ln share", "ln share", "Gauss err"
    );
    println!(
        "{:>5} | {:>15} | {:>12} {:>12} | {:>10}",
        "", "", "(exact)", "(QAdA)", ""
    );
    for tau in TAUS {
        let c = prepared.compare(tau)?;
        let label = |local: bool| if local { "local" } else { "long" };
        println!(
            "{tau:>5} | {:>7} {:>7} | {:>12.4} {:>12.4} | {:>10.4}{}",
            label(c.oracle.local),
            label(c.approx.local),
            c.oracle_share(),
            c.approx_share(),
            c.gaussian_error(),
            if c.agree() { "" } else { "  <- disagree" }
        );
    }
    Ok(())
}
