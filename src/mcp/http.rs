//! The gateway's HTTP client of a streamable-HTTP server whose mcp.toml says it reads an
//! `Idempotency-Key`: the reqwest client rmcp uses, the effect key of a guarded `tools/call`
//! (its `_meta.EXACTLY_EFFECT_KEY`) added as that header where the file declares it.
use super::config::Config;
use super::META_EFFECT_KEY;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;

type Result<T> = std::result::Result<T, StreamableHttpError<reqwest::Error>>;
type SseStream = Pin<
    Box<dyn futures_core::Stream<Item = std::result::Result<sse_stream::Sse, SseError>> + Send>,
>;

/// Which tools' calls carry the header: the file's top-level `idempotency_header`, overridden
/// per tool.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyedTools {
    all: bool,
    on: HashSet<String>,
    off: HashSet<String>,
}

impl KeyedTools {
    /// What `cfg` declares.
    pub(crate) fn of(cfg: &Config) -> KeyedTools {
        let mut k = KeyedTools {
            all: cfg.idempotency_header.unwrap_or(false),
            ..KeyedTools::default()
        };
        for t in &cfg.tool {
            match t.idempotency_header {
                Some(true) => k.on.insert(t.name.clone()),
                Some(false) => k.off.insert(t.name.clone()),
                None => false,
            };
        }
        k
    }

    /// Whether any tool's call carries the header.
    pub(crate) fn any(&self) -> bool {
        self.all || !self.on.is_empty()
    }

    /// Whether `tool`'s calls carry it.
    pub(crate) fn wants(&self, tool: &str) -> bool {
        !self.off.contains(tool) && (self.all || self.on.contains(tool))
    }

    /// The header for `message`: the effect key of a guarded call of a declared tool.
    pub(crate) fn header(&self, message: &ClientJsonRpcMessage) -> Option<HeaderValue> {
        let JsonRpcMessage::Request(r) = message else {
            return None;
        };
        if !matches!(r.request, ClientRequest::CallToolRequest(_)) {
            return None;
        }
        // As it goes on the wire: its `_meta` is where the gateway put the key.
        let wire = serde_json::to_value(message).ok()?;
        let params = wire.get("params")?;
        if !self.wants(params.get("name")?.as_str()?) {
            return None;
        }
        let key = params.get("_meta")?.get(META_EFFECT_KEY)?.as_str()?;
        HeaderValue::from_str(key).ok()
    }
}

/// rmcp's reqwest client, adding the header where [`KeyedTools`] says.
#[derive(Clone)]
pub(crate) struct KeyedHttp {
    /// The client; it follows no redirect (a redirect is an error, as any other answer that is
    /// not the server's).
    pub inner: reqwest::Client,
    /// The tools whose calls carry the header.
    pub tools: Arc<KeyedTools>,
}

impl KeyedHttp {
    /// A client for `tools`.
    pub(crate) fn new(tools: KeyedTools) -> std::result::Result<KeyedHttp, String> {
        let inner = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make the HTTP client: {e}"))?;
        Ok(KeyedHttp {
            inner,
            tools: Arc::new(tools),
        })
    }

    fn keyed(
        &self,
        message: &ClientJsonRpcMessage,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> HashMap<HeaderName, HeaderValue> {
        if let Some(v) = self.tools.header(message) {
            // `Idempotency-Key`, the header a server that dedupes on its side reads.
            headers.insert(HeaderName::from_static("idempotency-key"), v);
        }
        headers
    }
}

impl StreamableHttpClient for KeyedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse> {
        let headers = self.keyed(&message, custom_headers);
        self.inner
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse> {
        let headers = self.keyed(&message, custom_headers);
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse> {
        let headers = self.keyed(&message, custom_headers);
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<()> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_says_which_tools_send_the_header() {
        let none = KeyedTools::of(&Config::parse("[[tool]]\nname = \"a\"\n").expect("config"));
        assert!(!none.any() && !none.wants("a"));
        let each = KeyedTools::of(
            &Config::parse("[[tool]]\nname = \"a\"\nidempotency_header = true\n").expect("config"),
        );
        assert!(each.any() && each.wants("a") && !each.wants("b"));
        let all = KeyedTools::of(
            &Config::parse(
                "idempotency_header = true\n[[tool]]\nname = \"a\"\nidempotency_header = false\n",
            )
            .expect("config"),
        );
        assert!(all.any() && !all.wants("a") && all.wants("b"));
    }
}
