//! `cellar-shell`: an HBase-shell-compatible command line over a Cellar data directory.
//!
//! Usage: `cellar-shell [--data DIR] [SCRIPT]`. Reads commands from SCRIPT, or from stdin
//! (with a prompt when stdin is a terminal). Exits non-zero if any command failed.

use std::io::{self, BufReader, IsTerminal};
use std::process::ExitCode;

use cellar_engine::shell::Shell;
use cellar_engine::{Engine, EngineOptions};

const USAGE: &str = "usage: cellar-shell [--data DIR] [SCRIPT]";

fn main() -> ExitCode {
    let mut data = "./cellar-data".to_string();
    let mut script: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data" | "-d" => match args.next() {
                Some(d) => data = d,
                None => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if script.is_none() && !arg.starts_with('-') => script = Some(arg),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
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
    let mut out = io::stdout().lock();
    let result = match &script {
        Some(path) => match std::fs::File::open(path) {
            Ok(f) => shell.run(BufReader::new(f), &mut out, false),
            Err(e) => {
                eprintln!("ERROR: cannot read {path}: {e}");
                return ExitCode::from(1);
            }
        },
        None => {
            let stdin = io::stdin();
            let interactive = stdin.is_terminal();
            shell.run(stdin.lock(), &mut out, interactive)
        }
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
