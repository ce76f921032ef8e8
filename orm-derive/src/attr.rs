//! Phase one: read `#[cellar(...)]` attributes into a plain model of the entity. Every problem
//! is recorded in the [`Ctx`] and parsing goes on, so one compile reports them all.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned as _;
use syn::{Attribute, DeriveInput, Expr, ExprLit, Ident, Lit, LitInt, LitStr, Type};

/// Attribute keys, in one place.
pub mod sym {
    pub const CELLAR: &str = "cellar";
    pub const TABLE: &str = "table";
    pub const FAMILY: &str = "family";
    pub const RECORD_TYPE: &str = "record_type";
    pub const SALT: &str = "salt";
    pub const BUCKETS: &str = "buckets";
    pub const RANDOM: &str = "random";
    pub const BUCKET: &str = "bucket";
    pub const FIELD: &str = "field";
    pub const MAX_VERSIONS: &str = "max_versions";
    pub const TTL: &str = "ttl";
    pub const FAMILY_OPTIONS: &str = "family_options";
    pub const NAME: &str = "name";
    pub const PARTITION: &str = "partition";
    pub const KEY: &str = "key";
    pub const DESC: &str = "desc";
    pub const REVERSE_TS: &str = "reverse_ts";
    pub const REVERSED: &str = "reversed";
    pub const HASH: &str = "hash";
    pub const FIXED: &str = "fixed";
    pub const COLUMN: &str = "column";
    pub const COUNTER: &str = "counter";
    pub const VERSION: &str = "version";
    pub const SKIP: &str = "skip";
    pub const SERDE: &str = "serde";
    pub const BLOB: &str = "blob";
    pub const STRATEGY: &str = "strategy";
    pub const CHILDREN: &str = "children";
    pub const INDEX: &str = "index";
    pub const ON: &str = "on";
    pub const INCLUDE: &str = "include";
    pub const UNIQUE: &str = "unique";
    pub const COLUMNS: &str = "columns";
    pub const PREFIX: &str = "prefix";
    pub const LAZY: &str = "lazy";
    pub const UID: &str = "uid";
    pub const KIND: &str = "kind";
    pub const WIDTH: &str = "width";
    pub const DEFAULT: &str = "default";
    pub const RENAME_FROM: &str = "rename_from";
    pub const ALIASES: &str = "aliases";
    pub const CRATE: &str = "crate";
}

/// Which derive is parsing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// `#[derive(Entity)]`: a row of its own.
    Entity,
    /// `#[derive(Aggregate)]`: the root of an object graph.
    Aggregate,
    /// `#[derive(Part)]`: an object inside an aggregate.
    Part,
}

impl Kind {
    pub fn derive_name(self) -> &'static str {
        match self {
            Kind::Entity => "Entity",
            Kind::Aggregate => "Aggregate",
            Kind::Part => "Part",
        }
    }
}

/// Collects errors; they are emitted together at the end.
#[derive(Default)]
pub struct Ctx {
    errors: Vec<syn::Error>,
}

impl Ctx {
    pub fn error(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, msg));
    }

    pub fn finish(self) -> Result<(), syn::Error> {
        let mut errors = self.errors.into_iter();
        let Some(mut first) = errors.next() else { return Ok(()) };
        errors.for_each(|e| first.combine(e));
        Err(first)
    }
}

/// A value with where it was written.
#[derive(Clone)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

/// How the entity's keys start.
#[derive(Clone)]
pub enum SaltAttr {
    Hash { buckets: u8 },
    Random { buckets: u8 },
    Bucket { field: Spanned<String>, buckets: u8 },
}

/// Settings of one family.
#[derive(Clone, Default)]
pub struct FamilyAttr {
    pub name: String,
    pub max_versions: Option<u32>,
    pub ttl: Option<u64>,
    /// Where `ttl` was written.
    pub ttl_span: Option<Span>,
    pub span: Option<Span>,
}

/// The struct-level attributes.
pub struct EntityAttr {
    pub kind: Kind,
    /// The path generated code reaches Cellar by: `::cellar`, or `crate = "..."`.
    pub krate: TokenStream,
    pub ident: Ident,
    pub vis: syn::Visibility,
    pub table: String,
    pub family: String,
    pub record_type: Option<u8>,
    pub salt: Option<Spanned<SaltAttr>>,
    pub families: Vec<FamilyAttr>,
    pub fields: Vec<FieldAttr>,
    /// `strategy = "..."` of an aggregate root.
    pub strategy: Option<Spanned<String>>,
    /// Where struct-level attributes a part may not take were written, by name.
    pub root_only: Vec<Spanned<String>>,
    /// Every key part is escaped and terminated, never raw: something follows the key (an
    /// aggregate's child keys).
    pub all_delimited: bool,
    /// `blob(...)` on the struct: a `blob` aggregate stored as its `Versioned` value (the
    /// contents are `#[derive(Versioned)]`'s to read).
    pub versioned_blob: Option<Span>,
    /// Secondary indexes: the struct-level `index(...)` ones, then the field-level
    /// `index = "..."` ones in field order.
    pub indexes: Vec<IndexAttr>,
}

/// One field of an index's `on(...)`, with its modifier (`desc` or `hash = "md5"`).
pub struct IndexPartAttr {
    pub field: Ident,
    pub modifier: Option<Spanned<ModifierAttr>>,
}

/// A secondary index: `index(name = "...", on(...), include(...), unique)` on the struct, or
/// `index = "...", unique` on a field.
pub struct IndexAttr {
    pub name: Spanned<String>,
    pub parts: Vec<IndexPartAttr>,
    pub include: Vec<Ident>,
    pub unique: bool,
    /// Where it was declared.
    pub span: Span,
}

/// Key-part modifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ModifierAttr {
    Desc,
    ReverseTs,
    Reversed,
    Md5,
}

/// `columns(family = "p", prefix = "...", desc, lazy)`: a map whose entries are columns.
pub struct WideAttr {
    pub family: Option<Spanned<String>>,
    pub prefix: String,
    pub desc: bool,
    pub lazy: bool,
}

/// `uid = "kind"` or `uid(kind = "...", width = N)`: a string key part stored as a fixed-width
/// uid of its name.
pub struct UidAttr {
    pub kind: String,
    pub width: u8,
}

/// The uid width of `uid = "kind"` (OpenTSDB's default: 16 million names).
pub const DEFAULT_UID_WIDTH: u8 = 3;

/// One field's attributes.
pub struct FieldAttr {
    pub ident: Ident,
    pub ty: Type,
    pub partition: Option<Span>,
    pub key: Option<Span>,
    pub modifiers: Vec<Spanned<ModifierAttr>>,
    pub fixed: Option<Spanned<u16>>,
    pub family: Option<Spanned<String>>,
    pub column: Option<Spanned<String>>,
    pub counter: Option<Span>,
    pub version: Option<Span>,
    pub skip: Option<Span>,
    pub serde: Option<Span>,
    /// `blob`: the value as a versioned blob (the field's type is `Versioned`).
    pub blob: Option<Span>,
    /// `children`: a collection of parts.
    pub children: Option<Span>,
    /// `record_type = N` on a children field.
    pub record_type: Option<Spanned<u8>>,
    /// `index = "name"`: a single-field index on this field.
    pub index: Option<Spanned<String>>,
    /// `unique`: the field's index holds one entity per value.
    pub unique: Option<Span>,
    /// `columns(...)`: a map stored as columns of its own family.
    pub wide: Option<Spanned<WideAttr>>,
    /// `uid`: a key part stored as the uid of its name.
    pub uid: Option<Spanned<UidAttr>>,
    /// `default` (`Default::default()`) or `default = "path::to::fn"`: what a row without the
    /// cell reads as.
    pub default: Option<Spanned<Option<syn::Path>>>,
    /// `rename_from = "q"` and `aliases = ["q", ...]`: earlier qualifiers of the column, in
    /// its family, read when the current one is absent or older.
    pub aliases: Vec<Spanned<String>>,
}

impl FieldAttr {
    pub fn is_key_part(&self) -> bool {
        self.partition.is_some() || self.key.is_some()
    }

    /// Says how the field maps to a key part or a cell: what a collection stored another way
    /// (`children`, `columns(...)`) cannot take.
    pub fn has_cell_attributes(&self) -> bool {
        self.is_key_part()
            || self.counter.is_some()
            || self.version.is_some()
            || self.column.is_some()
            || self.family.is_some()
            || self.serde.is_some()
            || self.blob.is_some()
            || self.skip.is_some()
            || !self.modifiers.is_empty()
            || self.default.is_some()
            || !self.aliases.is_empty()
    }

    /// A key part stored as its MD5 digest (its value goes in a column).
    pub fn is_hashed(&self) -> bool {
        self.modifiers.iter().any(|m| m.value == ModifierAttr::Md5)
    }

    /// Stored in a column: every field but skipped ones and key parts that are not hashed.
    pub fn is_stored(&self) -> bool {
        self.skip.is_none()
            && self.children.is_none()
            && self.wide.is_none()
            && (!self.is_key_part() || self.is_hashed())
    }
}

/// A literal as written, also when a `macro_rules!` fragment wrapped it in an invisible group.
fn ungroup(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(g) => ungroup(&g.expr),
        other => other,
    }
}

fn lit_str(ctx: &mut Ctx, expr: &Expr) -> Option<LitStr> {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s.clone()),
        other => {
            ctx.error(other.span(), "expected a string literal");
            None
        }
    }
}

fn lit_int<T: std::str::FromStr>(ctx: &mut Ctx, expr: &Expr, what: &str) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => match LitInt::base10_parse::<T>(i) {
            Ok(v) => Some(v),
            Err(e) => {
                ctx.error(i.span(), format!("{what}: {e}"));
                None
            }
        },
        other => {
            ctx.error(other.span(), format!("{what}: expected an integer"));
            None
        }
    }
}

/// Runs `each` on every `key` or `key = value` inside `#[cellar(...)]` attributes.
fn for_each_meta(
    ctx: &mut Ctx,
    attrs: &[Attribute],
    mut each: impl FnMut(&mut Ctx, syn::meta::ParseNestedMeta<'_>) -> syn::Result<()>,
) {
    for attr in attrs.iter().filter(|a| a.path().is_ident(sym::CELLAR)) {
        let mut local = Vec::new();
        let result = attr.parse_nested_meta(|meta| {
            let mut inner = Ctx::default();
            let r = each(&mut inner, meta);
            local.extend(inner.errors);
            r
        });
        ctx.errors.extend(local);
        if let Err(e) = result {
            ctx.errors.push(e);
        }
    }
}

fn value_expr(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Expr> {
    meta.value()?.parse()
}

/// Consumes the `= value` or `(...)` of a key (unknown, or another derive's), so parsing goes
/// on after it. A group is skipped whole: its contents need not be meta syntax
/// (`history(1 = V1, ...)` is not).
pub fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        value_expr(meta)?;
    } else if meta.input.peek(syn::token::Paren) {
        let contents;
        syn::parenthesized!(contents in meta.input);
        contents.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

fn name_of(meta: &syn::meta::ParseNestedMeta<'_>) -> String {
    meta.path.get_ident().map(ToString::to_string).unwrap_or_default()
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// The path generated code names Cellar by: `#[cellar(crate = "path")]` on the type (for code
/// that reaches Cellar through a re-export, or under another name), else `::cellar`. Every
/// derive reads it; other keys are left to each derive's own parsing.
pub fn crate_root(ctx: &mut Ctx, attrs: &[Attribute]) -> TokenStream {
    let mut root = quote!(::cellar);
    for attr in attrs.iter().filter(|a| a.path().is_ident(sym::CELLAR)) {
        // Errors in other keys are their parsers' to report.
        let _ = attr.parse_nested_meta(|meta| {
            if name_of(&meta) != sym::CRATE {
                return skip_value(&meta);
            }
            let Some(lit) = lit_str(ctx, &value_expr(&meta)?) else { return Ok(()) };
            match lit.parse::<syn::Path>() {
                Ok(path) => root = quote!(#path),
                Err(e) => ctx.error(lit.span(), format!("crate = \"...\" takes a path: {e}")),
            }
            Ok(())
        });
    }
    root
}

/// Parses the struct and its fields.
pub fn parse(ctx: &mut Ctx, input: &DeriveInput, kind: Kind) -> Option<EntityAttr> {
    let only_structs = format!("#[derive({})] supports structs with named fields only", kind.derive_name());
    let syn::Data::Struct(data) = &input.data else {
        ctx.error(input.ident.span(), &only_structs);
        return None;
    };
    let syn::Fields::Named(named) = &data.fields else {
        ctx.error(input.ident.span(), &only_structs);
        return None;
    };
    let mut entity = EntityAttr {
        kind,
        krate: crate_root(ctx, &input.attrs),
        strategy: None,
        root_only: Vec::new(),
        all_delimited: kind != Kind::Entity,
        versioned_blob: None,
        ident: input.ident.clone(),
        vis: input.vis.clone(),
        table: snake_case(&input.ident.to_string()),
        family: "d".into(),
        record_type: None,
        salt: None,
        families: Vec::new(),
        fields: Vec::new(),
        indexes: Vec::new(),
    };
    let mut default_family = FamilyAttr::default();
    for_each_meta(ctx, &input.attrs, |ctx, meta| {
        let name = name_of(&meta);
        // `crate_root` reads `crate = "..."`.
        if name == sym::CRATE {
            return skip_value(&meta);
        }
        // Indexes get an error of their own on aggregates and parts (see `check`).
        if name != sym::FAMILY && name != sym::INDEX {
            entity.root_only.push(Spanned { value: name.clone(), span: meta.path.span() });
        }
        match name.as_str() {
            sym::STRATEGY => {
                entity.strategy =
                    lit_str(ctx, &value_expr(&meta)?).map(|s| Spanned { value: s.value(), span: s.span() })
            }
            sym::TABLE => entity.table = lit_str(ctx, &value_expr(&meta)?).map(|s| s.value()).unwrap_or_default(),
            sym::FAMILY => entity.family = lit_str(ctx, &value_expr(&meta)?).map(|s| s.value()).unwrap_or_default(),
            sym::RECORD_TYPE => entity.record_type = lit_int(ctx, &value_expr(&meta)?, "record_type (0 to 255)"),
            sym::MAX_VERSIONS => default_family.max_versions = lit_int(ctx, &value_expr(&meta)?, "max_versions"),
            sym::TTL => {
                default_family.ttl = lit_int(ctx, &value_expr(&meta)?, "ttl (seconds)");
                default_family.ttl_span = Some(meta.path.span());
            }
            sym::SALT => {
                let span = meta.path.span();
                let (mut buckets, mut random) = (None, false);
                meta.parse_nested_meta(|inner| {
                    match name_of(&inner).as_str() {
                        sym::BUCKETS => buckets = lit_int::<u8>(ctx, &value_expr(&inner)?, "buckets (1 to 255)"),
                        sym::RANDOM => random = true,
                        other => ctx.error(inner.path.span(), format!("unknown salt option `{other}`")),
                    }
                    Ok(())
                })?;
                let buckets = buckets.unwrap_or_else(|| {
                    ctx.error(span, "salt needs `buckets = N`");
                    1
                });
                let value = if random { SaltAttr::Random { buckets } } else { SaltAttr::Hash { buckets } };
                entity.salt = Some(Spanned { value, span });
            }
            sym::BUCKET => {
                let span = meta.path.span();
                let (mut field, mut buckets) = (None, None);
                meta.parse_nested_meta(|inner| {
                    match name_of(&inner).as_str() {
                        sym::FIELD => {
                            field =
                                lit_str(ctx, &value_expr(&inner)?).map(|s| Spanned { value: s.value(), span: s.span() })
                        }
                        sym::BUCKETS => buckets = lit_int::<u8>(ctx, &value_expr(&inner)?, "buckets (1 to 255)"),
                        other => ctx.error(inner.path.span(), format!("unknown bucket option `{other}`")),
                    }
                    Ok(())
                })?;
                match (field, buckets) {
                    (Some(field), Some(buckets)) => {
                        entity.salt = Some(Spanned { value: SaltAttr::Bucket { field, buckets }, span })
                    }
                    _ => ctx.error(span, "bucket needs `field = \"...\"` and `buckets = N`"),
                }
            }
            sym::FAMILY_OPTIONS => {
                let mut fam = FamilyAttr { span: Some(meta.path.span()), ..FamilyAttr::default() };
                meta.parse_nested_meta(|inner| {
                    match name_of(&inner).as_str() {
                        sym::NAME => {
                            fam.name = lit_str(ctx, &value_expr(&inner)?).map(|s| s.value()).unwrap_or_default()
                        }
                        sym::MAX_VERSIONS => fam.max_versions = lit_int(ctx, &value_expr(&inner)?, "max_versions"),
                        sym::TTL => {
                            fam.ttl = lit_int(ctx, &value_expr(&inner)?, "ttl (seconds)");
                            fam.ttl_span = Some(inner.path.span());
                        }
                        other => ctx.error(inner.path.span(), format!("unknown family option `{other}`")),
                    }
                    Ok(())
                })?;
                entity.families.push(fam);
            }
            sym::INDEX => {
                if let Some(index) = parse_index(ctx, &meta)? {
                    entity.indexes.push(index);
                }
            }
            sym::BLOB => {
                // The contents are `#[derive(Versioned)]`'s to read.
                entity.versioned_blob = Some(meta.path.span());
                skip_value(&meta)?;
            }
            other => {
                ctx.error(meta.path.span(), format!("unknown entity attribute `{other}`"));
                skip_value(&meta)?;
            }
        }
        Ok(())
    });
    default_family.name = entity.family.clone();
    entity.families.insert(0, default_family);
    for field in &named.named {
        let Some(ident) = field.ident.clone() else { continue };
        let mut f = FieldAttr {
            ident,
            ty: field.ty.clone(),
            partition: None,
            key: None,
            modifiers: Vec::new(),
            fixed: None,
            family: None,
            column: None,
            counter: None,
            version: None,
            skip: None,
            serde: None,
            blob: None,
            children: None,
            record_type: None,
            index: None,
            unique: None,
            wide: None,
            uid: None,
            default: None,
            aliases: Vec::new(),
        };
        for_each_meta(ctx, &field.attrs, |ctx, meta| {
            let span = meta.path.span();
            let flag = |slot: &mut Option<Span>, ctx: &mut Ctx, name: &str| {
                if slot.replace(span).is_some() {
                    ctx.error(span, format!("duplicate attribute `{name}`"));
                }
            };
            let name = name_of(&meta);
            match name.as_str() {
                sym::PARTITION => flag(&mut f.partition, ctx, &name),
                sym::KEY => flag(&mut f.key, ctx, &name),
                sym::COUNTER => flag(&mut f.counter, ctx, &name),
                sym::VERSION => flag(&mut f.version, ctx, &name),
                sym::SKIP => flag(&mut f.skip, ctx, &name),
                sym::SERDE => flag(&mut f.serde, ctx, &name),
                sym::BLOB => flag(&mut f.blob, ctx, &name),
                sym::CHILDREN => flag(&mut f.children, ctx, &name),
                sym::UNIQUE => flag(&mut f.unique, ctx, &name),
                sym::INDEX => {
                    if let Some(s) = lit_str(ctx, &value_expr(&meta)?) {
                        if f.index.replace(Spanned { value: s.value(), span: s.span() }).is_some() {
                            ctx.error(
                                span,
                                "a field takes one `index = \"...\"`; declare more with index(...) on the struct",
                            );
                        }
                    }
                }
                sym::RECORD_TYPE => {
                    if let Some(n) = lit_int::<u8>(ctx, &value_expr(&meta)?, "record_type (0 to 255)") {
                        f.record_type = Some(Spanned { value: n, span });
                    }
                }
                sym::DESC => f.modifiers.push(Spanned { value: ModifierAttr::Desc, span }),
                sym::REVERSE_TS => f.modifiers.push(Spanned { value: ModifierAttr::ReverseTs, span }),
                sym::REVERSED => f.modifiers.push(Spanned { value: ModifierAttr::Reversed, span }),
                sym::HASH => {
                    if let Some(s) = lit_str(ctx, &value_expr(&meta)?) {
                        if s.value() == "md5" {
                            f.modifiers.push(Spanned { value: ModifierAttr::Md5, span });
                        } else {
                            ctx.error(s.span(), format!("unknown hash `{}`; supported: \"md5\"", s.value()));
                        }
                    }
                }
                sym::FIXED => {
                    if let Some(n) = lit_int::<u16>(ctx, &value_expr(&meta)?, "fixed width") {
                        f.fixed = Some(Spanned { value: n, span });
                    }
                }
                sym::FAMILY => {
                    f.family = lit_str(ctx, &value_expr(&meta)?).map(|s| Spanned { value: s.value(), span: s.span() })
                }
                sym::COLUMNS => {
                    let value = parse_wide(ctx, &meta)?;
                    if f.wide.replace(Spanned { value, span }).is_some() {
                        ctx.error(span, "duplicate attribute `columns`");
                    }
                }
                sym::UID => {
                    if let Some(value) = parse_uid(ctx, &meta)? {
                        if f.uid.replace(Spanned { value, span }).is_some() {
                            ctx.error(span, "duplicate attribute `uid`");
                        }
                    }
                }
                sym::COLUMN => {
                    f.column = lit_str(ctx, &value_expr(&meta)?).map(|s| Spanned { value: s.value(), span: s.span() })
                }
                sym::DEFAULT => {
                    let path = if meta.input.peek(syn::Token![=]) {
                        lit_str(ctx, &value_expr(&meta)?).and_then(|s| match s.parse::<syn::Path>() {
                            Ok(path) => Some(path),
                            Err(_) => {
                                ctx.error(
                                    s.span(),
                                    "`default = \"...\"` takes the path of a function, as serde's does",
                                );
                                None
                            }
                        })
                    } else {
                        None
                    };
                    if f.default.replace(Spanned { value: path, span }).is_some() {
                        ctx.error(span, "duplicate attribute `default`");
                    }
                }
                sym::RENAME_FROM => {
                    f.aliases.extend(
                        lit_str(ctx, &value_expr(&meta)?).map(|s| Spanned { value: s.value(), span: s.span() }),
                    );
                }
                sym::ALIASES => match ungroup(&value_expr(&meta)?) {
                    Expr::Array(array) => {
                        for elem in &array.elems {
                            f.aliases.extend(lit_str(ctx, elem).map(|s| Spanned { value: s.value(), span: s.span() }));
                        }
                    }
                    other => ctx.error(other.span(), "`aliases` takes a list of qualifiers: aliases = [\"a\", \"b\"]"),
                },
                other => {
                    ctx.error(span, format!("unknown field attribute `{other}`"));
                    skip_value(&meta)?;
                }
            }
            Ok(())
        });
        entity.fields.push(f);
    }
    // Field-level indexes join the struct-level ones, in field order.
    for f in &entity.fields {
        if let Some(name) = &f.index {
            entity.indexes.push(IndexAttr {
                name: name.clone(),
                parts: vec![IndexPartAttr { field: f.ident.clone(), modifier: None }],
                include: Vec::new(),
                unique: f.unique.is_some(),
                span: name.span,
            });
        }
    }
    Some(entity)
}

/// `columns(family = "p", prefix = "...", desc, lazy)`.
fn parse_wide(ctx: &mut Ctx, meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<WideAttr> {
    let mut wide = WideAttr { family: None, prefix: String::new(), desc: false, lazy: false };
    if !meta.input.peek(syn::token::Paren) {
        ctx.error(meta.path.span(), "`columns` needs `(family = \"...\")`");
        skip_value(meta)?;
        return Ok(wide);
    }
    meta.parse_nested_meta(|inner| {
        match name_of(&inner).as_str() {
            sym::FAMILY => {
                wide.family = lit_str(ctx, &value_expr(&inner)?).map(|s| Spanned { value: s.value(), span: s.span() })
            }
            sym::PREFIX => wide.prefix = lit_str(ctx, &value_expr(&inner)?).map(|s| s.value()).unwrap_or_default(),
            sym::DESC => wide.desc = true,
            sym::LAZY => wide.lazy = true,
            other => {
                ctx.error(
                    inner.path.span(),
                    format!("unknown columns option `{other}`; one of: family, prefix, desc, lazy"),
                );
                skip_value(&inner)?;
            }
        }
        Ok(())
    })?;
    if wide.family.is_none() {
        ctx.error(meta.path.span(), "`columns` needs `family = \"...\"`: the family that holds the entries");
    }
    Ok(wide)
}

/// `uid = "kind"` or `uid(kind = "...", width = N)`.
fn parse_uid(ctx: &mut Ctx, meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Option<UidAttr>> {
    if meta.input.peek(syn::Token![=]) {
        return Ok(lit_str(ctx, &value_expr(meta)?).map(|s| UidAttr { kind: s.value(), width: DEFAULT_UID_WIDTH }));
    }
    let (mut kind, mut width) = (None, DEFAULT_UID_WIDTH);
    meta.parse_nested_meta(|inner| {
        match name_of(&inner).as_str() {
            sym::KIND => kind = lit_str(ctx, &value_expr(&inner)?).map(|s| s.value()),
            sym::WIDTH => width = lit_int(ctx, &value_expr(&inner)?, "uid width (3 to 8 bytes)").unwrap_or(width),
            other => {
                ctx.error(inner.path.span(), format!("unknown uid option `{other}`; one of: kind, width"));
                skip_value(&inner)?;
            }
        }
        Ok(())
    })?;
    if kind.is_none() {
        ctx.error(meta.path.span(), "`uid(...)` needs `kind = \"...\"`: the kind of names its uids stand for");
    }
    Ok(kind.map(|kind| UidAttr { kind, width }))
}

/// The single identifier of a nested meta (a field name), or an error at its path.
fn field_ident(ctx: &mut Ctx, meta: &syn::meta::ParseNestedMeta<'_>) -> Option<Ident> {
    let ident = meta.path.get_ident().cloned();
    if ident.is_none() {
        ctx.error(meta.path.span(), "expected a field name");
    }
    ident
}

/// Consumes `()`, which `parse_nested_meta` refuses, so that `check` can report it.
fn empty_parens(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<bool> {
    let fork = meta.input.fork();
    let contents;
    syn::parenthesized!(contents in fork);
    if !contents.is_empty() {
        return Ok(false);
    }
    meta.input.parse::<proc_macro2::Group>()?;
    Ok(true)
}

/// `index(name = "...", on(field, field(desc), ...), include(field, ...), unique)`.
fn parse_index(ctx: &mut Ctx, meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Option<IndexAttr>> {
    let span = meta.path.span();
    let (mut name, mut parts, mut include, mut unique, mut on_seen) = (None, Vec::new(), Vec::new(), false, false);
    meta.parse_nested_meta(|inner| {
        match name_of(&inner).as_str() {
            sym::NAME => {
                name = lit_str(ctx, &value_expr(&inner)?).map(|s| Spanned { value: s.value(), span: s.span() })
            }
            sym::ON => {
                on_seen = true;
                if empty_parens(&inner)? {
                    return Ok(());
                }
                inner.parse_nested_meta(|part| {
                    let field = field_ident(ctx, &part);
                    let mut modifier: Option<Spanned<ModifierAttr>> = None;
                    if part.input.peek(syn::token::Paren) {
                        part.parse_nested_meta(|m| {
                            let span = m.path.span();
                            let value = match name_of(&m).as_str() {
                                sym::DESC => Some(ModifierAttr::Desc),
                                sym::HASH => match lit_str(ctx, &value_expr(&m)?) {
                                    Some(s) if s.value() == "md5" => Some(ModifierAttr::Md5),
                                    Some(s) => {
                                        ctx.error(
                                            s.span(),
                                            format!("unknown hash `{}`; supported: \"md5\"", s.value()),
                                        );
                                        None
                                    }
                                    None => None,
                                },
                                other => {
                                    ctx.error(span, format!("unknown index part option `{other}`; one of: desc, hash"));
                                    skip_value(&m)?;
                                    None
                                }
                            };
                            if let Some(value) = value {
                                if modifier.is_some() {
                                    ctx.error(span, "an index part takes one modifier (desc or hash)");
                                }
                                modifier = Some(Spanned { value, span });
                            }
                            Ok(())
                        })?;
                    }
                    if let Some(field) = field {
                        parts.push(IndexPartAttr { field, modifier });
                    }
                    Ok(())
                })?;
            }
            sym::INCLUDE if empty_parens(&inner)? => {}
            sym::INCLUDE => inner.parse_nested_meta(|field| {
                include.extend(field_ident(ctx, &field));
                Ok(())
            })?,
            sym::UNIQUE => unique = true,
            other => {
                ctx.error(inner.path.span(), format!("unknown index option `{other}`"));
                skip_value(&inner)?;
            }
        }
        Ok(())
    })?;
    if name.is_none() {
        ctx.error(span, "index needs `name = \"...\"`");
    }
    if !on_seen {
        ctx.error(span, "index needs `on(field, ...)`");
    }
    Ok(name.filter(|_| on_seen).map(|name| IndexAttr { name, parts, include, unique, span }))
}
