//! `#[derive(Versioned)]`: a type's blob format and the chain of its earlier versions, from
//! `#[cellar(blob(version = 3, codec = "msgpack", compress = "zstd", compress_above = 256,
//! legacy = 1, history(1 = OrderV1 via "bincode", 2 = OrderV2)))]`.
//!
//! Parse, check and expand in one module: the grammar is small. Every mistake is reported
//! together, at its tokens; a missing `From`/`TryFrom` between two versions is reported by
//! the compiler at the history entry of the version it starts from.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{DeriveInput, Ident, LitInt, LitStr, Path, Token};

use crate::attr::{skip_value, Ctx};

const CODEC_NAMES: [&str; 3] = ["msgpack", "bincode", "json"];
const COMPRESSIONS: [&str; 3] = ["none", "lz4", "zstd"];

/// One earlier version: `N = Type` or `N = Type via "codec"`.
struct HistoryEntry {
    version: LitInt,
    ty: Path,
    codec: Option<LitStr>,
}

impl Parse for HistoryEntry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let version: LitInt = input.parse()?;
        input.parse::<Token![=]>()?;
        let ty: Path = input.parse()?;
        let codec = if input.peek(Ident) {
            let via: Ident = input.parse()?;
            if via != "via" {
                return Err(syn::Error::new(via.span(), "expected `via \"codec\"` or `,`"));
            }
            Some(input.parse()?)
        } else {
            None
        };
        Ok(HistoryEntry { version, ty, codec })
    }
}

/// The parsed `blob(...)` attribute.
#[derive(Default)]
struct BlobAttr {
    version: Option<(u32, Span)>,
    codec: Option<LitStr>,
    compress: Option<LitStr>,
    compress_above: Option<usize>,
    legacy: Option<(u32, Span)>,
    tag: Option<LitStr>,
    history: Vec<HistoryEntry>,
}

fn parse_blob(ctx: &mut Ctx, input: &DeriveInput) -> Option<BlobAttr> {
    let mut found = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("cellar")) {
        let result = attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident("blob") {
                // Another derive's key (an aggregate root's `table`, `strategy`, ...): theirs to check.
                return skip_value(&meta);
            }
            let mut blob = BlobAttr::default();
            meta.parse_nested_meta(|inner| {
                let key = inner.path.get_ident().map(Ident::to_string).unwrap_or_default();
                let span = inner.path.span();
                match key.as_str() {
                    "version" | "legacy" => {
                        let n: LitInt = inner.value()?.parse()?;
                        let v = (n.base10_parse::<u32>()?, n.span());
                        if key == "version" {
                            blob.version = Some(v)
                        } else {
                            blob.legacy = Some(v)
                        }
                    }
                    "codec" => blob.codec = Some(inner.value()?.parse()?),
                    "compress" => blob.compress = Some(inner.value()?.parse()?),
                    "tag" => blob.tag = Some(inner.value()?.parse()?),
                    "compress_above" => {
                        let n: LitInt = inner.value()?.parse()?;
                        blob.compress_above = Some(n.base10_parse()?);
                    }
                    "history" => {
                        let content;
                        syn::parenthesized!(content in inner.input);
                        let entries = Punctuated::<HistoryEntry, Token![,]>::parse_terminated(&content)?;
                        blob.history.extend(entries);
                    }
                    _ => {
                        ctx.error(
                            span,
                            format!(
                                "unknown key `{key}` in blob(...); one of: version, codec, compress, \
                                 compress_above, legacy, tag, history"
                            ),
                        );
                        // Skip its value so the keys after it are still read.
                        skip_value(&inner)?;
                    }
                }
                Ok(())
            })?;
            found = Some(blob);
            Ok(())
        });
        if let Err(e) = result {
            ctx.error(e.span(), e);
        }
    }
    if found.is_none() {
        ctx.error(input.ident.span(), "#[derive(Versioned)] needs #[cellar(blob(version = N, ...))]");
    }
    found
}

fn codec_tokens(blob_mod: &TokenStream, name: &str) -> TokenStream {
    match name {
        "bincode" => quote!(#blob_mod::Codec::Bincode),
        "json" => quote!(#blob_mod::Codec::Json),
        _ => quote!(#blob_mod::Codec::MessagePack),
    }
}

fn check_name(ctx: &mut Ctx, lit: &LitStr, allowed: &[&str], what: &str) {
    if !allowed.contains(&lit.value().as_str()) {
        ctx.error(lit.span(), format!("unknown {what} `{}`; one of: {}", lit.value(), allowed.join(", ")));
    }
}

fn check(ctx: &mut Ctx, blob: &mut BlobAttr, ident: &Ident) {
    let Some((current, _)) = blob.version else {
        ctx.error(ident.span(), "blob(...) needs `version = N`: the version this code writes");
        return;
    };
    for lit in blob.codec.iter().chain(blob.history.iter().filter_map(|h| h.codec.as_ref())) {
        check_name(ctx, lit, &CODEC_NAMES, "codec");
    }
    if let Some(lit) = &blob.compress {
        check_name(ctx, lit, &COMPRESSIONS, "compression");
    }
    let mut seen: Vec<u32> = Vec::new();
    for h in &blob.history {
        match h.version.base10_parse::<u32>() {
            Ok(v) if v >= current => {
                ctx.error(h.version.span(), format!("history holds versions older than the current one ({current})"))
            }
            Ok(v) if seen.contains(&v) => ctx.error(h.version.span(), format!("version {v} is declared twice")),
            Ok(v) => seen.push(v),
            Err(e) => ctx.error(h.version.span(), e),
        }
    }
    if let Some((legacy, span)) = blob.legacy {
        if legacy != current && !seen.contains(&legacy) {
            ctx.error(span, format!("legacy version {legacy} is not in history(...)"));
        }
    }
    blob.history.sort_by_key(|h| h.version.base10_parse::<u32>().unwrap_or(0));
}

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut ctx = Ctx::default();
    let ident = &input.ident;
    let krate = crate::attr::crate_root(&mut ctx, &input.attrs);
    let mut parsed = parse_blob(&mut ctx, input);
    if let Some(blob) = parsed.as_mut() {
        check(&mut ctx, blob, ident);
    }
    // Without a parsed `blob(...)`, parsing has recorded why.
    ctx.finish()?;
    let blob = parsed.ok_or_else(|| syn::Error::new(ident.span(), "#[derive(Versioned)] needs blob(...)"))?;
    Ok(expand(&krate, ident, &blob))
}

fn expand(krate: &TokenStream, ident: &Ident, blob: &BlobAttr) -> TokenStream {
    let blob_mod = quote!(#krate::orm::blob);
    let private = quote!(#krate::orm::__private);
    let current = blob.version.map_or(0, |v| v.0);
    let codec = codec_tokens(&blob_mod, &blob.codec.as_ref().map_or("msgpack".into(), LitStr::value));
    let compression = match blob.compress.as_ref().map(LitStr::value).as_deref() {
        Some("lz4") => quote!(#blob_mod::Compression::Lz4),
        Some("zstd") => quote!(#blob_mod::Compression::Zstd(3)),
        _ => quote!(#blob_mod::Compression::None),
    };
    let above = blob.compress_above.unwrap_or(256);
    let type_name = blob.tag.as_ref().map_or_else(|| ident.to_string(), LitStr::value);
    let legacy = match blob.legacy {
        Some((v, _)) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    };
    let versions: Vec<u32> = blob.history.iter().map(|h| h.version.base10_parse().unwrap_or(0)).collect();
    let history = blob.history.iter().zip(&versions).map(|(h, v)| {
        let codec = codec_tokens(&blob_mod, &h.codec.as_ref().map_or("msgpack".into(), LitStr::value));
        let name = path_name(&h.ty);
        quote!(#blob_mod::HistoricVersion { version: #v, codec: #codec, type_name: #name })
    });
    // Version i's arm: decode as its type, then one step per later version up to Self.
    let arms = blob.history.iter().enumerate().map(|(i, h)| {
        let v = versions[i];
        let ty = &h.ty;
        let name = path_name(ty);
        let steps = (i..blob.history.len()).map(|j| {
            let span = blob.history[j].ty.segments.last().map_or(Span::call_site(), |s| s.ident.span());
            let from = versions[j];
            let (to, target) = match blob.history.get(j + 1) {
                Some(next) => (versions[j + 1], {
                    let t = &next.ty;
                    quote!(#t)
                }),
                None => (current, quote!(#ident)),
            };
            // Spanned at the entry (the path to `step` too), so a missing conversion is reported there.
            let step = respan(quote!(#private::step), span);
            quote_spanned!(span=> let value: #target = #step(#from, #to, value)?;)
        });
        quote! {
            #v => {
                let value = #private::decode_version::<#ty>(#name, #v, codec, payload)?;
                #(#steps)*
                ::core::result::Result::Ok(value)
            }
        }
    });
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #blob_mod::Versioned for #ident {
                const TYPE_NAME: &'static str = #type_name;
                const FORMAT: #blob_mod::BlobFormat =
                    #blob_mod::BlobFormat::new(#current, #codec).compressed(#compression, #above);
                const HISTORY: &'static [#blob_mod::HistoricVersion] = &[#(#history),*];
                const LEGACY: ::core::option::Option<u32> = #legacy;

                #[allow(unreachable_code, unused_variables)]
                fn migrate(
                    version: u32,
                    codec: #blob_mod::Codec,
                    payload: &[u8],
                ) -> ::core::result::Result<Self, #blob_mod::VersionError> {
                    match version {
                        #(#arms)*
                        found => ::core::result::Result::Err(#private::unknown_version::<Self>(found)),
                    }
                }
            }
        };
    }
}

/// `tokens` with every span set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let proc_macro2::TokenTree::Group(g) = &tree {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tree = group.into();
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// The last segment of a path, for messages: `OrderV1`.
fn path_name(path: &Path) -> String {
    path.segments.last().map_or_else(String::new, |s| s.ident.to_string())
}
