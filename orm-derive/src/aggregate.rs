//! `#[derive(Aggregate)]` and `#[derive(Part)]`: the object's own row is generated as an
//! entity (`expand.rs`, after [`as_entity`] reshapes the parsed attributes), plus the `Part`
//! impl that turns the object and its `children` collections into nodes and back, and on the
//! root the `Aggregate` impl with a compile-time check of the whole tree.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::LitStr;

use crate::attr::{EntityAttr, Kind};
use crate::check::vec_element;

/// Reshapes a parsed root or part into the entity its own row is: every key part before the
/// record type (the root's whole key is the aggregate prefix), every part delimited, the
/// collections left out of the row, and the record type the strategy gives the root.
pub fn as_entity(e: &mut EntityAttr) {
    for f in &mut e.fields {
        if f.children.is_some() {
            f.skip = f.children;
        }
        if e.kind == Kind::Aggregate && f.key.is_some() {
            f.partition = f.key.take();
        }
    }
    if e.kind == Kind::Aggregate {
        let typed = matches!(strategy(e), "single_table" | "denormalized");
        e.record_type = if typed { Some(e.record_type.unwrap_or(1)) } else { None };
    }
}

fn strategy(e: &EntityAttr) -> &str {
    e.strategy.as_ref().map_or("single_table", |s| s.value.as_str())
}

pub fn expand(e: &EntityAttr) -> TokenStream {
    let ident = &e.ident;
    let krate = &e.krate;
    let orm = quote!(#krate::orm);
    let agg = quote!(#orm::aggregate);
    let private = quote!(#orm::__private);
    let children: Vec<_> = e.fields.iter().filter(|f| f.children.is_some()).collect();
    let child_schemas = children.iter().map(|f| {
        let field = LitStr::new(&f.ident.to_string(), Span::call_site());
        let ty = vec_element(&f.ty);
        let record_type = match &f.record_type {
            Some(t) => {
                let t = t.value;
                quote!(::core::option::Option::Some(#t))
            }
            None => quote!(::core::option::Option::None),
        };
        quote! {
            #agg::ChildSchema {
                field: #field,
                record_type: #record_type,
                schema: &<#ty as #orm::Entity>::SCHEMA,
                children: <#ty as #agg::Part>::CHILDREN,
            }
        }
    });
    let to_nodes = children.iter().map(|f| {
        let name = &f.ident;
        let ty = vec_element(&f.ty);
        quote!(self.#name.iter().map(<#ty as #agg::Part>::to_node).collect::<#orm::Result<::std::vec::Vec<_>>>()?)
    });
    let from_nodes = children.iter().map(|f| {
        let name = &f.ident;
        let ty = vec_element(&f.ty);
        quote!(object.#name = #private::collection::<#ty>(collections.next())?;)
    });
    let constants = children.iter().enumerate().map(|(i, f)| {
        let konst = format_ident!("{}", f.ident.to_string().to_uppercase());
        let ty = vec_element(&f.ty);
        let doc = LitStr::new(
            &format!("The `{}` collection: pass it to `AggregateRepository::children` or `Children::child`.", f.ident),
            Span::call_site(),
        );
        quote!(#[doc = #doc] pub const #konst: #agg::ChildField<#ident, #ty> = #agg::ChildField::new(#i);)
    });
    let root = e.kind == Kind::Aggregate;
    // A versioned blob aggregate also derives Versioned, which reads the `blob(...)` contents.
    let blob = match e.versioned_blob {
        Some(_) => quote!(::core::option::Option::Some(#private::versioned_codec::<#ident>())),
        None => quote!(::core::option::Option::None),
    };
    let aggregate_impl = root.then(|| {
        let strategy = match strategy(e) {
            "normalized" => quote!(Normalized),
            "denormalized" => quote!(Denormalized),
            "blob" => quote!(Blob),
            _ => quote!(SingleTable),
        };
        quote! {
            #[automatically_derived]
            impl #agg::Aggregate for #ident {
                const AGGREGATE: #agg::AggregateSchema = #agg::AggregateSchema {
                    strategy: #agg::Strategy::#strategy,
                    root: &<#ident as #orm::Entity>::SCHEMA,
                    children: <#ident as #agg::Part>::CHILDREN,
                    blob: #blob,
                };
            }
            // A tree its strategy cannot hold, or duplicate record types, fail to compile here.
            const _: () = #private::check_aggregate(&<#ident as #agg::Aggregate>::AGGREGATE);
        }
    });
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #ident {
                #(#constants)*
            }

            #[automatically_derived]
            impl #agg::Part for #ident {
                const CHILDREN: &'static [#agg::ChildSchema] = &[#(#child_schemas),*];

                fn to_node(&self) -> #orm::Result<#agg::Node> {
                    #private::node_of(self, #root, ::std::vec![#(#to_nodes),*])
                }

                #[allow(unused_mut, unused_variables)]
                fn from_node(node: #agg::Node) -> ::core::result::Result<Self, #orm::entity::FieldError> {
                    let #agg::Node { row, children } = node;
                    let mut object = <#ident as #orm::Entity>::from_row(&row, u64::MAX)?;
                    let mut collections = children.into_iter();
                    #(#from_nodes)*
                    ::core::result::Result::Ok(object)
                }
            }

            #aggregate_impl
        };
    }
}
