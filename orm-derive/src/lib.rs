//! `#[derive(Entity)]` for Cellar: maps a struct onto rows of a wide-column table.
//!
//! `#[derive(Record)]` ([`record`]) types the rows of a single-table design.
//!
//! For entities, three phases, three modules: [`attr`] parses `#[cellar(...)]` attributes, [`check`]
//! validates them, [`expand`] generates code. Errors from all phases are reported together,
//! each at the tokens at fault. Use it through the `cellar` facade (`cellar::Entity`); the
//! attributes are documented there.

mod attr;
mod check;
mod expand;
mod record;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `cellar::orm::Entity`, a typed key struct `<Name>Key` with prefix builders, and a
/// counter constant per `#[cellar(counter)]` field.
#[proc_macro_derive(Entity, attributes(cellar))]
pub fn derive_entity(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    entity(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Derives `cellar::orm::Record` for an enum with one `Variant(Entity)` per entity type of a
/// single-table design, `From` each member, and `cellar::orm::Member` for each member. The
/// members must share table, salt and partition parts and have distinct record types; a
/// mismatch is a compile error.
#[proc_macro_derive(Record)]
pub fn derive_record(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    record::derive(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

fn entity(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let mut ctx = attr::Ctx::default();
    let parsed = attr::parse(&mut ctx, input);
    if let Some(e) = &parsed {
        check::check(&mut ctx, e);
    }
    ctx.finish()?;
    // Parsing succeeded whenever no error was recorded.
    parsed.map(|e| expand::expand(&e)).ok_or_else(|| syn::Error::new_spanned(&input.ident, "cannot derive Entity"))
}
