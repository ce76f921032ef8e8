//! `cellar-shell`: an HBase-shell-compatible command line over a Cellar data directory.
//!
//! Usage: `cellar-shell [--data DIR] [SCRIPT]`. Reads commands from SCRIPT, or from stdin —
//! with a prompt, line editing and history when stdin is a terminal. Exits non-zero if any
//! command failed.

use std::io::{self, BufReader, IsTerminal};
use std::process::ExitCode;

use cellar_engine::{Engine, EngineOptions};

use shell::Shell;

mod shell;

const USAGE: &str = "usage: cellar-shell [--data DIR] [SCRIPT]";

fn main() -> ExitCode {
    let mut data = "./cellar-data".to_string();
    let mut script: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data" | "-d" => match args.next() {
                Some(d) => data = d,
                None => return usage_error(),
            },
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if script.is_none() && !arg.starts_with('-') => script = Some(arg),
            _ => return usage_error(),
        }
    }
    let engine = match Engine::open(&data, EngineOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ERROR: cannot open {data}: {e}");
            return ExitCode::from(1);
        }
    };
    let mut shell = Shell::new(engine);
    let result = match &script {
        Some(path) => match std::fs::File::open(path) {
            Ok(f) => shell.run(BufReader::new(f), &mut io::stdout().lock(), false),
            Err(e) => {
                eprintln!("ERROR: cannot read {path}: {e}");
                return ExitCode::from(1);
            }
        },
        None if io::stdin().is_terminal() => interactive(&mut shell),
        None => shell.run(io::stdin().lock(), &mut io::stdout().lock(), false),
    };
    if let Err(e) = result {
        eprintln!("ERROR: {e}");
        return ExitCode::from(1);
    }
    if shell.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn usage_error() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// A terminal session with line editing and in-memory history.
#[cfg(feature = "readline")]
fn interactive(shell: &mut Shell) -> io::Result<()> {
    use rustyline::error::ReadlineError;
    use std::io::Write;

    let mut editor = rustyline::DefaultEditor::new().map_err(io::Error::other)?;
    let mut out = io::stdout();
    loop {
        match editor.readline(&shell.prompt()) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                shell.run_line(&line, &mut out)?;
                out.flush()?;
                if shell.exited() {
                    return Ok(());
                }
            }
            // Ctrl-C abandons the current line, as in the HBase shell.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(io::Error::other(e)),
        }
    }
}

/// A terminal session without line editing (built without the `readline` feature).
#[cfg(not(feature = "readline"))]
fn interactive(shell: &mut Shell) -> io::Result<()> {
    shell.run(io::stdin().lock(), &mut io::stdout(), true)
}
