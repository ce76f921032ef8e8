//! Phase three: generate the key type, its prefix builders, the schema and the `Entity` impl.
//! Generated code names everything by full path (`::cellar::orm::...`, `::core::...`; the root
//! is `#[cellar(crate = "...")]` when given), and calls helpers only through
//! `::cellar::orm::__private`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens as _};
use syn::spanned::Spanned as _;
use syn::{Ident, LitStr};

use crate::attr::{EntityAttr, FieldAttr, ModifierAttr, SaltAttr, WideAttr};
use crate::check::{column_of, is_option, option_element};

/// Where a key part sits in the schema.
struct Part<'a> {
    field: &'a FieldAttr,
    /// `partition` or `key`, and the index in that list.
    list: Ident,
    index: usize,
}

fn lit(s: &str) -> LitStr {
    LitStr::new(s, Span::call_site())
}

/// A field's type as written, for schemas and error messages.
fn type_string(ty: &syn::Type) -> LitStr {
    lit(&quote!(#ty).to_string().replace(' ', ""))
}

fn kind_of(orm: &TokenStream, f: &FieldAttr) -> TokenStream {
    let k = if f.is_key_part() {
        quote!(HashedKey)
    } else if f.counter.is_some() {
        quote!(Counter)
    } else if f.version.is_some() {
        quote!(Version)
    } else if f.serde.is_some() {
        quote!(Serde)
    } else if f.blob.is_some() {
        quote!(Blob)
    } else {
        quote!(Value)
    };
    quote!(#orm::entity::ColumnKind::#k)
}

/// The expression a `#[cellar(default)]` field reads as without its cell.
fn default_expr(path: &Option<syn::Path>) -> TokenStream {
    match path {
        Some(path) => quote!(#path()),
        None => quote!(::core::default::Default::default()),
    }
}

pub fn expand(e: &EntityAttr) -> TokenStream {
    let ident = &e.ident;
    let vis = &e.vis;
    let entity_name = lit(&ident.to_string());
    let key_ident = format_ident!("{}Key", ident);
    let krate = &e.krate;
    let orm = quote!(#krate::orm);
    let private = quote!(#orm::__private);

    let partition: Vec<&FieldAttr> = e.fields.iter().filter(|f| f.partition.is_some() && f.skip.is_none()).collect();
    let keys: Vec<&FieldAttr> = e.fields.iter().filter(|f| f.key.is_some() && f.skip.is_none()).collect();
    let parts: Vec<Part<'_>> = partition
        .iter()
        .enumerate()
        .map(|(index, field)| Part { field, list: format_ident!("partition"), index })
        .chain(keys.iter().enumerate().map(|(index, field)| Part { field, list: format_ident!("key"), index }))
        .collect();
    let n_parts = parts.len();

    let key_field = |p: &Part<'_>, last: bool| {
        let f = p.field;
        let ty = &f.ty;
        let name = lit(&f.ident.to_string());
        let ty_name = type_string(ty);
        let form = match (&f.fixed, last) {
            (Some(n), _) => {
                let n = n.value;
                quote!(#orm::key::Form::Fixed(#n))
            }
            (None, true) => quote!(#orm::key::Form::Last),
            (None, false) => quote!(#orm::key::Form::Delimited),
        };
        let modifier = match f.modifiers.first().map(|m| m.value) {
            None => quote!(None),
            Some(ModifierAttr::Desc | ModifierAttr::ReverseTs) => quote!(Desc),
            Some(ModifierAttr::Reversed) => quote!(Reversed),
            Some(ModifierAttr::Md5) => quote!(Md5),
        };
        let uid = match &f.uid {
            Some(uid) => {
                let (kind, width) = (lit(&uid.value.kind), uid.value.width);
                quote!(::core::option::Option::Some(#orm::key::UidSpec { kind: #kind, width: #width }))
            }
            None => quote!(::core::option::Option::None),
        };
        // The catalog stores this text: it stays as it was first written.
        let encoding = match &f.uid {
            Some(uid) => lit(&format!("id of a `{}` name", uid.value.kind)).into_token_stream(),
            None => quote!(<#ty as #orm::key::KeyPart>::ENCODING),
        };
        let width = match (f.modifiers.first().map(|m| m.value), &f.fixed) {
            _ if f.uid.is_some() => {
                let n = f.uid.as_ref().map_or(0, |u| usize::from(u.value.width));
                quote!(::core::option::Option::Some(#n))
            }
            (Some(ModifierAttr::Md5), _) => quote!(::core::option::Option::Some(#orm::key::MD5_WIDTH)),
            (_, Some(n)) => {
                let n = usize::from(n.value);
                quote!(::core::option::Option::Some(#n))
            }
            _ => quote!(<#ty as #orm::key::KeyPart>::FIXED_WIDTH),
        };
        quote! {
            #orm::entity::KeyField {
                spec: #orm::key::PartSpec::new(#name, #form).with(#orm::key::Modifier::#modifier),
                type_name: #ty_name,
                width: #width,
                encoding: #encoding,
                uid: #uid,
            }
        }
    };
    // `parts` lists the partition parts first, then the key parts.
    // The final part is raw (`Last`) unless a record-type byte follows it.
    let all_key_fields: Vec<TokenStream> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            key_field(p, i + 1 == n_parts && !e.all_delimited && (p.list == "key" || e.record_type.is_none()))
        })
        .collect();
    let (partition_fields, key_fields) = all_key_fields.split_at(partition.len());

    // Stored columns, in field order.
    let stored: Vec<&FieldAttr> = e.fields.iter().filter(|f| f.is_stored()).collect();
    let column_index = |f: &FieldAttr| stored.iter().position(|s| s.ident == f.ident);
    let column_specs = stored.iter().map(|f| {
        let (family, qualifier) = column_of(e, f);
        let (family, qualifier, field) = (lit(&family), lit(&qualifier), lit(&f.ident.to_string()));
        let ty_name = type_string(&f.ty);
        let kind = kind_of(&orm, f);
        let ty = &f.ty;
        let encoding = if f.serde.is_some() {
            quote!("MessagePack")
        } else if f.blob.is_some() {
            quote!("versioned blob")
        } else {
            quote!(<#ty as #orm::value::Column>::ENCODING)
        };
        // A blob column knows its type's current format, so reads can tell an old cell.
        let current_blob = match f.blob {
            Some(_) => {
                let inner = crate::check::option_element(ty).unwrap_or(ty);
                quote!(::core::option::Option::Some(<#inner as #orm::blob::Versioned>::FORMAT))
            }
            None => quote!(::core::option::Option::None),
        };
        let aliases = f.aliases.iter().map(|a| lit(&a.value));
        let default = match &f.default {
            Some(d) => {
                let expr = default_expr(&d.value);
                let text = lit(&expr.to_string().replace(' ', ""));
                let encode = if f.serde.is_some() {
                    quote!(#private::to_msgpack(&value).ok())
                } else if f.blob.is_some() {
                    quote!(#private::write_blob(&value).ok())
                } else {
                    quote!(#orm::value::Column::encode_cell(&value))
                };
                quote!(::core::option::Option::Some(#orm::entity::FieldDefault {
                    expr: #text,
                    cell: {
                        fn cell() -> ::core::option::Option<::std::vec::Vec<u8>> {
                            let value: #ty = #expr;
                            #encode
                        }
                        cell
                    },
                }))
            }
            None => quote!(::core::option::Option::None),
        };
        quote!(#orm::entity::ColumnSpec {
            field: #field, family: #family, qualifier: #qualifier, type_name: #ty_name, kind: #kind, encoding: #encoding,
            current_blob: #current_blob, aliases: &[#(#aliases),*], default: #default,
        })
    });

    // Families: the default first, then those named by fields, with declared options.
    let mut family_names: Vec<String> = vec![e.family.clone()];
    let wides: Vec<(&FieldAttr, &WideAttr)> =
        e.fields.iter().filter_map(|f| Some((f, &f.wide.as_ref()?.value))).collect();
    let wide_family = |w: &WideAttr| w.family.as_ref().map(|f| f.value.clone()).unwrap_or_default();
    for fam in stored.iter().map(|f| column_of(e, f).0).chain(wides.iter().map(|(_, w)| wide_family(w))) {
        if !family_names.contains(&fam) {
            family_names.push(fam);
        }
    }
    let lazy_families: Vec<String> = wides.iter().filter(|(_, w)| w.lazy).map(|(_, w)| wide_family(w)).collect();
    let eager_families = family_names.iter().filter(|f| !lazy_families.contains(f)).map(|f| lit(f));
    let family_schemas = family_names.iter().map(|name| {
        let opts = e.families.iter().find(|f| &f.name == name);
        let max_versions = opts.and_then(|o| o.max_versions).unwrap_or(1);
        let ttl = match opts.and_then(|o| o.ttl) {
            Some(t) => quote!(::core::option::Option::Some(#t)),
            None => quote!(::core::option::Option::None),
        };
        let name = lit(name);
        quote!(#orm::entity::FamilySchema { name: #name, max_versions: #max_versions, ttl_secs: #ttl })
    });

    let record_type = match e.record_type {
        Some(t) => quote!(::core::option::Option::Some(#t)),
        None => quote!(::core::option::Option::None),
    };
    let bucket_field = match e.salt.as_ref().map(|s| &s.value) {
        Some(SaltAttr::Bucket { field, .. }) => Some(field.value.clone()),
        _ => None,
    };
    let salt = match e.salt.as_ref().map(|s| &s.value) {
        None => quote!(#orm::key::Salt::None),
        Some(SaltAttr::Hash { buckets }) => quote!(#orm::key::Salt::Hash { buckets: #buckets }),
        Some(SaltAttr::Random { buckets }) => quote!(#orm::key::Salt::Random { buckets: #buckets }),
        Some(SaltAttr::Bucket { field, buckets }) => {
            let field = lit(&field.value);
            quote!(#orm::key::Salt::Bucket { field: #field, buckets: #buckets })
        }
    };
    let table = lit(&e.table);

    // Wide fields: their specs in the schema, a typed constant each, their entries on put.
    let wide_specs = wides.iter().map(|(f, w)| {
        let field = lit(&f.ident.to_string());
        let family = lit(&wide_family(w));
        let prefix = syn::LitByteStr::new(w.prefix.as_bytes(), Span::call_site());
        let modifier = if w.desc { quote!(Desc) } else { quote!(None) };
        let lazy = w.lazy;
        let types = crate::check::map_types(&f.ty);
        let key_ty = types.map(|(k, _)| k.clone());
        let value_type = types.map_or_else(|| lit(""), |(_, v)| type_string(v));
        let (key_type, key_width) = match &key_ty {
            Some(k) => (type_string(k), quote!(<#k as #orm::key::KeyPart>::FIXED_WIDTH)),
            None => (lit(""), quote!(::core::option::Option::None)),
        };
        quote!(#orm::wide::WideSpec {
            key_type: #key_type,
            key_width: #key_width,
            field: #field,
            family: #family,
            prefix: #prefix,
            key: #orm::key::PartSpec::new(#field, #orm::key::Form::Last).with(#orm::key::Modifier::#modifier),
            lazy: #lazy,
            value_type: #value_type,
        })
    });
    let wide_consts = wides.iter().enumerate().filter_map(|(position, (f, _))| {
        let (k, v) = crate::check::map_types(&f.ty)?;
        let konst = format_ident!("{}", crate::check::field_const(f), span = f.ident.span());
        let doc = lit(&format!("The map `{}`, stored as columns: pass it to `Repository::wide`.", f.ident));
        Some(quote! {
            #[doc = #doc]
            pub const #konst: #orm::wide::Wide<#ident, #k, #v> = #orm::wide::Wide::new(#position);
        })
    });
    let wide_cells = (!wides.is_empty()).then(|| {
        let each = wides.iter().enumerate().map(|(position, (f, _))| {
            let name = &f.ident;
            quote_spanned!(f.ty.span()=> #private::encode_entries(&S.wide[#position], &self.#name)?)
        });
        quote! {
            fn wide_cells(&self) -> #orm::Result<::std::vec::Vec<#orm::wide::WideCells>> {
                const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
                ::core::result::Result::Ok(::std::vec![#(#each),*])
            }
        }
    });

    // Encoding the first `k` parts of a key held in `src` (`key.` fields or prefix fields).
    let encode_parts = |k: usize| {
        let steps = parts.iter().take(k).enumerate().map(|(i, p)| {
            let f = &p.field.ident;
            let list = &p.list;
            let index = p.index;
            let end = (i + 1 == partition.len()).then(|| quote!(b.end_partition();));
            let bucket = (bucket_field.as_deref() == Some(&f.to_string()))
                .then(|| quote!(b.bucket(#orm::entity::BucketValue::bucket_value(&src.#f));));
            let part = if p.field.uid.is_some() {
                quote!(b.uid(&src.#f, &S.#list[#index], uids)?;)
            } else {
                quote!(b.part(&src.#f, &S.#list[#index])?;)
            };
            quote! {
                #part
                #bucket
                #end
            }
        });
        let start = partition.is_empty().then(|| quote!(b.end_partition();));
        let complete = k == n_parts;
        quote! {
            const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
            let _ = uids;
            let mut b = #orm::key::KeyBuilder::new(S);
            #start
            #(#steps)*
            ::core::result::Result::Ok(b.finish(#complete))
        }
    };
    let encode_key = encode_parts(n_parts);

    // Key struct and conversions.
    let key_names: Vec<&Ident> = parts.iter().map(|p| &p.field.ident).collect();
    let key_types: Vec<&syn::Type> = parts.iter().map(|p| &p.field.ty).collect();
    let key_doc = lit(&format!("The row key of [`{ident}`]: its key parts, in key order."));
    let key_docs = key_names.iter().map(|n| lit(&format!("Key part `{n}`.")));
    // String parts also take `&str`, so `customers.get("c-1")` compiles: one more impl with
    // every `String` part borrowed (the other parts' types stay, so literals still infer).
    let is_string = |t: &syn::Type| crate::check::type_name(t).as_deref() == Some("String");
    let has_string = key_types.iter().any(|t| is_string(t));
    let borrowed: Vec<TokenStream> =
        key_types.iter().map(|t| if is_string(t) { quote!(&'cellar_key str) } else { quote!(#t) }).collect();
    let owned: Vec<TokenStream> = key_types
        .iter()
        .zip(0..n_parts)
        .map(|(t, i)| {
            let i = syn::Index::from(i);
            let value = if n_parts == 1 { quote!(t) } else { quote!(t.#i) };
            if is_string(t) {
                quote!(::std::string::ToString::to_string(#value))
            } else {
                value
            }
        })
        .collect();
    let from_impl = if n_parts == 1 {
        let (n, t) = (key_names[0], key_types[0]);
        let from_str = has_string.then(|| {
            quote! {
                #[automatically_derived]
                impl<'cellar_key> ::core::convert::From<&'cellar_key str> for #key_ident {
                    fn from(t: &'cellar_key str) -> Self { #key_ident { #n: #(#owned)* } }
                }
            }
        });
        quote! {
            #[automatically_derived]
            impl ::core::convert::From<#t> for #key_ident {
                fn from(#n: #t) -> Self { #key_ident { #n } }
            }
            #from_str
        }
    } else {
        let idx = (0..n_parts).map(syn::Index::from);
        let from_str = has_string.then(|| {
            quote! {
                #[automatically_derived]
                impl<'cellar_key> ::core::convert::From<(#(#borrowed,)*)> for #key_ident {
                    fn from(t: (#(#borrowed,)*)) -> Self { #key_ident { #(#key_names: #owned,)* } }
                }
            }
        });
        quote! {
            #[automatically_derived]
            impl ::core::convert::From<(#(#key_types,)*)> for #key_ident {
                fn from(t: (#(#key_types,)*)) -> Self { #key_ident { #(#key_names: t.#idx,)* } }
            }
            #from_str
        }
    };

    // Prefix builders: `<Key>::<first>(v)` then one method per following part.
    let prefix_ident =
        |k: usize| if k == n_parts { key_ident.clone() } else { format_ident!("{}Prefix{}", key_ident, k) };
    let mut prefixes = Vec::new();
    for k in 0..n_parts {
        let next = prefix_ident(k + 1);
        let (n, t) = (key_names[k], key_types[k]);
        let have = &key_names[..k];
        let method_doc = lit(&format!("Adds key part `{n}`."));
        let method = quote! {
            #[doc = #method_doc]
            pub fn #n(self, #n: #t) -> #next { #next { #(#have: self.#have,)* #n } }
        };
        if k == 0 {
            let doc = lit(&format!("Starts a key or key prefix of [`{ident}`] with `{n}`."));
            prefixes.push(quote! {
                impl #key_ident {
                    #[doc = #doc]
                    pub fn #n(#n: #t) -> #next { #next { #n } }
                }
            });
            continue;
        }
        let this = prefix_ident(k);
        let types = &key_types[..k];
        let doc = lit(&format!("The first {k} key part(s) of [`{ident}`]: a scan prefix."));
        let encode = encode_parts(k);
        // Only the user's prefix scans build these: an entity never scanned by prefix would
        // otherwise warn about a type it did not write.
        prefixes.push(quote! {
            #[doc = #doc]
            #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::cmp::PartialEq)]
            #[allow(dead_code)]
            #vis struct #this { #(#have: #types,)* }
            impl #this { #method }
            #[automatically_derived]
            impl #orm::KeyPrefix<#ident> for #this {
                fn encode_prefix_in(
                    &self,
                    uids: &dyn #orm::key::UidResolver,
                ) -> ::core::result::Result<#orm::key::RowKey, #orm::key::KeyError> {
                    let src = self;
                    #encode
                }
            }
        });
    }

    // Entity -> cells.
    let cells = stored.iter().filter(|f| f.counter.is_none()).map(|f| {
        let i = column_index(f).unwrap_or_default();
        let name = &f.ident;
        let field = lit(&name.to_string());
        // serde and blob fields encode through a helper; the others through `Column`.
        let helper = if f.serde.is_some() { Some(quote!(encode_serde)) } else { f.blob.map(|_| quote!(encode_blob)) };
        let value = if let Some(helper) = helper.as_ref().filter(|_| is_option(&f.ty)) {
            quote!(match &self.#name {
                ::core::option::Option::Some(v) => ::core::option::Option::Some(#private::#helper(#entity_name, #field, v)?),
                ::core::option::Option::None => ::core::option::Option::None,
            })
        } else if let Some(helper) = helper {
            quote!(::core::option::Option::Some(#private::#helper(#entity_name, #field, &self.#name)?))
        } else {
            quote!(#orm::value::Column::encode_cell(&self.#name))
        };
        quote!(#orm::entity::CellValue { family: S.columns[#i].family, qualifier: S.columns[#i].qualifier, value: #value })
    });
    let cells: Vec<TokenStream> = cells.collect();
    // An `Option` field set to `None` also deletes the cells of its earlier qualifiers, which
    // reads would otherwise find.
    let alias_deletes: Vec<TokenStream> = stored
        .iter()
        .filter(|f| !f.aliases.is_empty() && is_option(&f.ty))
        .map(|f| {
            let i = column_index(f).unwrap_or_default();
            let name = &f.ident;
            let aliases = f.aliases.iter().map(|a| lit(&a.value));
            quote! {
                if self.#name.is_none() {
                    for qualifier in [#(#aliases),*] {
                        out.push(#orm::entity::CellValue { family: S.columns[#i].family, qualifier, value: ::core::option::Option::None }.into_mutation());
                    }
                }
            }
        })
        .collect();

    // Row -> entity. Hashed parts leave a digest; their values are restored from their
    // columns only after the whole key (record type included) has been read.
    let digest_of = |f: &FieldAttr| format_ident!("__digest_{}", f.ident);
    let uid_of = |f: &FieldAttr| format_ident!("__uid_{}", f.ident);
    let read_parts = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (name, ty, list, index) = (&p.field.ident, &p.field.ty, &p.list, p.index);
            let end = (i + 1 == partition.len()).then(|| quote!(reader.end_partition()?;));
            let read = if p.field.is_hashed() {
                let digest = digest_of(p.field);
                quote!(let #digest = reader.digest(&S.#list[#index])?;)
            } else if p.field.uid.is_some() {
                let uid = uid_of(p.field);
                quote!(let #uid = reader.uid(&S.#list[#index])?;)
            } else {
                quote!(let #name: #ty = reader.part::<#ty>(&S.#list[#index])?;)
            };
            quote! {
                #read
                #end
            }
        })
        .collect::<Vec<_>>();
    let restore_hashed = parts
        .iter()
        .filter(|p| p.field.is_hashed())
        .map(|p| {
            let (name, ty, list, index) = (&p.field.ident, &p.field.ty, &p.list, p.index);
            let digest = digest_of(p.field);
            let c = column_index(p.field).unwrap_or_default();
            quote!(let #name: #ty = #private::restore_hashed::<#ty>(&#digest, row, &S.#list[#index], &S.columns[#c])?;)
        })
        .collect::<Vec<_>>();
    let restore_names = parts
        .iter()
        .filter(|p| p.field.uid.is_some())
        .map(|p| {
            let (name, list, index) = (&p.field.ident, &p.list, p.index);
            let uid = uid_of(p.field);
            quote!(let #name: ::std::string::String = #private::name_of(&S.#list[#index], #uid, uids)?;)
        })
        .collect::<Vec<_>>();
    let start_partition = partition.is_empty().then(|| quote!(reader.end_partition()?;));
    let read_columns = e.fields.iter().filter(|f| !f.is_key_part()).map(|f| {
        let name = &f.ident;
        let ty = &f.ty;
        if f.skip.is_some() || f.wide.as_ref().is_some_and(|w| w.value.lazy) {
            return quote!(let #name: #ty = ::core::default::Default::default(););
        }
        if f.wide.is_some() {
            let position = wides.iter().position(|(w, _)| w.ident == f.ident).unwrap_or_default();
            return quote_spanned!(ty.span()=> let #name: #ty = #private::decode_entries(row, &S.wide[#position], as_of)?;);
        }
        let i = column_index(f).unwrap_or_default();
        if let Some(default) = &f.default {
            let expr = default_expr(&default.value);
            let read = if f.serde.is_some() {
                quote!(decode_serde_opt::<#ty>)
            } else if f.blob.is_some() {
                quote!(decode_blob_opt::<#ty>)
            } else {
                quote!(decode_column::<::core::option::Option<#ty>>)
            };
            return quote!(let #name: #ty = match #private::#read(row, &S.columns[#i], as_of)? {
                ::core::option::Option::Some(v) => v,
                ::core::option::Option::None => #expr,
            };);
        }
        if f.counter.is_some() {
            quote!(let #name: #ty = #private::decode_column::<::core::option::Option<i64>>(row, &S.columns[#i], as_of)?.unwrap_or(0);)
        } else if f.serde.is_some() && is_option(ty) {
            quote!(let #name: #ty = #private::decode_serde_opt(row, &S.columns[#i], as_of)?;)
        } else if f.serde.is_some() {
            quote!(let #name: #ty = #private::decode_serde(row, &S.columns[#i], as_of)?;)
        } else if f.blob.is_some() && is_option(ty) {
            quote!(let #name: #ty = #private::decode_blob_opt(row, &S.columns[#i], as_of)?;)
        } else if f.blob.is_some() {
            quote!(let #name: #ty = #private::decode_blob(row, &S.columns[#i], as_of)?;)
        } else {
            quote!(let #name: #ty = #private::decode_column(row, &S.columns[#i], as_of)?;)
        }
    });
    let all_fields: Vec<&Ident> = e.fields.iter().map(|f| &f.ident).collect();

    let version = e.fields.iter().find(|f| f.version.is_some()).map(|f| {
        let name = &f.ident;
        quote! {
            fn version(&self) -> ::core::option::Option<u64> { ::core::option::Option::Some(self.#name) }
            fn set_version(&mut self, version: u64) { self.#name = version; }
        }
    });
    let counters = e.fields.iter().filter(|f| f.counter.is_some()).map(|f| {
        let konst = format_ident!("{}", f.ident.to_string().to_uppercase());
        let field = lit(&f.ident.to_string());
        let doc = lit(&format!("The counter stored for `{}`: pass it to `Repository::increment`.", f.ident));
        quote!(#[doc = #doc] pub const #konst: #orm::Counter<#ident> = #orm::Counter::new(#field);)
    });

    // Secondary indexes: their specs in the schema, a typed constant each on the entity.
    let index_specs = e.indexes.iter().map(|index| {
        let parts = index.parts.iter().filter_map(|p| Some((e.fields.iter().find(|f| f.ident == p.field)?, p)));
        let parts = parts.map(|(f, p)| {
            let (field, ty) = (lit(&f.ident.to_string()), &f.ty);
            let column = column_index(f).unwrap_or_default();
            let form = match &f.fixed {
                Some(n) => {
                    let n = n.value;
                    quote!(#orm::key::Form::Fixed(#n))
                }
                // Never `Last`: the primary key follows the values.
                None => quote!(#orm::key::Form::Delimited),
            };
            let modifier = match p.modifier.as_ref().map(|m| m.value) {
                Some(ModifierAttr::Desc | ModifierAttr::ReverseTs) => quote!(Desc),
                Some(ModifierAttr::Reversed) => quote!(Reversed),
                Some(ModifierAttr::Md5) => quote!(Md5),
                None => quote!(None),
            };
            let ty_name = type_string(ty);
            // Spanned at the type: a type that is no key part fails to compile there.
            let encode = match option_element(ty) {
                Some(inner) => quote_spanned!(ty.span()=> #private::encode_optional::<#inner>),
                None => quote_spanned!(ty.span()=> #private::encode_required::<#ty>),
            };
            quote!(#orm::index::IndexPart {
                field: #field,
                column: #column,
                spec: #orm::key::PartSpec::new(#field, #form).with(#orm::key::Modifier::#modifier),
                type_name: #ty_name,
                encode: #encode,
            })
        });
        let name = lit(&index.name.value);
        let unique = index.unique;
        let include =
            index.include.iter().filter_map(|i| e.fields.iter().find(|f| f.ident == *i)).filter_map(&column_index);
        quote!(#orm::index::IndexSpec { name: #name, parts: &[#(#parts),*], unique: #unique, include: &[#(#include),*] })
    });
    let index_consts = e.indexes.iter().enumerate().map(|(position, index)| {
        let konst = format_ident!("{}", index.name.value.to_uppercase(), span = index.name.span);
        let doc = lit(&format!("The index `{}`: pass it to `Repository::index`.", index.name.value));
        let types: Vec<&syn::Type> = index
            .parts
            .iter()
            .filter_map(|p| e.fields.iter().find(|f| f.ident == p.field))
            .map(|f| option_element(&f.ty).unwrap_or(&f.ty))
            .collect();
        let value = match types.as_slice() {
            [one] => quote!(#one),
            many => quote!((#(#many,)*)),
        };
        quote! {
            #[doc = #doc]
            pub const #konst: #orm::index::Index<#ident, #value> = #orm::index::Index::new(#position);
        }
    });

    let standalone = (e.kind != crate::attr::Kind::Entity).then(|| {
        quote!(
            const STANDALONE: bool = false;
        )
    });

    quote! {
        #[doc = #key_doc]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::cmp::PartialEq)]
        #vis struct #key_ident { #(#[doc = #key_docs] pub #key_names: #key_types,)* }

        #(#prefixes)*

        const _: () = {
            #from_impl

            #[automatically_derived]
            impl #orm::KeyPrefix<#ident> for #key_ident {
                fn encode_prefix_in(
                    &self,
                    uids: &dyn #orm::key::UidResolver,
                ) -> ::core::result::Result<#orm::key::RowKey, #orm::key::KeyError> {
                    <#ident as #orm::Entity>::row_key_in(self, uids)
                }
            }

            #[automatically_derived]
            impl #ident {
                #(#counters)*
                #(#index_consts)*
                #(#wide_consts)*
            }

            #[automatically_derived]
            impl #orm::Entity for #ident {
                type Key = #key_ident;

                const SCHEMA: #orm::Schema = #orm::Schema {
                    entity: #entity_name,
                    table: #table,
                    families: &[#(#family_schemas),*],
                    record_type: #record_type,
                    salt: #salt,
                    partition: &[#(#partition_fields),*],
                    key: &[#(#key_fields),*],
                    columns: &[#(#column_specs),*],
                    indexes: &[#(#index_specs),*],
                    wide: &[#(#wide_specs),*],
                    eager_families: &[#(#eager_families),*],
                };

                #standalone

                fn key(&self) -> #key_ident {
                    #key_ident { #(#key_names: ::core::clone::Clone::clone(&self.#key_names),)* }
                }

                fn row_key_in(
                    src: &#key_ident,
                    uids: &dyn #orm::key::UidResolver,
                ) -> ::core::result::Result<#orm::key::RowKey, #orm::key::KeyError> {
                    #encode_key
                }

                fn cells(&self) -> #orm::Result<::std::vec::Vec<#orm::entity::CellValue>> {
                    const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
                    ::core::result::Result::Ok(::std::vec![#(#cells),*])
                }

                fn push_cell_mutations(
                    &self,
                    out: &mut ::std::vec::Vec<#orm::store::CellMutation>,
                ) -> #orm::Result<()> {
                    const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
                    #(out.push(#orm::entity::CellValue::into_mutation(#cells));)*
                    #(#alias_deletes)*
                    ::core::result::Result::Ok(())
                }

                fn key_from_row_in(
                    row: #orm::store::LentRow<'_>,
                    uids: &dyn #orm::key::UidResolver,
                ) -> ::core::result::Result<#key_ident, #orm::entity::FieldError> {
                    const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
                    let _ = uids;
                    let mut reader = #orm::key::KeyReader::new(S, row.key())?;
                    #start_partition
                    #(#read_parts)*
                    reader.finish()?;
                    #(#restore_hashed)*
                    #(#restore_names)*
                    ::core::result::Result::Ok(#key_ident { #(#key_names),* })
                }

                fn from_row_in(
                    row: #orm::store::LentRow<'_>,
                    as_of: u64,
                    uids: &dyn #orm::key::UidResolver,
                ) -> ::core::result::Result<Self, #orm::entity::FieldError> {
                    const S: &#orm::Schema = &<#ident as #orm::Entity>::SCHEMA;
                    let _ = uids;
                    let mut reader = #orm::key::KeyReader::new(S, row.key())?;
                    #start_partition
                    #(#read_parts)*
                    reader.finish()?;
                    #(#restore_hashed)*
                    #(#restore_names)*
                    #(#read_columns)*
                    ::core::result::Result::Ok(#ident { #(#all_fields),* })
                }

                #version
                #wide_cells
            }
        };
    }
}
