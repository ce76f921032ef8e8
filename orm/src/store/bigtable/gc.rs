//! Family settings as Bigtable garbage-collection rules, and back.
//!
//! A family keeps `max_versions` versions and, optionally, cells for `ttl` seconds: a cell is
//! collected when either limit says so, which is a union of a version rule and an age rule.

use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2::{gc_rule, GcRule};

use crate::store::FamilySpec;

/// The GC rule of a family.
pub(crate) fn rule_of(family: &FamilySpec) -> GcRule {
    let versions = GcRule {
        rule: Some(gc_rule::Rule::MaxNumVersions(i32::try_from(family.max_versions.max(1)).unwrap_or(i32::MAX))),
    };
    match family.ttl_secs {
        None => versions,
        Some(secs) => {
            let age = GcRule {
                rule: Some(gc_rule::Rule::MaxAge(prost_types::Duration {
                    seconds: i64::try_from(secs).unwrap_or(i64::MAX),
                    nanos: 0,
                })),
            };
            GcRule { rule: Some(gc_rule::Rule::Union(gc_rule::Union { rules: vec![versions, age] })) }
        }
    }
}

/// What a family keeps under `rule`, as a [`FamilySpec`]: `u32::MAX` versions and no TTL
/// where the rule sets no limit. An intersection collects only where all of its rules agree,
/// which a version count and a TTL cannot express: read as keeping everything (reads then
/// return what Bigtable holds, and `ensure_table` reports the family as different).
pub(crate) fn family_of(name: &str, rule: Option<&GcRule>) -> FamilySpec {
    let mut family = FamilySpec { name: name.to_string(), max_versions: u32::MAX, ttl_secs: None };
    if let Some(rule) = rule {
        tighten(&mut family, rule);
    }
    family
}

fn tighten(family: &mut FamilySpec, rule: &GcRule) {
    match &rule.rule {
        Some(gc_rule::Rule::MaxNumVersions(n)) => {
            family.max_versions = family.max_versions.min(u32::try_from(*n).unwrap_or(0).max(1));
        }
        Some(gc_rule::Rule::MaxAge(d)) => {
            let secs = u64::try_from(d.seconds).unwrap_or(0).saturating_add(u64::from(d.nanos > 0));
            family.ttl_secs = Some(family.ttl_secs.map_or(secs, |t| t.min(secs)));
        }
        Some(gc_rule::Rule::Union(u)) => u.rules.iter().for_each(|r| tighten(family, r)),
        Some(gc_rule::Rule::Intersection(_)) | None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip() {
        for (versions, ttl) in [(1, None), (3, None), (1, Some(3600)), (10, Some(1))] {
            let family = FamilySpec { name: "d".into(), max_versions: versions, ttl_secs: ttl };
            assert_eq!(family_of("d", Some(&rule_of(&family))), family);
        }
    }

    #[test]
    fn a_family_without_a_rule_keeps_everything() {
        assert_eq!(family_of("d", None), FamilySpec { name: "d".into(), max_versions: u32::MAX, ttl_secs: None });
    }
}
