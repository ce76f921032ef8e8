//! `cellar-shell`'s interpreter: HBase shell commands over an [`Engine`].
//!
//! `main.rs` only opens the engine and feeds lines here, so tests drive the same code
//! in-process. It lives with the binary: the engine's library API is what it calls. Each command prints what the HBase shell prints for it; an
//! error prints `ERROR: …` and the next command still runs.

mod commands;
mod format;
pub mod parse;

use std::io::{self, BufRead, Write};
use std::time::Instant;

use cellar_engine::Engine;

use parse::parse_line;

/// What a command produced.
pub(crate) struct Output {
    /// Text printed before the closing line.
    pub text: String,
    /// Rows to report in the closing `N row(s) in T seconds` line; `None` prints no such line.
    pub rows: Option<usize>,
    /// Text printed after the closing line (`=> …` return values).
    pub ret: Option<String>,
}

impl Output {
    pub fn rows(text: String, rows: usize) -> Output {
        Output { text, rows: Some(rows), ret: None }
    }
}

/// An interpreter session.
pub struct Shell {
    engine: Engine,
    errors: usize,
    line_no: usize,
    exit: bool,
}

impl Shell {
    /// A session over `engine`.
    pub fn new(engine: Engine) -> Shell {
        Shell { engine, errors: 0, line_no: 0, exit: false }
    }

    /// Number of commands that failed so far.
    pub fn errors(&self) -> usize {
        self.errors
    }

    /// True after `exit` or `quit`.
    pub fn exited(&self) -> bool {
        self.exit
    }

    /// The prompt for the next line, HBase style.
    pub fn prompt(&self) -> String {
        format!("cellar(main):{:03}:0> ", self.line_no + 1)
    }

    /// Runs one line, printing its output (or `ERROR: …`) to `out`.
    ///
    /// # Errors
    /// Only errors writing to `out`.
    pub fn run_line(&mut self, line: &str, out: &mut dyn Write) -> io::Result<()> {
        self.line_no += 1;
        let cmd = match parse_line(line) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.errors += 1;
                return writeln!(out, "ERROR: {e}");
            }
        };
        if matches!(cmd.name.as_str(), "exit" | "quit") {
            self.exit = true;
            return Ok(());
        }
        let started = Instant::now();
        match commands::execute(&self.engine, &cmd) {
            Ok(o) => {
                out.write_all(o.text.as_bytes())?;
                if let Some(rows) = o.rows {
                    out.write_all(format::rows_line(rows, started.elapsed().as_secs_f64()).as_bytes())?;
                }
                if let Some(ret) = o.ret {
                    writeln!(out, "\n=> {ret}")?;
                }
                Ok(())
            }
            Err(e) => {
                self.errors += 1;
                writeln!(out, "ERROR: {e}")
            }
        }
    }

    /// Runs every line of `input`; with `interactive`, prints a prompt before each.
    ///
    /// # Errors
    /// Errors reading `input` or writing `out`.
    pub fn run(&mut self, input: impl BufRead, out: &mut dyn Write, interactive: bool) -> io::Result<()> {
        let mut lines = input.lines();
        loop {
            if interactive {
                write!(out, "{}", self.prompt())?;
                out.flush()?;
            }
            let Some(line) = lines.next() else { break };
            self.run_line(&line?, out)?;
            if self.exit {
                break;
            }
        }
        Ok(())
    }
}
