//! The gRPC connection: channels to the data and admin APIs, credentials, per-call deadlines,
//! the retry policy each call follows, and the count of calls made.
//!
//! Data calls go over a pool of channels (`pool`), each one HTTP/2 connection: one connection
//! carries at most ~100 concurrent streams on Cloud Bigtable's front end, which also closes
//! every connection about once an hour. So the store keeps [`BigtableOptions::channels`]
//! connections (4 by default), spreads calls over them round-robin, and replaces each one
//! every [`BigtableOptions::channel_refresh`] (45 min, ± 10 % jitter, staggered), connecting
//! the replacement before the old one is let go, so no call waits for a connection and none
//! meets a connection the server closes; HTTP/2 keepalive pings every 30 s find dead ones in
//! between. Admin calls get a pool of one channel, refreshed alike (on the emulator they share
//! the data pool). All channels connect eagerly, so an unreachable endpoint fails
//! [`BigtableStore::connect`](super::BigtableStore::connect).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2::bigtable_table_admin_client::BigtableTableAdminClient;
use googleapis_tonic_google_bigtable_v2::google::bigtable::v2::bigtable_client::BigtableClient;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use super::pool::Pool;
use super::retry::RetryPolicy;
use crate::repo::printable;
use crate::{Error, Result};

/// Where and how to reach Cloud Bigtable.
///
/// Built with [`BigtableOptions::new`] and its setters, so that a minor release can add options
/// without breaking callers (the struct is `#[non_exhaustive]`); the fields stay public to read.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BigtableOptions {
    /// The Google Cloud project.
    pub project: String,
    /// The Bigtable instance.
    pub instance: String,
    /// The app profile requests name (routing and isolation); `None` for the instance's
    /// default profile.
    pub app_profile: Option<String>,
    /// An emulator's `host:port`: plaintext, no credentials. [`BigtableOptions::new`] takes it
    /// from `BIGTABLE_EMULATOR_HOST`, as Google's clients do.
    pub emulator: Option<String>,
    /// How long one call may take before it fails (a scan: how long it may wait for the next
    /// response).
    pub timeout: Duration,
    /// How many connections (gRPC channels) data calls are spread over, 1 to 64; default 4.
    /// One HTTP/2 connection carries at most ~100 concurrent streams on Cloud Bigtable, and
    /// this store can have a few hundred calls in flight (a salted scan reads every bucket at
    /// once, `check_and_mutate_many` runs 64 at a time); 4 is also what Google's Go client
    /// opens. More cost a TLS handshake and keepalive pings each and add no parallelism on the
    /// client's side (its runtime has 2 threads).
    pub channels: usize,
    /// How often each channel is replaced by a fresh connection, ± up to 10 % at random, the
    /// channels staggered; default 45 minutes (Cloud Bigtable closes connections after about
    /// an hour; Google's Java client refreshes every 45–50). At least 100 ms (for tests).
    pub channel_refresh: Duration,
    /// How long connecting may take before [`BigtableStore::connect`](super::BigtableStore)
    /// gives up.
    pub connect_timeout: Duration,
    /// How long a call may keep retrying transient failures, all attempts and the waits
    /// between them together (a scan: how long it may go without making progress). Default
    /// 2 minutes.
    pub operation_timeout: Duration,
}

impl BigtableOptions {
    /// Options for `projects/{project}/instances/{instance}`: the emulator named by
    /// `BIGTABLE_EMULATOR_HOST` if that is set, else Cloud Bigtable with application-default
    /// credentials; 30 s per call, 10 s to connect, 4 channels replaced every 45 minutes.
    pub fn new(project: impl Into<String>, instance: impl Into<String>) -> Self {
        BigtableOptions {
            project: project.into(),
            instance: instance.into(),
            app_profile: None,
            emulator: std::env::var("BIGTABLE_EMULATOR_HOST").ok().filter(|h| !h.is_empty()),
            timeout: Duration::from_secs(30),
            channels: 4,
            channel_refresh: Duration::from_secs(45 * 60),
            connect_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(120),
        }
    }

    /// Talks to the emulator at `host_port` instead.
    pub fn emulator(mut self, host_port: impl Into<String>) -> Self {
        self.emulator = Some(host_port.into());
        self
    }

    /// Names an app profile.
    pub fn app_profile(mut self, profile: impl Into<String>) -> Self {
        self.app_profile = Some(profile.into());
        self
    }

    /// Sets the per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets how many channels data calls are spread over (see [`BigtableOptions::channels`]);
    /// outside 1..=64, connecting fails with [`Error::InvalidArgument`].
    pub fn channels(mut self, channels: usize) -> Self {
        self.channels = channels;
        self
    }

    /// Sets how often each channel is replaced (see [`BigtableOptions::channel_refresh`]);
    /// under 100 ms, connecting fails with [`Error::InvalidArgument`].
    pub fn channel_refresh(mut self, period: Duration) -> Self {
        self.channel_refresh = period;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how long a call may keep retrying (see [`BigtableOptions::operation_timeout`]).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }
}

/// How many calls of each kind a [`BigtableStore`](super::BigtableStore) has made: the RPCs
/// themselves, retries included, not the `Store` calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RpcCounts {
    /// ReadRows calls (point reads and scans).
    pub read_rows: u64,
    /// MutateRows calls.
    pub mutate_rows: u64,
    /// CheckAndMutateRow calls.
    pub check_and_mutate_row: u64,
    /// ReadModifyWriteRow calls.
    pub read_modify_write_row: u64,
    /// SampleRowKeys calls.
    pub sample_row_keys: u64,
    /// Table admin calls.
    pub admin: u64,
    /// Calls repeated after a transient failure (counted in their kind as well).
    pub retries: u64,
}

/// The kinds of call, as indexes into the counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rpc {
    ReadRows,
    MutateRows,
    CheckAndMutateRow,
    ReadModifyWriteRow,
    SampleRowKeys,
    Admin,
    Retry,
}

#[derive(Debug, Default)]
pub(crate) struct RpcCounters([AtomicU64; 7]);

impl RpcCounters {
    pub(crate) fn count(&self, rpc: Rpc) {
        self.0[rpc as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RpcCounts {
        let n = |rpc: Rpc| self.0[rpc as usize].load(Ordering::Relaxed);
        RpcCounts {
            read_rows: n(Rpc::ReadRows),
            mutate_rows: n(Rpc::MutateRows),
            check_and_mutate_row: n(Rpc::CheckAndMutateRow),
            read_modify_write_row: n(Rpc::ReadModifyWriteRow),
            sample_row_keys: n(Rpc::SampleRowKeys),
            admin: n(Rpc::Admin),
            retries: n(Rpc::Retry),
        }
    }
}

/// Everything a call needs; cheap to clone into the task that makes it.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub data: BigtableClient<Pool>,
    pub admin: BigtableTableAdminClient<Pool>,
    auth: Option<Arc<dyn gcp_auth::TokenProvider>>,
    /// `projects/{project}/instances/{instance}`.
    pub instance: String,
    pub app_profile: String,
    pub timeout: Duration,
    /// When failed calls are tried again.
    pub retry: RetryPolicy,
    pub rpcs: Arc<RpcCounters>,
}

/// Scope of the OAuth token: data and table administration.
const SCOPES: &[&str] = &["https://www.googleapis.com/auth/cloud-platform"];
const DATA_ENDPOINT: &str = "https://bigtable.googleapis.com";
const ADMIN_ENDPOINT: &str = "https://bigtableadmin.googleapis.com";
/// Rows can be large; Bigtable allows 256 MiB per cell.
const MAX_MESSAGE: usize = 256 << 20;

impl Ctx {
    /// Connects (eagerly, so a dead endpoint fails here and clearly).
    pub(crate) async fn connect(options: &BigtableOptions) -> Result<Ctx> {
        let (data_uri, admin_uri, tls) = match &options.emulator {
            Some(host) => (format!("http://{host}"), format!("http://{host}"), false),
            None => (DATA_ENDPOINT.to_string(), ADMIN_ENDPOINT.to_string(), true),
        };
        super::pool::check(options.channels, options.channel_refresh)?;
        let data = channel(&data_uri, tls, options, options.channels).await?;
        let admin = if admin_uri == data_uri { data.clone() } else { channel(&admin_uri, tls, options, 1).await? };
        let auth = match options.emulator {
            Some(_) => None,
            None => Some(gcp_auth::provider().await.map_err(|e| {
                Error::Store(format!("Cloud Bigtable credentials: {e} (set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`)"))
            })?),
        };
        Ok(Ctx {
            data: BigtableClient::new(data)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            admin: BigtableTableAdminClient::new(admin)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            auth,
            instance: format!("projects/{}/instances/{}", options.project, options.instance),
            app_profile: options.app_profile.clone().unwrap_or_default(),
            timeout: options.timeout,
            retry: RetryPolicy::new(options.operation_timeout),
            rpcs: Arc::default(),
        })
    }

    /// The full name of `table`.
    pub(crate) fn table_name(&self, table: &str) -> String {
        format!("{}/tables/{table}", self.instance)
    }

    /// A request carrying `message`, the deadline, the routing header for `resource` and, on
    /// Cloud Bigtable, the bearer token; counts the call. A scan's ReadRows gets no overall
    /// deadline (a long scan may rightly outlive it); the wait for each response has one.
    pub(crate) async fn request<T>(&self, rpc: Rpc, message: T, resource: (&str, &str)) -> Result<Request<T>> {
        self.rpcs.count(rpc);
        let mut request = Request::new(message);
        if !matches!(rpc, Rpc::ReadRows) {
            request.set_timeout(self.timeout);
        }
        let mut params = format!("{}={}", resource.0, url_encode(resource.1));
        if !self.app_profile.is_empty() {
            params.push_str(&format!("&app_profile_id={}", url_encode(&self.app_profile)));
        }
        if let Ok(v) = params.parse() {
            request.metadata_mut().insert("x-goog-request-params", v);
        }
        if let Ok(v) = feature_flags().parse() {
            request.metadata_mut().insert("bigtable-features", v);
        }
        if let Some(auth) = &self.auth {
            let token =
                auth.token(SCOPES).await.map_err(|e| Error::Store(format!("Cloud Bigtable credentials: {e}")))?;
            let value = format!("Bearer {}", token.as_str())
                .parse()
                .map_err(|_| Error::Store("Cloud Bigtable credentials: the token is not a valid header".into()))?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }

    /// Runs one call under the deadline, also enforced locally: a server that stops answering
    /// fails the call rather than hanging it.
    pub(crate) async fn deadline<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout(self.timeout + Duration::from_millis(500), call).await {
            Ok(result) => result,
            Err(_) => Err(Status::deadline_exceeded(format!("no answer within {:?}", self.timeout))),
        }
    }
}

/// A pool of `channels` channels to `uri`, each connected eagerly within the connect timeout,
/// and refreshed every [`BigtableOptions::channel_refresh`].
async fn channel(uri: &str, tls: bool, options: &BigtableOptions, channels: usize) -> Result<Pool> {
    let unreachable = |uri: &str, reason: String| Error::Remote {
        rpc: "connect",
        table: String::new(),
        row: None,
        code: "Unavailable".into(),
        message: format!("cannot reach {uri}: {reason}"),
    };
    let mut endpoint = Endpoint::from_shared(uri.to_string())
        .map_err(|e| Error::InvalidArgument { arg: "bigtable endpoint", reason: format!("{uri}: {e}") })?
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if tls {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(|e| unreachable(uri, format!("TLS: {e}")))?;
    }
    let (uri, timeout) = (Arc::<str>::from(uri), options.connect_timeout);
    let connect = move || {
        let (endpoint, uri) = (endpoint.clone(), uri.clone());
        async move {
            match tokio::time::timeout(timeout, endpoint.connect()).await {
                Ok(Ok(channel)) => Ok::<Channel, Error>(channel),
                Ok(Err(e)) => Err(unreachable(&uri, source_chain(&e))),
                Err(_) => Err(unreachable(&uri, format!("no connection within {timeout:?}"))),
            }
        }
    };
    Pool::connect(connect, channels, options.channel_refresh).await
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The client features Bigtable must be told of before it serves them (reversed scans), as
/// URL-safe base64 of the `FeatureFlags` message.
fn feature_flags() -> String {
    use prost::Message;
    let flags = googleapis_tonic_google_bigtable_v2::google::bigtable::v2::FeatureFlags {
        reverse_scans: true,
        ..Default::default()
    };
    base64_url(&flags.encode_to_vec())
}

/// URL-safe base64 with padding.
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Percent-encodes everything but unreserved characters (for the routing header).
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A failed call as a Cellar error naming the call, table and row.
pub(crate) fn rpc_error(rpc: &'static str, table: &str, row: Option<&[u8]>, status: &Status) -> Error {
    Error::Remote {
        rpc,
        table: table.to_string(),
        row: row.map(printable),
        code: format!("{:?}", status.code()),
        message: status.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_vectors() {
        for (plain, encoded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg==")] {
            assert_eq!(base64_url(plain.as_bytes()), encoded);
        }
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8=");
        assert_eq!(feature_flags(), "CAE=");
    }
}
