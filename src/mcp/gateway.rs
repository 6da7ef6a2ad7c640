//! The gateway's two MCP sides (the official SDK, rmcp): a server on stdio to the agent's
//! client, a client to the server it starts. Requests and notifications pass through both ways
//! (progress re-addressed to the token the other side gave, cancellation carried to the
//! request it cancels); `tools/call` of a guarded tool is an effect ([`super::call`]).
use super::call::{answer, ToolEffect};
use super::elicit;
use super::upstream::{lock, CallError, Upstream};
use super::{facts, note, plan, Config, Hints};
use crate::effect::{self, Ctx, Outcome};
use crate::{JobName, Store, Token};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ClientNotification, ClientRequest,
    ContentBlock, ErrorData, InitializeResult, ProgressNotificationParam, ProgressToken, Request,
    ServerCapabilities, ServerResult,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a gateway runs with.
pub(crate) struct Options {
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

/// The server side: one per gateway.
pub(crate) struct Gateway {
    opts: Options,
    upstream: Arc<Upstream>,
    stores: Mutex<Vec<Store>>,
}

/// The rmcp service over a shared [`Gateway`].
#[derive(Clone)]
pub(crate) struct GatewayService(Arc<Gateway>);

impl Gateway {
    /// A gateway for `opts`, its server not started yet (the agent's `initialize` starts it).
    pub(crate) fn new(opts: Options) -> Arc<Gateway> {
        let upstream = Arc::new(Upstream::new(
            opts.command.clone(),
            opts.url.clone(),
            super::http::KeyedTools::of(&opts.config),
        ));
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
pub(crate) async fn serve(opts: Options) -> crate::Result<()> {
    // An https:// server's TLS: the provider the PostgreSQL client's TLS uses too.
    #[cfg(feature = "tls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let gw = Gateway::new(opts);
    let running = GatewayService(gw.clone())
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| crate::Error::Usage(format!("the MCP client did not initialise: {e}")))?;
    let _ = running.waiting().await;
    gw.upstream.stop().await;
    Ok(())
}
