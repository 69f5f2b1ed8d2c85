// Shared by client03.mjs and client13.mjs: the scenario runner, a recording fetch and the JSON
// lines printed on stdout (the format is described in tests/support/peers.py).
import { readFileSync } from "node:fs";

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
