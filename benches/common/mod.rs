//! Helpers the benches share: the machine they ran on, and their sections of
//! `benches/README.md`.
#![allow(dead_code)]

/// The CPU's model name, from `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().into())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Replaces the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in
/// `benches/README.md` with `body`, or appends a marked section if there is none. A README
/// that cannot be read or written is reported, not fatal: the figures were printed.
pub fn write_section(name: &str, body: &str) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/README.md");
    let (begin, end) = (format!("<!-- {name}:begin -->"), format!("<!-- {name}:end -->"));
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("could not read {path}");
        return;
    };
    let marked = format!("{begin}\n{}\n{end}", body.trim_end_matches('\n'));
    let updated = match (text.find(&begin), text.find(&end)) {
        (Some(a), Some(b)) if a < b => format!("{}{marked}{}", &text[..a], &text[b + end.len()..]),
        _ => format!("{}\n\n{marked}\n", text.trim_end()),
    };
    if let Err(e) = std::fs::write(path, updated) {
        eprintln!("could not update {path}: {e}");
    }
}
