//! The gateway's two MCP sides (the official SDK, rmcp): a server on stdio to the agent's
//! client, a client to the server it starts. Requests and notifications pass through both ways
//! (progress re-addressed to the token the other side gave, cancellation carried to the
//! request it cancels); `tools/call` of a guarded tool is an effect ([`super::call`]).
use super::call::{answer, ToolEffect};
use super::elicit;
use super::{facts, note, plan, Config, Hints};
use crate::effect::{self, Ctx, Outcome};
use crate::sanitize::inert;
use crate::{JobName, Store, Token};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotification, CancelledNotificationParam,
    ClientConfig, ClientNotification, ClientRequest, ClientResult, ContentBlock, ErrorData,
    GetMeta, InitializeResult, ProgressNotificationParam, ProgressToken, Request,
    ServerCapabilities, ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
    RunningService, Service, ServiceError, ServiceExt,
};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a gateway runs with.
pub struct Options {
    /// The database (`--db`).
    pub db: Option<String>,
    /// The gateway's job (`--name`).
    pub name: JobName,
    /// The fencing token of its lease.
    pub token: Token,
    /// Its file.
    pub config: Config,
    /// The server's command line.
    pub command: Vec<String>,
    /// A streamable-HTTP server's URL, instead of a command.
    pub url: Option<String>,
}

/// Why a call to the server has no answer.
#[derive(Debug, Clone)]
pub enum CallError {
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
struct Relay {
    down: Mutex<Option<Peer<RoleServer>>>,
    progress: Mutex<HashMap<ProgressToken, ProgressToken>>,
    /// The server's hints per tool, as its last `tools/list` gave them (forgotten when it says
    /// its tools changed).
    hints: Mutex<HashMap<String, Hints>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
pub struct Upstream {
    command: Vec<String>,
    url: Option<String>,
    /// The tools whose calls carry their effect key as an `Idempotency-Key` header (`--url`).
    keyed: super::http::KeyedTools,
    info: Mutex<Option<ClientConfig>>,
    running: tokio::sync::Mutex<Option<RunningService<RoleClient, UpHandler>>>,
    relay: Arc<Relay>,
}

impl Upstream {
    /// The server's peer, starting it (again) if it is not running.
    async fn peer(&self) -> Result<Peer<RoleClient>, String> {
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
    async fn forward(
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
        lock(&self.relay.progress).remove(&up_token);
        out
    }

    /// Calls `tool` on the server with the agent's `_meta` (its envelope, its trace context),
    /// the effect key added when there is one.
    pub async fn call_tool(
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

/// The server side: one per gateway.
pub struct Gateway {
    opts: Options,
    upstream: Arc<Upstream>,
    stores: Mutex<Vec<Store>>,
}

/// The rmcp service over a shared [`Gateway`].
#[derive(Clone)]
pub struct GatewayService(Arc<Gateway>);

impl Gateway {
    /// A gateway for `opts`, its server not started yet (the agent's `initialize` starts it).
    pub fn new(opts: Options) -> Arc<Gateway> {
        let upstream = Arc::new(Upstream {
            command: opts.command.clone(),
            url: opts.url.clone(),
            keyed: super::http::KeyedTools::of(&opts.config),
            info: Mutex::new(None),
            running: tokio::sync::Mutex::new(None),
            relay: Arc::new(Relay::default()),
        });
        Arc::new(Gateway {
            opts,
            upstream,
            stores: Mutex::new(Vec::new()),
        })
    }

    fn remember(&self, tools: &[rmcp::model::Tool]) {
        let mut h = lock(&self.upstream.relay.hints);
        for t in tools {
            let a = t.annotations.as_ref();
            h.insert(
                t.name.to_string(),
                Hints {
                    read_only: a.and_then(|a| a.read_only_hint),
                    destructive: a.and_then(|a| a.destructive_hint),
                },
            );
        }
    }

    /// The server's hints for `tool`, listing its tools first if it was not seen yet.
    async fn hints(&self, tool: &str) -> Hints {
        if let Some(h) = lock(&self.upstream.relay.hints).get(tool) {
            return *h;
        }
        if let Ok(peer) = self.upstream.peer().await {
            if let Ok(tools) = peer.list_all_tools().await {
                self.remember(&tools);
            }
        }
        lock(&self.upstream.relay.hints)
            .get(tool)
            .copied()
            .unwrap_or_default()
    }

    async fn call_tool(
        self: &Arc<Self>,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let tool = params.name.to_string();
        let plan = plan(&self.opts.config, &tool, self.hints(&tool).await);
        if !plan.guarded {
            let req = ClientRequest::CallToolRequest(Request::new(params));
            return self.pass(req, ctx).await;
        }
        let args = params.arguments.clone().unwrap_or_default();
        let spec = match facts(&tool, &plan, &args, &self.opts.name) {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(format!("exactly: {e}"))),
        };
        let progress = ctx.meta.get_progress_token();
        let deadline = plan.wait.map(|w| Instant::now() + w);
        loop {
            let effect = ToolEffect {
                rt: tokio::runtime::Handle::current(),
                upstream: self.upstream.clone(),
                tool: tool.clone(),
                args: args.clone(),
                meta: ctx.meta.clone(),
                timeout: plan.call_lease,
                observe: plan.rule.as_ref().and_then(|r| r.observe.clone()),
                last: None,
            };
            let (out, last) = match self.attempt(spec.clone(), effect).await {
                Ok(x) => x,
                Err(e) => return Ok(tool_error(format!("exactly: the ledger failed: {e}"))),
            };
            if let (Outcome::AwaitingApproval { key }, Some(d)) = (&out, deadline) {
                let terms = spec.terms.as_deref().unwrap_or_default();
                if Instant::now() < d && self.hold(key, terms, d, progress.clone(), ctx).await {
                    continue;
                }
            }
            return Ok(ServerResult::CallToolResult(answer(&out, last)));
        }
    }

    /// One attempt at the effect, on a blocking thread (the ledger's calls block).
    async fn attempt(
        self: &Arc<Self>,
        spec: effect::Spec,
        mut eff: ToolEffect,
    ) -> crate::Result<(Outcome, Option<CallToolResult>)> {
        let gw = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut store = gw.store()?;
            let ctx = Ctx::new(&gw.opts.name, gw.opts.token);
            let out = effect::run(&mut store, &ctx, &spec, &mut eff);
            lock(&gw.stores).push(store);
            Ok((out?, eff.last.take()))
        })
        .await
        .map_err(|e| crate::Error::Store(format!("the attempt's thread failed: {e}")))?
    }

    fn store(&self) -> crate::Result<Store> {
        if let Some(s) = lock(&self.stores).pop() {
            return Ok(s);
        }
        crate::open(self.opts.db.as_deref(), crate::Access::Write)
    }

    /// Holds a call awaiting approval until it is decided (true), the deadline passes or the
    /// client cancels (false), telling the agent's client how it stands as progress.
    /// A client that declared elicitation is asked too ([`elicit`]); its answer decides as
    /// `exactly approve`/`deny` would, and the ask ends with the hold.
    async fn hold(
        self: &Arc<Self>,
        key: &crate::EffectKey,
        terms: &str,
        deadline: Instant,
        progress: Option<ProgressToken>,
        ctx: &RequestContext<RoleServer>,
    ) -> bool {
        let _asking = self.elicits().then(|| {
            let (gw, peer, key, terms) = (
                self.clone(),
                ctx.peer.clone(),
                key.clone(),
                terms.to_string(),
            );
            Asking(tokio::spawn(async move {
                if let Some(answer) = elicit::ask(&peer, &key, &terms).await {
                    let _ = tokio::task::spawn_blocking(move || gw.decide(&key, answer)).await;
                }
            }))
        });
        let mut n = 0u32;
        loop {
            let gw = self.clone();
            let k = key.clone();
            let state = tokio::task::spawn_blocking(move || {
                let mut s = gw.store()?;
                let got = crate::approval::get(&mut s, &k);
                lock(&gw.stores).push(s);
                got
            })
            .await;
            match state {
                Ok(Ok(Some(a))) if a.state != crate::state::ApprovalState::Pending => return true,
                Ok(Ok(_)) => {}
                _ => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Some(t) = &progress {
                let mut p = ProgressNotificationParam::new(t.clone(), f64::from(n));
                p.message = Some(format!(
                    "awaiting a person's approval: exactly approve {key}"
                ));
                let _ = ctx.peer.notify_progress(p).await;
            }
            n += 1;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = ctx.ct.cancelled() => return false,
            }
        }
    }

    /// Whether the agent's client declared the elicitation capability.
    fn elicits(&self) -> bool {
        lock(&self.upstream.info)
            .as_ref()
            .is_some_and(|i| i.capabilities.elicitation.is_some())
    }

    /// The client's person's answer, recorded as `exactly approve`/`deny` records one: of two
    /// deciders at once one wins, the other finds it decided.
    fn decide(&self, key: &crate::EffectKey, answer: elicit::Answer) -> crate::Result<()> {
        let mut s = self.store()?;
        let got = match answer {
            elicit::Answer::Approve => crate::approval::approve(&mut s, key, elicit::ACTOR, None),
            elicit::Answer::Deny => crate::approval::deny(&mut s, key, elicit::ACTOR, None),
        };
        lock(&self.stores).push(s);
        got.map(|_| ())
    }

    async fn pass(
        &self,
        req: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        self.upstream
            .forward(req, &ctx.meta, &ctx.ct, None, None)
            .await
            .map_err(|e| match e {
                CallError::Refused(e) => e,
                CallError::NotSent(m) | CallError::Lost(m) => ErrorData::internal_error(m, None),
            })
    }

    async fn initialize(
        &self,
        params: ClientConfig,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        *lock(&self.upstream.relay.down) = Some(ctx.peer.clone());
        *lock(&self.upstream.info) = Some(params);
        let peer = self
            .upstream
            .peer()
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        let info = peer
            .peer_info()
            .and_then(|i| serde_json::to_value(&*i).ok())
            .map(|mut v| {
                if v.get("serverInfo").is_none() {
                    v["serverInfo"] = serde_json::json!({"name": "exactly-mcp", "version": env!("CARGO_PKG_VERSION")});
                }
                v
            })
            .and_then(|v| serde_json::from_value::<InitializeResult>(v).ok())
            .unwrap_or_else(|| InitializeResult::new(ServerCapabilities::default()));
        Ok(ServerResult::InitializeResult(info))
    }
}

/// The elicitation of a held call, ended (its request dropped) when the hold ends.
struct Asking(tokio::task::JoinHandle<()>);

impl Drop for Asking {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn tool_error(text: String) -> ServerResult {
    ServerResult::CallToolResult(CallToolResult::error(vec![ContentBlock::text(text)]))
}

impl Service<RoleServer> for GatewayService {
    async fn handle_request(
        &self,
        request: ClientRequest,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let gw = &self.0;
        match request {
            ClientRequest::InitializeRequest(r) => gw.initialize(r.params, &ctx).await,
            ClientRequest::CallToolRequest(r) => gw.call_tool(r.params, &ctx).await,
            ClientRequest::ListToolsRequest(r) => {
                let got = gw.pass(ClientRequest::ListToolsRequest(r), &ctx).await?;
                let ServerResult::ListToolsResult(mut list) = got else {
                    return Ok(got);
                };
                gw.remember(&list.tools);
                for t in &mut list.tools {
                    let h = lock(&gw.upstream.relay.hints).get(t.name.as_ref()).copied();
                    let p = plan(&gw.opts.config, &t.name, h.unwrap_or_default());
                    if let Some(n) = note(&p) {
                        let d = t.description.as_deref().unwrap_or("");
                        let sep = if d.is_empty() { "" } else { " " };
                        t.description = Some(format!("{d}{sep}{n}").into());
                    }
                }
                Ok(ServerResult::ListToolsResult(list))
            }
            other => gw.pass(other, &ctx).await,
        }
    }

    async fn handle_notification(
        &self,
        n: ClientNotification,
        _ctx: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        match n {
            // The client side made its own handshake; a cancellation reaches the request it
            // names through that request's token; a progress of the agent's names its tokens.
            ClientNotification::InitializedNotification(_)
            | ClientNotification::CancelledNotification(_)
            | ClientNotification::ProgressNotification(_) => Ok(()),
            other => {
                if let Ok(peer) = self.0.upstream.peer().await {
                    let _ = peer.send_notification(other).await;
                }
                Ok(())
            }
        }
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        InitializeResult::new(ServerCapabilities::default())
    }
}

/// Serves the agent's client on stdin/stdout until it disconnects.
pub async fn serve(opts: Options) -> crate::Result<()> {
    // An https:// server's TLS: the provider the PostgreSQL client's TLS uses too.
    #[cfg(feature = "tls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let gw = Gateway::new(opts);
    let running = GatewayService(gw.clone())
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| crate::Error::Usage(format!("the MCP client did not initialise: {e}")))?;
    let _ = running.waiting().await;
    if let Some(r) = gw.upstream.running.lock().await.take() {
        let _ = r.cancel().await;
    }
    Ok(())
}
