//! The gateway's client side: the server it starts (or reaches by URL), started again when it
//! has exited, and the relay that carries the server's own requests and notifications back up
//! to the agent's client.
use super::Hints;
use crate::sanitize::inert;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotification, CancelledNotificationParam,
    ClientConfig, ClientNotification, ClientRequest, ClientResult, ErrorData, GetMeta,
    ProgressToken, Request, ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
    RunningService, Service, ServiceError, ServiceExt,
};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a call to the server has no answer.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// The request never left (the server could not be started or reached).
    NotSent(String),
    /// The server refused the request with a JSON-RPC error (an unknown tool, bad arguments):
    /// nothing was done; passed through to the client as it came.
    Refused(ErrorData),
    /// The request may have left and its answer is lost.
    Lost(String),
}

/// What the client side tells the server side: the agent's client, to relay the server's own
/// requests and notifications to, and which agent token each of our progress tokens stands for.
#[derive(Default)]
pub(super) struct Relay {
    pub(super) down: Mutex<Option<Peer<RoleServer>>>,
    pub(super) progress: Mutex<HashMap<ProgressToken, ProgressToken>>,
    /// The server's hints per tool, as its last `tools/list` gave them (forgotten when it says
    /// its tools changed).
    pub(super) hints: Mutex<HashMap<String, Hints>>,
}

/// How long a request's progress token is still re-addressed after its answer (see
/// `Upstream::forward`).
const PROGRESS_LINGER: Duration = Duration::from_secs(2);

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Relay {
    fn down(&self) -> Option<Peer<RoleServer>> {
        lock(&self.down).clone()
    }
}

/// The client side's handler: the server's requests (sampling, roots, elicitation) go to the
/// agent's client, its notifications too.
struct UpHandler {
    relay: Arc<Relay>,
    info: ClientConfig,
}

impl Service<RoleClient> for UpHandler {
    async fn handle_request(
        &self,
        request: ServerRequest,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        let Some(down) = self.relay.down() else {
            return Err(ErrorData::internal_error("no client is connected", None));
        };
        down.send_request(request).await.map_err(service_error)
    }

    async fn handle_notification(
        &self,
        mut n: ServerNotification,
        _ctx: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        match &mut n {
            ServerNotification::ProgressNotification(p) => {
                let Some(t) = lock(&self.relay.progress)
                    .get(&p.params.progress_token)
                    .cloned()
                else {
                    return Ok(());
                };
                p.params.progress_token = t;
            }
            // It names a request of ours by our id; the agent's client never sent it.
            ServerNotification::CancelledNotification(_) => return Ok(()),
            ServerNotification::ToolListChangedNotification(_) => lock(&self.relay.hints).clear(),
            _ => {}
        }
        if let Some(down) = self.relay.down() {
            let _ = down.send_notification(n).await;
        }
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

fn service_error(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("exactly mcp: {other}"), None),
    }
}

/// The server the gateway starts, started again when it has exited.
pub(crate) struct Upstream {
    command: Vec<String>,
    url: Option<String>,
    /// The tools whose calls carry their effect key as an `Idempotency-Key` header (`--url`).
    keyed: super::http::KeyedTools,
    pub(super) info: Mutex<Option<ClientConfig>>,
    running: tokio::sync::Mutex<Option<RunningService<RoleClient, UpHandler>>>,
    pub(super) relay: Arc<Relay>,
}

impl Upstream {
    /// The server `command` starts (or the one at `url`), not started yet.
    pub(super) fn new(
        command: Vec<String>,
        url: Option<String>,
        keyed: super::http::KeyedTools,
    ) -> Upstream {
        Upstream {
            command,
            url,
            keyed,
            info: Mutex::new(None),
            running: tokio::sync::Mutex::new(None),
            relay: Arc::new(Relay::default()),
        }
    }

    /// Stops the server if it runs (the agent's client has gone).
    pub(super) async fn stop(&self) {
        if let Some(r) = self.running.lock().await.take() {
            let _ = r.cancel().await;
        }
    }

    /// The server's peer, starting it (again) if it is not running.
    pub(super) async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut running = self.running.lock().await;
        if let Some(r) = running.as_ref() {
            if !r.is_transport_closed() {
                return Ok(r.peer().clone());
            }
        }
        *running = None;
        let info = lock(&self.info).clone().unwrap_or_default();
        let handler = UpHandler {
            relay: self.relay.clone(),
            info,
        };
        if let Some(url) = &self.url {
            let failed = |e| format!("the server at {} did not initialise: {e}", inert(url));
            let r = if self.keyed.any() {
                let client = super::http::KeyedHttp::new(self.keyed.clone())?;
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                handler.serve(transport).await.map_err(failed)?
            } else {
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                handler.serve(transport).await.map_err(failed)?
            };
            let peer = r.peer().clone();
            *running = Some(r);
            return Ok(peer);
        }
        let (prog, args) = self
            .command
            .split_first()
            .ok_or_else(|| "no server command".to_string())?;
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args);
        let transport = rmcp::transport::TokioChildProcess::new(cmd)
            .map_err(|e| format!("cannot start {}: {e}", inert(prog)))?;
        let r = handler
            .serve(transport)
            .await
            .map_err(|e| format!("the server did not initialise: {e}"))?;
        let peer = r.peer().clone();
        *running = Some(r);
        Ok(peer)
    }

    /// Sends `request` to the server, the agent's `_meta` (less its progress token, which is
    /// re-addressed) with it, and waits for the answer, carrying the agent's cancellation on.
    pub(super) async fn forward(
        &self,
        mut request: ClientRequest,
        meta: &rmcp::model::RequestMetaObject,
        ct: &tokio_util::sync::CancellationToken,
        extra: Option<(&str, Value)>,
        timeout: Option<Duration>,
    ) -> Result<ServerResult, CallError> {
        let peer = self.peer().await.map_err(CallError::NotSent)?;
        let down_token = meta.get_progress_token();
        {
            let m = &mut request.get_meta_mut().0 .0;
            for (k, v) in &meta.0 .0 {
                if k != "progressToken" {
                    m.insert(k.clone(), v.clone());
                }
            }
            if let Some((k, v)) = extra {
                m.insert(k.to_string(), v);
            }
        }
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| CallError::NotSent(e.to_string()))?;
        let up_token = handle.progress_token.clone();
        if let Some(t) = down_token {
            lock(&self.relay.progress).insert(up_token.clone(), t);
        }
        let id = handle.id.clone();
        let wait = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let out = tokio::select! {
            r = handle.await_response() => r.map_err(|e| match e {
                ServiceError::McpError(e) => CallError::Refused(e),
                other => CallError::Lost(other.to_string()),
            }),
            _ = ct.cancelled() => Err(CallError::Lost("cancelled by the client".into())),
            _ = wait => Err(CallError::Lost("no answer within the tool's lease".into())),
        };
        if let Err(CallError::Lost(why)) = &out {
            let params = CancelledNotificationParam::new(Some(id), Some(why.clone()));
            let _ = peer
                .send_notification(ClientNotification::CancelledNotification(
                    CancelledNotification::new(params),
                ))
                .await;
        }
        // The server's progress comes as notifications, each handled on a task of its own
        // (rmcp spawns them) that may run after this answer is taken: the re-addressing stays a
        // moment, so a progress the server sent before its answer is not dropped for want of
        // it (the last one of three was, now and then), and those tasks get a turn first.
        let relay = self.relay.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PROGRESS_LINGER).await;
            lock(&relay.progress).remove(&up_token);
        });
        tokio::task::yield_now().await;
        out
    }

    /// Calls `tool` on the server with the agent's `_meta` (its envelope, its trace context),
    /// the effect key added when there is one.
    pub(crate) async fn call_tool(
        &self,
        tool: &str,
        args: Map<String, Value>,
        key: Option<&str>,
        agent_meta: &rmcp::model::RequestMetaObject,
        timeout: Duration,
    ) -> Result<CallToolResult, CallError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let req = ClientRequest::CallToolRequest(Request::new(params));
        let mut meta = agent_meta.clone();
        if key.is_none() {
            // An observer's call: the agent's progress is not about it.
            meta.0 .0.remove("progressToken");
        }
        let extra = key.map(|k| (super::META_EFFECT_KEY, Value::String(k.to_string())));
        let never = tokio_util::sync::CancellationToken::new();
        match self
            .forward(req, &meta, &never, extra, Some(timeout))
            .await?
        {
            ServerResult::CallToolResult(r) => Ok(r),
            other => serde_json::to_value(&other)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
                .ok_or_else(|| CallError::Lost("the server's answer is not a tool result".into())),
        }
    }
}
