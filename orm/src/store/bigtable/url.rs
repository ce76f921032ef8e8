//! `bigtable://` addresses.

use super::*;

/// `bigtable://projects/P/instances/I[?app_profile=A]` as options.
pub(super) fn parse_url(url: &str) -> Result<BigtableOptions> {
    let bad = |reason: &str| Error::InvalidArgument { arg: "url", reason: format!("{url}: {reason}") };
    let rest = url.strip_prefix("bigtable://").ok_or_else(|| bad("expected bigtable://projects/P/instances/I"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let ["projects", project, "instances", instance] = parts[..] else {
        return Err(bad("expected bigtable://projects/P/instances/I"));
    };
    if project.is_empty() || instance.is_empty() {
        return Err(bad("empty project or instance"));
    }
    let mut options = BigtableOptions::new(project, instance);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("app_profile", profile)) if !profile.is_empty() => options = options.app_profile(profile),
            _ => return Err(bad(&format!("unknown parameter `{pair}` (known: app_profile)"))),
        }
    }
    Ok(options)
}
