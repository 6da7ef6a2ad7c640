//! The far side as an MCP server (`exactly far-side mcp --socket S`, hidden), for the `mcp`
//! scenario: on stdio, the official SDK's server side; `send_message(target, run, i, k)` sends
//! `SEND k` to the far side, `seen(k)` (read-only) asks `SEEN k`. With
//! `EXACTLY_CHAOS_MCP_HOLD=SECS` it announces [`SENT_MARKER`] once its request left and waits
//! that long before it reads the answer, so the harness can kill it or its gateway there.
use super::far_client::request;
use crate::Result;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientNotification, ClientRequest, ContentBlock,
    ErrorData, InitializeResult, ListToolsResult, ServerCapabilities, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceExt};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

/// Said on stderr once the request left (with `EXACTLY_CHAOS_MCP_HOLD`).
pub(super) const SENT_MARKER: &str = "far-side-mcp: sent";
/// The variable that holds the server after its request left.
pub(super) const HOLD_ENV: &str = "EXACTLY_CHAOS_MCP_HOLD";

struct FarMcp {
    socket: PathBuf,
}

fn tools() -> Vec<Tool> {
    let send = json!({
        "name": "send_message",
        "description": "Sends a message to the chaos far side.",
        "inputSchema": {"type": "object", "properties": {
            "target": {"type": "string"}, "run": {"type": "string"},
            "i": {"type": "string"}, "k": {"type": "string"}}},
    });
    let seen = json!({
        "name": "seen",
        "description": "Whether the far side got a message.",
        "inputSchema": {"type": "object", "properties": {"k": {"type": "string"}}},
        "annotations": {"readOnlyHint": true},
    });
    [send, seen]
        .into_iter()
        .filter_map(|t| serde_json::from_value(t).ok())
        .collect()
}

fn text(t: String, error: bool) -> CallToolResult {
    let c = vec![ContentBlock::text(t)];
    if error {
        CallToolResult::error(c)
    } else {
        CallToolResult::success(c)
    }
}

impl FarMcp {
    fn send(&self, k: &str) -> CallToolResult {
        let hold: f64 = std::env::var(HOLD_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0);
        let mut conn = match std::os::unix::net::UnixStream::connect(&self.socket) {
            Ok(c) => c,
            Err(e) => return text(format!("unreachable: {e}"), true),
        };
        if let Err(e) = conn.write_all(format!("SEND {k} mcp\n").as_bytes()) {
            return text(format!("send failed: {e}"), true);
        }
        if hold > 0.0 {
            eprintln!("{SENT_MARKER}");
            std::thread::sleep(std::time::Duration::from_secs_f64(hold));
        }
        let mut line = String::new();
        match BufReader::new(&conn).read_line(&mut line) {
            Ok(n) if n > 0 && line.starts_with("OK") => text(line.trim().to_string(), false),
            _ => text("no answer".into(), true),
        }
    }

    fn call(&self, p: &CallToolRequestParams) -> CallToolResult {
        let arg = |n: &str| {
            p.arguments
                .as_ref()
                .and_then(|a| a.get(n))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match p.name.as_ref() {
            "send_message" => self.send(&arg("k")),
            "seen" => match request(&self.socket, &format!("SEEN {}", arg("k"))) {
                Ok(r) => text(r, false),
                Err(e) => text(format!("cannot tell: {e}"), true),
            },
            other => text(format!("no tool {other}"), true),
        }
    }
}

impl Service<RoleServer> for FarMcp {
    async fn handle_request(
        &self,
        request: ClientRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> std::result::Result<ServerResult, ErrorData> {
        Ok(match request {
            ClientRequest::InitializeRequest(_) => ServerResult::InitializeResult(self.get_info()),
            ClientRequest::ListToolsRequest(_) => {
                ServerResult::ListToolsResult(ListToolsResult::with_all_items(tools()))
            }
            ClientRequest::CallToolRequest(r) => {
                let r = tokio::task::block_in_place(|| self.call(&r.params));
                ServerResult::CallToolResult(r)
            }
            ClientRequest::PingRequest(_) => ServerResult::empty(()),
            _ => return Err(ErrorData::method_not_found::<rmcp::model::PingRequestMethod>()),
        })
    }

    async fn handle_notification(
        &self,
        _n: ClientNotification,
        _ctx: NotificationContext<RoleServer>,
    ) -> std::result::Result<(), ErrorData> {
        Ok(())
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        let mut caps = ServerCapabilities::default();
        caps.tools = Some(Default::default());
        InitializeResult::new(caps)
    }
}

/// Serves on stdio until the client goes.
pub(super) fn serve(socket: PathBuf) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| crate::Error::io("cannot start the runtime", e))?;
    rt.block_on(async move {
        let running = FarMcp { socket }
            .serve((tokio::io::stdin(), tokio::io::stdout()))
            .await
            .map_err(|e| crate::Error::Usage(format!("the MCP client did not initialise: {e}")))?;
        let _ = running.waiting().await;
        Ok(0)
    })
}
