//! Table administration: creating tables and families, their GC rules, tablet boundaries.

use super::retry::{repeated, unbuilt};
use super::*;

/// Where the table's tablets begin, as SampleRowKeys reports them (the table's end, an empty
/// key, left out).
pub(super) async fn sample_row_keys(ctx: &Ctx, table: &str) -> Result<Vec<Bytes>> {
    let name = ctx.table_name(table);
    let message = pb::SampleRowKeysRequest {
        table_name: name.clone(),
        app_profile_id: ctx.app_profile.clone(),
        ..Default::default()
    };
    let sample = || async {
        let request = ctx.request(Rpc::SampleRowKeys, message.clone(), ("table_name", &name)).await.map_err(unbuilt)?;
        let mut stream = ctx.deadline(ctx.data.clone().sample_row_keys(request)).await?.into_inner();
        let mut keys = Vec::new();
        while let Some(sample) = ctx.deadline(stream.message()).await? {
            if !sample.row_key.is_empty() {
                keys.push(sample.row_key);
            }
        }
        Ok(keys)
    };
    let mut keys = repeated(ctx, sample).await.map_err(|s| rpc_error("SampleRowKeys", table, None, &s))?;
    keys.dedup();
    Ok(keys)
}

/// The families of a table, or `None` if it does not exist.
pub(super) async fn get_table(ctx: &Ctx, table: &str) -> Result<Option<Vec<FamilySpec>>> {
    let name = ctx.table_name(table);
    let message = admin::GetTableRequest { name: name.clone(), view: admin::table::View::SchemaView as i32 };
    let get = || async {
        let request = ctx.request(Rpc::Admin, message.clone(), ("name", &name)).await.map_err(unbuilt)?;
        ctx.deadline(ctx.admin.clone().get_table(request)).await
    };
    let response = repeated(ctx, get).await;
    match response {
        Ok(t) => {
            let mut families: Vec<FamilySpec> = t
                .into_inner()
                .column_families
                .iter()
                .map(|(name, f)| gc::family_of(name, f.gc_rule.as_ref()))
                .collect();
            families.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(Some(families))
        }
        Err(s) if s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(rpc_error("GetTable", table, None, &s)),
    }
}

pub(super) async fn create_table(ctx: &Ctx, spec: &TableSpec) -> Result<()> {
    let column_families = spec
        .families
        .iter()
        .map(|f| (f.name.clone(), admin::ColumnFamily { gc_rule: Some(gc::rule_of(f)), ..Default::default() }))
        .collect();
    let message = admin::CreateTableRequest {
        parent: ctx.instance.clone(),
        table_id: spec.name.clone(),
        table: Some(admin::Table {
            column_families,
            granularity: admin::table::TimestampGranularity::Millis as i32,
            ..Default::default()
        }),
        initial_splits: spec
            .split_keys
            .iter()
            .map(|k| admin::create_table_request::Split { key: Bytes::copy_from_slice(k) })
            .collect(),
    };
    // Repeated after a lost answer, it finds the table it created: `AlreadyExists`.
    let create = || async {
        let request = ctx.request(Rpc::Admin, message.clone(), ("parent", &ctx.instance)).await.map_err(unbuilt)?;
        ctx.deadline(ctx.admin.clone().create_table(request)).await
    };
    match repeated(ctx, create).await {
        // Another client created it first: it is checked like any existing table.
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(rpc_error("CreateTable", &spec.name, None, &s)),
    }
}

pub(super) async fn add_families(ctx: &Ctx, table: &str, missing: &[&FamilySpec]) -> Result<()> {
    use admin::modify_column_families_request::{modification::Mod, Modification};
    let name = ctx.table_name(table);
    let message = admin::ModifyColumnFamiliesRequest {
        name: name.clone(),
        modifications: missing
            .iter()
            .map(|f| Modification {
                id: f.name.clone(),
                r#mod: Some(Mod::Create(admin::ColumnFamily { gc_rule: Some(gc::rule_of(f)), ..Default::default() })),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    // Only creations: repeated after a lost answer, they find the families they added.
    let add = || async {
        let request = ctx.request(Rpc::Admin, message.clone(), ("name", &name)).await.map_err(unbuilt)?;
        ctx.deadline(ctx.admin.clone().modify_column_families(request)).await
    };
    match repeated(ctx, add).await {
        Ok(_) => Ok(()),
        // Added by another client meanwhile; the caller checks the result.
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(rpc_error("ModifyColumnFamilies", table, None, &s)),
    }
}

/// `changes` applied to `existing` (a table's families): the modifications to send, the
/// families' settings before and after, and the families as they will be. Compression and
/// bloom filters are Bigtable's to manage: ignored. Families whose GC rule stays the same are
/// not sent.
pub(super) fn family_modifications(
    existing: &[FamilySpec],
    changes: &[FamilyChange],
) -> (Vec<admin::modify_column_families_request::Modification>, Vec<FamilyAlteration>, Vec<FamilySpec>) {
    use admin::modify_column_families_request::{modification::Mod, Modification};
    let mut families = existing.to_vec();
    let mut modifications = Vec::new();
    let mut alterations = Vec::with_capacity(changes.len());
    for change in changes {
        let before = existing.iter().find(|f| f.name == change.name);
        let after = change.applied_to(before);
        if before != Some(&after) {
            let family = admin::ColumnFamily { gc_rule: Some(gc::rule_of(&after)), ..Default::default() };
            // An update's mask left empty updates the GC rule, all a family keeps here.
            let r#mod = if before.is_some() { Mod::Update(family) } else { Mod::Create(family) };
            modifications.push(Modification { id: after.name.clone(), r#mod: Some(r#mod), ..Default::default() });
        }
        alterations.push(FamilyAlteration {
            family: change.name.clone(),
            before: before.map(FamilySettings::of),
            after: FamilySettings::of(&after),
        });
        families.retain(|f| f.name != after.name);
        families.push(after);
    }
    families.sort_by(|a, b| a.name.cmp(&b.name));
    (modifications, alterations, families)
}

/// One ModifyColumnFamilies call: Bigtable applies all of its modifications or none.
pub(super) async fn modify_families(
    ctx: &Ctx,
    table: &str,
    modifications: Vec<admin::modify_column_families_request::Modification>,
) -> Result<()> {
    let name = ctx.table_name(table);
    let message = admin::ModifyColumnFamiliesRequest { name: name.clone(), modifications, ..Default::default() };
    // Not repeated: a creation among the modifications would fail a repeat with
    // `AlreadyExists` after the first call applied.
    let request = ctx.request(Rpc::Admin, message, ("name", &name)).await?;
    match ctx.deadline(ctx.admin.clone().modify_column_families(request)).await {
        Ok(_) => Ok(()),
        // Dropped since it was read.
        Err(s) if s.code() == Code::NotFound => Err(crate::store::no_table_to_alter(table)),
        Err(s) => Err(rpc_error("ModifyColumnFamilies", table, None, &s)),
    }
}
