//! `kok logs`: prints the log of an operation run by local mode's Job runner.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::local::logs;

/// How often `--follow` looks for new output.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(300);

/// Arguments of `kok logs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The operation: its ClusterOperation name, its Job name, or `<cluster>/<id>` for the newest run of that id.
    pub operation: String,
    /// State directory of local mode (`kok run --local --state-dir`); logs are in its `logs/` directory.
    #[arg(long, env = "KOK_STATE_DIR", default_value = crate::local::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Keep printing output as it is written, until the run ends.
    #[arg(long, short = 'f', env = "KOK_FOLLOW")]
    pub follow: bool,
}

/// Runs `kok logs`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = crate::local::logs_dir(&args.state_dir);
    let entry = logs::find(&dir, &args.operation)?;
    let mut stdout = std::io::stdout().lock();
    match print(&entry.path, args.follow, &mut stdout) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // The reader went away (`kok logs x | head`): not an error.
        Err(err) if is_broken_pipe(&err) => Ok(ExitCode::SUCCESS),
        Err(err) => Err(err),
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Tracks whether the last run in the log has ended, from the lines seen so far.
#[derive(Default)]
struct RunEnd {
    partial: Vec<u8>,
    ended: bool,
}

impl RunEnd {
    fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(pos) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end();
            if logs::is_end_line(line) {
                self.ended = true;
            } else if logs::Header::parse(line).is_some() {
                self.ended = false;
            }
        }
    }
}

/// Copies the log at `path` to `out`; with `follow`, keeps copying until the last run's end line.
fn print(path: &Path, follow: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("could not open the log {}", path.display()))?;
    let mut state = RunEnd::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("could not read the log {}", path.display()))?;
        if n > 0 {
            offset += n as u64;
            out.write_all(&buf[..n])?;
            state.feed(&buf[..n]);
            continue;
        }
        out.flush()?;
        if !follow || state.ended {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_INTERVAL);
        // Read on from where the last read ended.
        file.seek(SeekFrom::Start(offset))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_a_finished_run_prints_it_and_returns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("op.log");
        let header = logs::Header {
            start: "t".into(),
            job: "kok-op".into(),
            ..logs::Header::default()
        };
        let content = format!(
            "{}\nhello\n{}\n",
            header.line(Path::new("/w"), &[]),
            logs::end_line("t", "Succeeded", "CompletionsReached", Some(0))
        );
        std::fs::write(&path, &content).unwrap();
        let mut out = Vec::new();
        print(&path, true, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), content);
    }

    #[test]
    fn a_run_without_an_end_line_is_still_going() {
        let mut state = RunEnd::default();
        state.feed(logs::end_line("t", "Failed", "X", None).as_bytes());
        assert!(!state.ended, "a line is complete only with its newline");
        state.feed(b"\n");
        assert!(state.ended);
        let header = logs::Header {
            start: "t".into(),
            ..logs::Header::default()
        };
        state.feed(format!("{}\n", header.line(Path::new("/w"), &[])).as_bytes());
        assert!(!state.ended);
    }
}
