//! TEMPORARY STUB (uncommitted) so the CLI compiles before the helper's branch merges.
use crate::eval::TaskPrompt;
use crate::tokenizer::Tokenizer;
use crate::Result;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RulerTask {
    NiahSingle,
    NiahMultikey,
    NiahMultivalue,
    NiahMultiquery,
    Vt,
    Cwe,
    Fwe,
}
impl RulerTask {
    pub const ALL: [RulerTask; 7] = [
        RulerTask::NiahSingle,
        RulerTask::NiahMultikey,
        RulerTask::NiahMultivalue,
        RulerTask::NiahMultiquery,
        RulerTask::Vt,
        RulerTask::Cwe,
        RulerTask::Fwe,
    ];
    pub fn name(self) -> &'static str {
        match self {
            RulerTask::NiahSingle => "niah-single",
            RulerTask::NiahMultikey => "niah-multikey",
            RulerTask::NiahMultivalue => "niah-multivalue",
            RulerTask::NiahMultiquery => "niah-multiquery",
            RulerTask::Vt => "vt",
            RulerTask::Cwe => "cwe",
            RulerTask::Fwe => "fwe",
        }
    }
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}
pub struct RulerPrompts<'t> {
    tok: &'t Tokenizer,
}
impl<'t> RulerPrompts<'t> {
    pub fn new(tok: &'t Tokenizer) -> Result<Self> {
        Ok(Self { tok })
    }
    pub fn prompt(
        &self,
        task: RulerTask,
        haystack: &str,
        len: usize,
        depth: f64,
        seed: u64,
    ) -> Result<TaskPrompt> {
        let p = crate::eval::PasskeyTask::new(self.tok)?;
        let hay = self.tok.encode_continuation(haystack)?;
        let mut t = p
            .prompt(&hay, len, depth, 10000 + (seed % 80000) as u32)?
            .to_task();
        t.task = task.name();
        Ok(t)
    }
}
