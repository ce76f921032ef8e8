//! A `tracing` subscriber that keeps every span and event, for tests that assert what Cellar
//! reports. Installed once per test binary as the global subscriber (background threads and
//! the Bigtable backend's runtime report through it too); tests that read it take
//! [`Capture::exclusive`] so that their records are their own.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as it was when it closed (or is now, if open).
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub name: &'static str,
    pub fields: BTreeMap<String, String>,
    /// The index of the parent span in [`Capture::spans`].
    pub parent: Option<usize>,
    pub closed: bool,
}

impl SpanRecord {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// An event with the spans it happened in, innermost first.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub level: Level,
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
    /// Indexes into [`Capture::spans`], innermost first.
    pub scope: Vec<usize>,
}

impl EventRecord {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Records {
    spans: Vec<SpanRecord>,
    /// Open spans' ids (reused by the registry once closed) to their index in `spans`.
    open: HashMap<u64, usize>,
    events: Vec<EventRecord>,
    /// Spans before this index were made before the last clear.
    since: usize,
}

/// Every span and event since the last [`Capture::clear`].
#[derive(Default)]
pub struct Capture {
    records: Mutex<Records>,
    serial: Mutex<()>,
}

struct FieldMap<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldMap<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

struct CaptureLayer(Arc<Capture>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CaptureLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut FieldMap(&mut fields));
        let parent_id = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let mut r = self.0.records.lock().unwrap();
        let parent = parent_id.and_then(|p| r.open.get(&p).copied());
        r.spans.push(SpanRecord { name: attrs.metadata().name(), fields, parent, closed: false });
        let index = r.spans.len() - 1;
        r.open.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut r = self.0.records.lock().unwrap();
        if let Some(&i) = r.open.get(&id.into_u64()) {
            values.record(&mut FieldMap(&mut r.spans[i].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldMap(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let ids: Vec<u64> =
            ctx.event_scope(event).map(|scope| scope.map(|s| s.id().into_u64()).collect()).unwrap_or_default();
        let mut r = self.0.records.lock().unwrap();
        let scope = ids.iter().filter_map(|id| r.open.get(id).copied()).collect();
        let m = event.metadata();
        r.events.push(EventRecord { level: *m.level(), target: m.target().to_string(), message, fields, scope });
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut r = self.0.records.lock().unwrap();
        if let Some(i) = r.open.remove(&id.into_u64()) {
            r.spans[i].closed = true;
        }
    }
}

impl Capture {
    /// The binary's capture, installed as the global subscriber on first use.
    pub fn global() -> &'static Capture {
        static CAPTURE: OnceLock<Arc<Capture>> = OnceLock::new();
        CAPTURE.get_or_init(|| {
            let capture = Arc::new(Capture::default());
            let subscriber = tracing_subscriber::registry().with(CaptureLayer(capture.clone()));
            tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
            capture
        })
    }

    /// Runs the caller's test alone and from an empty record.
    pub fn exclusive(&self) -> MutexGuard<'_, ()> {
        let guard = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        self.clear();
        guard
    }

    /// Forgets the events, and the spans made so far for [`Capture::new_spans`] (they stay
    /// in [`Capture::spans`], so indexes hold and children of open ones find their parent).
    pub fn clear(&self) {
        let mut r = self.records.lock().unwrap();
        r.events.clear();
        r.since = r.spans.len();
    }

    pub fn spans(&self) -> Vec<SpanRecord> {
        self.records.lock().unwrap().spans.clone()
    }

    pub fn events(&self) -> Vec<EventRecord> {
        self.records.lock().unwrap().events.clone()
    }

    /// The spans named `name` made since the last clear, as (index, span).
    pub fn new_spans(&self, name: &str) -> Vec<(usize, SpanRecord)> {
        let r = self.records.lock().unwrap();
        r.spans.iter().cloned().enumerate().skip(r.since).filter(|(_, s)| s.name == name).collect()
    }
}
