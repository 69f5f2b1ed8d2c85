// Shared by the JS peers. The clients (client03.mjs, client13.mjs): the scenario runner, a
// recording fetch and the JSON lines printed on stdout (the format is described in
// tests/support/peers.py). The workers (worker03.mjs, worker13.mjs): what their message texts
// mean and how they listen, announce themselves and exit.
import { fstatSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";

export function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + "\n");
}

/** A fetch that records every exchange (the response body as the SDK reads it). */
export function recordingFetch(extraHeaders = {}) {
  const records = [];
  async function fetchImpl(input, init) {
    const headers = new Headers(init?.headers ?? {});
    for (const [name, value] of Object.entries(extraHeaders)) headers.set(name, value);
    const response = await fetch(input, { ...init, headers });
    let rpcMethod = null;
    try {
      rpcMethod = JSON.parse(init?.body ?? "null")?.method ?? null;
    } catch {
      rpcMethod = null;
    }
    const record = {
      httpMethod: init?.method ?? "GET", url: String(input), rpcMethod,
      a2aVersion: headers.get("a2a-version"), status: response.status,
      contentType: response.headers.get("content-type"), body: "",
    };
    records.push(record);
    if (!response.body) return response;
    const decoder = new TextDecoder();
    const tee = new TransformStream({
      transform(chunk, controller) {
        record.body += decoder.decode(chunk, { stream: true });
        controller.enqueue(chunk);
      },
    });
    return new Response(response.body.pipeThrough(tee), {
      status: response.status, statusText: response.statusText, headers: response.headers,
    });
  }
  function flush(index) {
    for (const record of records.splice(0)) emit({ type: "wire", index, ...record });
  }
  return { fetchImpl, flush };
}

/** The JSON-RPC code and message an SDK error carries (or its reason and HTTP status), with its
 * cause chain. */
export function describeError(err, depth = 0) {
  const out = { name: err?.name ?? typeof err, text: String(err?.message ?? err) };
  const rpc = err?.errorResponse?.error; // @a2a-js/sdk 0.3: *JSONRPCError.errorResponse
  if (rpc && typeof rpc.code === "number") {
    out.code = rpc.code;
    out.message = rpc.message;
  } else if (typeof err?.envelopeCode === "number") { // @a2a-js/sdk 1.x: A2AError.envelopeCode
    out.code = err.envelopeCode;
    out.message = err.message;
  }
  // @a2a-js/sdk 1.x: every A2AError has its ErrorInfo reason; HTTP+JSON ones their HTTP status.
  if (typeof err?.reason === "string") out.reason = err.reason;
  if (err?.transport === "rest" && typeof err.statusCode === "number") out.status = err.statusCode;
  if (err?.cause && depth < 3) out.cause = describeError(err.cause, depth + 1);
  return out;
}

/** Ops that address the last task seen unless the step names a taskId. */
const LAST_TASK_OPS = new Set(["get", "cancel"]);

/**
 * Run a scenario: argv[2] is the card URL, stdin the scenario JSON.
 * `connect(cardUrl, fetchImpl, scenario)` returns {client, info}; `ops` maps step ops to async
 * iterables (or promises) and `describe(item)` turns one event into {kind, taskId, contextId,
 * state, final, raw}. The tasks a `list` step prints do not change the last task seen; a step
 * with `until` stops iterating after the first event in that state (outcome "stopped").
 */
export async function runScenario({ connect, ops, describe }) {
  const cardUrl = process.argv[2];
  const scenario = JSON.parse(readFileSync(0, "utf8"));
  const timer = setTimeout(() => {
    process.stderr.write(`scenario timed out after ${scenario.timeout ?? 20}s\n`);
    process.exit(3);
  }, 1000 * (scenario.timeout ?? 20));
  const wire = recordingFetch(scenario.headers ?? {});
  const { client, info } = await connect(cardUrl, wire.fetchImpl, scenario);
  emit({ type: "client", cardUrl, ...info });
  wire.flush(null);
  let taskId = null;
  let contextId = null;
  for (const [index, original] of scenario.steps.entries()) {
    const step = original.sameTask ? { taskId, contextId, ...original }
      : LAST_TASK_OPS.has(original.op) ? { taskId, ...original } : original;
    emit({ type: "step", index, op: step.op });
    const started = performance.now();
    const at = () => Math.round(performance.now() - started) / 1000;
    let outcome = "ended";
    try {
      if (!Object.hasOwn(ops, step.op)) throw new Error(`unknown op ${JSON.stringify(step.op)}`);
      const result = ops[step.op](client, step);
      const items = result && typeof result[Symbol.asyncIterator] === "function" ? result : [await result];
      for await (const item of items) {
        const event = describe(item);
        if (step.op !== "list") {
          taskId = event.taskId || taskId;
          contextId = event.contextId || contextId;
        }
        emit({ type: "event", index, at: at(), ...event });
        if (step.until !== undefined && event.state === step.until) {
          outcome = "stopped";
          break; // for-await closes the SDK's iterator
        }
      }
    } catch (err) {
      emit({ type: "error", index, at: at(), stack: String(err?.stack ?? ""), ...describeError(err) });
      wire.flush(index);
      emit({ type: "step_end", index, outcome: "error" });
      continue;
    }
    wire.flush(index);
    emit({ type: "step_end", index, outcome, at: at() });
  }
  emit({ type: "done" });
  clearTimeout(timer);
  process.exit(0); // do not wait for idle keep-alive sockets
}

export function newMessageId() {
  return `m-${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

// --------------------------------------------------------------------------- workers

/** The demo behaviours' fixed texts (the same as demo/worker.py's). */
export const DEMO = {
  artifactName: "result",
  askQuestion: "Which date?",
  directReply: "direct reply",
  failMessage: "demo failure requested",
  restPath: "/rest",
};

/** The card members both workers share (name, description, skills, …), for `sdk` ("0.3.14"). */
export function demoCardBasics(sdk) {
  return {
    name: "a2a-gateway JS demo worker",
    description: `Echo agent on @a2a-js/sdk ${sdk} for a2a-gateway tests. The message text selects the behaviour: `
      + '"slow..." waits until cancelled, "ask..." asks for input, "fail..." fails, "direct" answers with a '
      + 'message, anything else completes with "hello <text>".',
    version: "0.1.0",
    provider: { organization: "a2a-gateway", url: "https://github.com/a2aproject" },
    capabilities: { streaming: true, pushNotifications: false },
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [{
      id: "echo", name: "Echo", description: 'Replies "hello <text>"; see the card description.',
      tags: ["demo", "echo"], examples: ["hi", "slow task", "ask for a date", "direct"],
    }],
  };
}

/** Exit on SIGTERM / SIGINT and, when stdin is a pipe or socket, as soon as it closes. */
function exitWhenParentGoes() {
  const exit = () => process.exit(0);
  process.once("SIGTERM", exit);
  process.once("SIGINT", exit);
  const stdin = fstatSync(0);
  if (stdin.isFIFO() || stdin.isSocket()) {
    process.stdin.on("end", exit).on("close", exit).resume();
  }
}

/** The worker's parsed command line (`port`, `host`, `sign-jwk`), once listenWorker ran. */
export const workerArgs = {};

/**
 * Parse `--port` (default 0: ephemeral), `--host` (default 127.0.0.1) and `--sign-jwk` (a private
 * JWK file the worker signs its card with, worker13.mjs only; kept in `workerArgs`), arrange the exit
 * rules, and listen with `app` (an express app); resolves to BASE (`http://HOST:PORT`, the port
 * actually bound) once listening. Call `announceReady(base)` after mounting the routes.
 */
export async function listenWorker(app) {
  const { values: args } = parseArgs({
    options: { port: { type: "string", default: "0" }, host: { type: "string", default: "127.0.0.1" },
               "sign-jwk": { type: "string" } },
  });
  Object.assign(workerArgs, args);
  exitWhenParentGoes();
  const server = createServer(app);
  await new Promise((resolve, reject) => server.once("error", reject).listen(Number(args.port), args.host, resolve));
  return `http://${args.host.includes(":") ? `[${args.host}]` : args.host}:${server.address().port}`;
}

/** The one line a worker prints on stdout once it serves: {"type":"ready","url":BASE}. */
export function announceReady(base) {
  emit({ type: "ready", url: base });
}
