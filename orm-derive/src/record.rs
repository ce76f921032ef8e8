//! `#[derive(Record)]`: an enum with one newtype variant per entity type of a single-table
//! design. Generates the `Record` impl, `From<member>` conversions, the `Member` marker that
//! lets member key prefixes scan the enum's partitions, and a constant that checks at compile
//! time that the members share table, salt and partition layout.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, LitStr, Type};

use crate::attr::Ctx;

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut ctx = Ctx::default();
    let Data::Enum(data) = &input.data else {
        return Err(syn::Error::new_spanned(&input.ident, "#[derive(Record)] applies to an enum of entity types"));
    };
    if !input.generics.params.is_empty() {
        ctx.error(syn::spanned::Spanned::span(&input.generics), "a record enum cannot be generic");
    }
    if data.variants.is_empty() {
        ctx.error(input.ident.span(), "a record enum needs at least one variant");
    }
    let mut variants: Vec<(&syn::Ident, &Type)> = Vec::new();
    for v in &data.variants {
        match &v.fields {
            Fields::Unnamed(f) if f.unnamed.len() == 1 => variants.push((&v.ident, &f.unnamed[0].ty)),
            _ => ctx.error(v.ident.span(), "each variant holds one entity: `Variant(Entity)`"),
        }
    }
    let krate = crate::attr::crate_root(&mut ctx, &input.attrs);
    // `crate = "..."` is the one key a record enum takes.
    for attr in input.attrs.iter().filter(|a| a.path().is_ident(crate::attr::sym::CELLAR)) {
        let result = attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident(crate::attr::sym::CRATE) {
                let span = syn::spanned::Spanned::span(&meta.path);
                ctx.error(span, "unknown record attribute; a record enum takes only `crate = \"...\"`");
            }
            crate::attr::skip_value(&meta)
        });
        if let Err(e) = result {
            ctx.error(e.span(), e);
        }
    }
    ctx.finish()?;

    let ident = &input.ident;
    let name = LitStr::new(&ident.to_string(), ident.span());
    let orm = quote!(#krate::orm);
    let types: Vec<&Type> = variants.iter().map(|(_, t)| *t).collect();
    let attempts = variants.iter().map(|(v, t)| {
        quote! {
            match <#t as #orm::Entity>::from_row(row, u64::MAX) {
                ::core::result::Result::Ok(e) => return ::core::result::Result::Ok(#ident::#v(e)),
                ::core::result::Result::Err(e) if e.other_record_type => {}
                ::core::result::Result::Err(e) => return ::core::result::Result::Err(e),
            }
        }
    });
    let conversions = variants.iter().map(|(v, t)| {
        quote! {
            #[automatically_derived]
            impl ::core::convert::From<#t> for #ident {
                fn from(e: #t) -> Self { #ident::#v(e) }
            }
            #[automatically_derived]
            impl #orm::Member<#ident> for #t {}
        }
    });
    Ok(quote! {
        const _: () = {
            #[automatically_derived]
            impl #orm::Record for #ident {
                const NAME: &'static str = #name;
                const MEMBERS: &'static [&'static #orm::Schema] = &[#(&<#types as #orm::Entity>::SCHEMA),*];

                fn from_row<'r>(
                    row: impl ::core::convert::Into<#orm::store::LentRow<'r>>,
                ) -> ::core::result::Result<Self, #orm::entity::FieldError> {
                    let row: #orm::store::LentRow<'r> = row.into();
                    #(#attempts)*
                    ::core::result::Result::Err(#orm::__private::not_a_member(#name))
                }
            }
            #(#conversions)*
            // Members that cannot share a table are a compile error, with the reason.
            const _: () = #orm::__private::check_members(<#ident as #orm::Record>::MEMBERS);
        };
    })
}
