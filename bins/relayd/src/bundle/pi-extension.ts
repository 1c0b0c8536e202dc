// Relay's pi extension, written by `relayd managed-bundle` (do not edit a deployed copy:
// `relay-doctor --managed-bundle` checks it against the bundle's SHA-256).
//
// What it does, once per pi process:
// - starts `relay-mcp` as the lifecycle anchor of this harness session (pi has no MCP) and
//   keeps it across pi's reload, new, resume and fork, which re-run this file;
// - forwards pi's events to `relay-hook pi`, and turns a refusal of `tool_call` or
//   `user_bash` into `{ block: true, reason }`;
// - points each of the user's providers that speak Anthropic Messages, OpenAI Responses or
//   OpenAI Chat at the daemon, keeping the user's own API key and headers, and adding the
//   route credential, the provider's original base URL and the session id as headers.
//
// It uses only Node's built-ins and what pi hands an extension: no build step, no npm package.

import { spawn, type ChildProcess } from "node:child_process";

/** Filled in by `relayd managed-bundle`. */
const BUNDLE: { daemonAddress: string; relayMcp: string; relayHook: string } =
  __RELAY_BUNDLE_CONFIG__;

/** The events forwarded to `relay-hook pi` (never the per-token updates). */
const FORWARDED = [
  "session_start",
  "input",
  "tool_call",
  "tool_result",
  "user_bash",
  "agent_start",
  "agent_end",
  "before_provider_request",
  "after_provider_response",
  "session_shutdown",
] as const;

/** Events where a refusal means "do not do this": they fail closed. */
const BLOCKING = new Set<string>(["tool_call", "user_bash"]);

/** Provider APIs the daemon serves. */
const RELAYED_APIS = new Set<string>(["anthropic-messages", "openai-responses", "openai-completions"]);

/** pi resolves a header value that names an environment variable at each request. */
const SESSION_ENV = "RELAY_PI_SESSION_ID";
const TOKEN_ENV = "RELAY_CLIENT_TOKEN";

/** How long `relay-mcp`'s `initialize` may take: it answers once the route has settled. */
const INITIALIZE_TIMEOUT_MS = 8000;
/** Longer than relay-hook's own timeout (5 s), so relay-hook decides. */
const HOOK_TIMEOUT_MS = 10000;

/** State that must outlive one load of this file: pi re-runs it on reload/new/resume/fork. */
interface ProcessState {
  mcp?: ChildProcess;
  mcpReady?: Promise<void>;
  /** provider name -> the base URL it had before it was pointed at the daemon */
  originalBase: Map<string, string>;
  /** provider name -> its request config (apiKey, headers, authHeader) before that */
  originalRequest: Map<string, { apiKey?: string; headers?: Record<string, string>; authHeader?: boolean }>;
  saidSkipped: boolean;
  exitHooked: boolean;
}

const STATE_KEY = Symbol.for("relay.pi-extension.v1");

function processState(): ProcessState {
  const holder = globalThis as unknown as Record<symbol, ProcessState | undefined>;
  let state = holder[STATE_KEY];
  if (!state) {
    state = { originalBase: new Map(), originalRequest: new Map(), saidSkipped: false, exitHooked: false };
    holder[STATE_KEY] = state;
  }
  return state;
}

function say(line: string): void {
  process.stderr.write(`relay: ${line}\n`);
}

/** Starts `relay-mcp` unless this process already has one, and waits for its `initialize`. */
function ensureMcp(state: ProcessState): Promise<void> {
  if (state.mcp && state.mcp.exitCode === null && state.mcp.signalCode === null && state.mcpReady) {
    return state.mcpReady;
  }
  const child = spawn(BUNDLE.relayMcp, ["--daemon-address", BUNDLE.daemonAddress], {
    stdio: ["pipe", "pipe", "inherit"],
    windowsHide: true,
  });
  state.mcp = child;
  // pi must be able to exit without waiting for relay-mcp: its stdin closes with pi, and
  // relay-mcp ends its session at the end of stdin.
  child.unref();
  for (const stream of [child.stdin, child.stdout] as any[]) {
    stream?.unref?.();
  }
  state.mcpReady = new Promise<void>((resolve) => {
    let buffered = "";
    const timer = setTimeout(() => {
      say("relay-mcp did not answer initialize in time; continuing");
      resolve();
    }, INITIALIZE_TIMEOUT_MS);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    child.on("error", (error) => {
      say(`cannot start ${BUNDLE.relayMcp}: ${error.message}`);
      done();
    });
    child.on("exit", done);
    child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      // Any answer to request 1 means the route has settled (worker or pass-through).
      if (buffered.includes('"id":1')) {
        done();
      }
    });
    child.stdin?.on("error", () => {});
    const initialize = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "pi-relay-extension", version: "1" } },
    };
    child.stdin?.write(`${JSON.stringify(initialize)}\n`);
  });
  if (!state.exitHooked) {
    state.exitHooked = true;
    // Closing stdin ends relay-mcp's session; pi may exit without a session_shutdown.
    process.on("exit", () => stopMcp(processState()));
  }
  return state.mcpReady;
}

function stopMcp(state: ProcessState): void {
  const child = state.mcp;
  state.mcp = undefined;
  state.mcpReady = undefined;
  if (child && child.exitCode === null) {
    child.stdin?.end();
  }
}

/** JSON of an event without functions, cycles or bigints. */
function serialize(value: unknown): string {
  const seen = new WeakSet<object>();
  return JSON.stringify(value, (_key, v) => {
    if (typeof v === "function" || typeof v === "symbol") return undefined;
    if (typeof v === "bigint") return v.toString();
    if (v && typeof v === "object") {
      if (seen.has(v)) return undefined;
      seen.add(v);
    }
    return v;
  });
}

interface HookResult {
  code: number | null;
  stderr: string;
  failed?: string;
}

function runHook(name: string, body: string): Promise<HookResult> {
  const mode = BLOCKING.has(name) ? "--fail-closed" : "--fail-open";
  return new Promise<HookResult>((resolve) => {
    let stderr = "";
    let settled = false;
    const finish = (result: HookResult) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(result);
      }
    };
    const child = spawn(BUNDLE.relayHook, ["pi", "--daemon-address", BUNDLE.daemonAddress, mode], {
      stdio: ["pipe", "ignore", "pipe"],
      windowsHide: true,
    });
    const timer = setTimeout(() => {
      child.kill();
      finish({ code: null, stderr, failed: "relay-hook timed out" });
    }, HOOK_TIMEOUT_MS);
    child.stderr?.on("data", (chunk: Buffer) => {
      if (stderr.length < 4096) stderr += chunk.toString("utf8");
    });
    child.on("error", (error) => finish({ code: null, stderr, failed: `cannot start relay-hook: ${error.message}` }));
    child.on("exit", (code) => finish({ code, stderr }));
    child.stdin?.on("error", () => {});
    child.stdin?.end(body);
  });
}

/** Forwards one event; on a blocking event, the reason to block, if any. */
async function forward(name: string, event: unknown, ctx: any): Promise<string | undefined> {
  let sessionId = "";
  try {
    sessionId = ctx?.sessionManager?.getSessionId?.() ?? "";
  } catch {}
  const body = serialize({ hook_event_name: name, cwd: ctx?.cwd ?? process.cwd(), session_id: sessionId, event });
  const result = await runHook(name, body);
  if (!BLOCKING.has(name)) {
    return undefined;
  }
  if (result.code === 0) {
    return undefined;
  }
  const detail = result.failed ?? result.stderr.trim();
  return detail.length > 0 ? detail : `relay-hook exited with ${result.code}`;
}

/** The daemon URL that stands in for a provider base; the path pi appends stays the same. */
function daemonBase(api: string, original: string): string {
  if (api !== "anthropic-messages" && original.replace(/\/+$/, "").endsWith("/v1")) {
    return `${BUNDLE.daemonAddress}/v1`;
  }
  return BUNDLE.daemonAddress;
}

/** Points the user's providers at the daemon (once their originals are known). */
function relayProviders(pi: any, ctx: any, state: ProcessState): void {
  const registry = ctx?.modelRegistry;
  if (!registry) return;
  let models: any[] = [];
  try {
    models = registry.getAvailable?.() ?? registry.getAll?.() ?? [];
  } catch {
    return;
  }
  const byProvider = new Map<string, any[]>();
  for (const model of models) {
    const list = byProvider.get(model.provider) ?? [];
    list.push(model);
    byProvider.set(model.provider, list);
  }
  const skipped: string[] = [];
  // The registry's request config (apiKey, headers) is private in pi's types but is what
  // registerProvider replaces: carry it over so the user's own key keeps working.
  const requestConfigs: Map<string, any> | undefined = registry.providerRequestConfigs;
  for (const [provider, list] of byProvider) {
    const apis = new Set(list.map((m) => m.api));
    const bases = new Set(list.map((m) => state.originalBase.get(provider) ?? m.baseUrl));
    const [api] = [...apis];
    if (apis.size !== 1 || !RELAYED_APIS.has(api) || bases.size !== 1) {
      skipped.push(provider);
      continue;
    }
    const [current] = [...bases];
    if (!state.originalBase.has(provider)) {
      state.originalBase.set(provider, current);
      const config = requestConfigs?.get?.(provider);
      state.originalRequest.set(provider, {
        apiKey: config?.apiKey,
        headers: config?.headers ? { ...config.headers } : undefined,
        authHeader: config?.authHeader,
      });
    }
    const original = state.originalBase.get(provider) ?? current;
    const request = state.originalRequest.get(provider) ?? {};
    const headers: Record<string, string> = {
      ...(request.headers ?? {}),
      "x-relay-upstream-base-url": original,
      "x-relay-session-id": SESSION_ENV,
    };
    if (process.env[TOKEN_ENV]) {
      headers["x-relay-client-token"] = TOKEN_ENV;
    }
    pi.registerProvider(provider, {
      baseUrl: daemonBase(api, original),
      apiKey: request.apiKey,
      authHeader: request.authHeader,
      headers,
    });
  }
  if (skipped.length > 0 && !state.saidSkipped) {
    state.saidSkipped = true;
    say(`not routed through Relay (their API is not Anthropic Messages, OpenAI Responses or OpenAI Chat): ${skipped.join(", ")}`);
  }
}

export default async function relay(pi: any): Promise<void> {
  const state = processState();
  await ensureMcp(state);

  for (const name of FORWARDED) {
    pi.on(name, async (event: any, ctx: any) => {
      if (name === "session_start") {
        try {
          process.env[SESSION_ENV] = ctx?.sessionManager?.getSessionId?.() ?? "";
        } catch {}
        relayProviders(pi, ctx, state);
      }
      const reason = await forward(name, event, ctx);
      if (name === "session_shutdown" && event?.reason === "quit") {
        stopMcp(state);
      }
      if (reason === undefined) {
        return undefined;
      }
      if (name === "user_bash") {
        // pi runs a user `!` command unless a result replaces it.
        return {
          block: true,
          reason,
          result: { output: `Blocked by Relay: ${reason}\n`, exitCode: 126, cancelled: false, truncated: false },
        };
      }
      return { block: true, reason };
    });
  }
}
