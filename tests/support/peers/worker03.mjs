// A genuine @a2a-js/sdk 0.3.x worker (npm alias "a2a-js-03"): the v0.3 twin of worker13.mjs.
//   node tests/support/peers/worker03.mjs [--port 0] [--host 127.0.0.1]
//
// Everything on the wire is the SDK's own: DefaultRequestHandler over an InMemoryTaskStore,
// mounted with its express integration on one origin (BASE = http://HOST:PORT), v0.3 only:
//   GET  BASE/.well-known/agent-card.json  the v0.3 card (agentCardHandler)
//   POST BASE/                             JSON-RPC v0.3 (jsonRpcHandler: message/send, …)
//        BASE/rest/v1/...                  HTTP+JSON v0.3 (restHandler: /rest/v1/message:send,
//                                           /rest/v1/tasks/{id}, …:cancel, …:subscribe)
// and one route that is no part of A2A, for tests to synchronise on:
//   GET  BASE/_peer/joins/{taskId}         {"taskId", "joins": n}: how many requests (a
//                                           tasks/resubscribe, a tasks/cancel) joined the task's
//                                           live event bus — once n counts a resubscribe, that
//                                           stream gets every later event of the task
// The card is protocolVersion "0.3.0" with url BASE/ and preferredTransport JSONRPC, and
// additionalInterfaces JSONRPC at BASE/ and HTTP+JSON at BASE/rest (the base the SDK's REST
// clients append /v1/... to), built from the port actually bound (--port 0 picks an ephemeral
// one); streaming true, pushNotifications false.
//
// Once listening it prints one line on stdout, {"type":"ready","url":"BASE"}. It exits on
// SIGTERM / SIGINT and, when its stdin is a pipe or socket, as soon as that closes.
//
// The user's message text picks the behaviour, as in worker13.mjs (states spelled as v0.3 does):
//   anything else  Task (submitted) -> working ("working") -> artifact "hello <text>"
//                  (lastChunk) -> completed (final)
//   "slow..."      Task -> working, then parked until tasks/cancel, which ends it canceled
//   "ask..."       Task -> input-required ("Which date?", final); a follow-up message with the
//                  same taskId completes it with the artifact "booked for <follow-up text>"
//   "fail..."      Task -> working ("about to fail") -> failed ("demo failure requested", final).
//                  Published by the executor, not thrown: when execute() throws, this SDK
//                  reports FAILED under a fresh random task id (requestContext.task?.id ||
//                  uuidv4() for a new task), not the task's own.
//   "direct"       a direct Message reply "direct reply", no task
import { randomUUID } from "node:crypto";
import express from "express";
import { AGENT_CARD_PATH } from "a2a-js-03";
import { DefaultExecutionEventBusManager, DefaultRequestHandler, InMemoryTaskStore } from "a2a-js-03/server";
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from "a2a-js-03/server/express";
import { DEMO, announceReady, demoCardBasics, listenWorker } from "./common.mjs";

function messageText(message) {
  return message.parts.filter((p) => p.kind === "text").map((p) => p.text).join("\n").trim();
}

function agentMessage(ids, text) {
  return { kind: "message", messageId: randomUUID(), role: "agent", parts: [{ kind: "text", text }], ...ids };
}

/** A status-update event; `text` becomes the status's agent message. */
function status(ids, state, text, final = false) {
  return {
    kind: "status-update", ...ids, final,
    status: { state, timestamp: new Date().toISOString(), ...(text && { message: agentMessage(ids, text) }) },
  };
}

/** The one artifact of a completed task: a single text part, sent whole. */
function artifact(ids, text) {
  return {
    kind: "artifact-update", ...ids, lastChunk: true,
    artifact: { artifactId: randomUUID(), name: DEMO.artifactName, parts: [{ kind: "text", text }] },
  };
}

/**
 * The agent: behaviour by message text (see the header). A parked "slow" run waits on a
 * promise that cancelTask() resolves after publishing canceled. Every task's contextId is
 * remembered, because the SDK hands cancelTask() the task id alone.
 */
class DemoAgentExecutor {
  #contexts = new Map(); // taskId -> contextId
  #parked = new Map(); // taskId -> release() of a parked "slow" run

  async execute(requestContext, eventBus) {
    const { task: current, taskId, contextId, userMessage } = requestContext;
    const text = messageText(userMessage);
    if (!current && text === "direct") {
      eventBus.publish(agentMessage({ contextId }, DEMO.directReply));
      eventBus.finished();
      return;
    }
    if (!current) {
      eventBus.publish({
        kind: "task", id: taskId, contextId, history: [userMessage],
        status: { state: "submitted", timestamp: new Date().toISOString() },
      });
    }
    this.#contexts.set(taskId, contextId);
    const ids = { taskId, contextId };
    if (current?.status?.state === "input-required") {
      eventBus.publish(status(ids, "working", "got the date"));
      eventBus.publish(artifact(ids, `booked for ${text}`));
      eventBus.publish(status(ids, "completed", undefined, true));
    } else if (text.startsWith("slow")) {
      eventBus.publish(status(ids, "working", "working slowly until cancelled"));
      await new Promise((release) => this.#parked.set(taskId, release));
    } else if (text.startsWith("ask")) {
      eventBus.publish(status(ids, "input-required", DEMO.askQuestion, true));
    } else if (text.startsWith("fail")) {
      eventBus.publish(status(ids, "working", "about to fail"));
      eventBus.publish(status(ids, "failed", DEMO.failMessage, true));
    } else {
      eventBus.publish(status(ids, "working", "working"));
      eventBus.publish(artifact(ids, `hello ${text}`));
      eventBus.publish(status(ids, "completed", undefined, true));
    }
    eventBus.finished();
  }

  /** Called by the SDK's tasks/cancel while the task's event bus is open; it then drains it. */
  async cancelTask(taskId, eventBus) {
    const ids = { taskId, contextId: this.#contexts.get(taskId) ?? "" };
    eventBus.publish(status(ids, "canceled", "cancelled", true));
    this.#parked.get(taskId)?.();
    this.#parked.delete(taskId);
  }
}

/** The v0.3 card: one url + preferredTransport, the same two bindings in additionalInterfaces. */
function buildAgentCard(base) {
  return {
    protocolVersion: "0.3.0",
    ...demoCardBasics("0.3"),
    url: `${base}/`,
    preferredTransport: "JSONRPC",
    additionalInterfaces: [
      { url: `${base}/`, transport: "JSONRPC" },
      { url: `${base}${DEMO.restPath}`, transport: "HTTP+JSON" },
    ],
  };
}

/** The SDK's bus manager, counting the requests that join a live task's bus (see the header):
 * its resubscribe and cancel look the bus up and subscribe to it in the same tick. */
class CountingEventBusManager extends DefaultExecutionEventBusManager {
  joins = new Map(); // taskId -> count

  getByTaskId(taskId) {
    const bus = super.getByTaskId(taskId);
    if (bus) this.joins.set(taskId, (this.joins.get(taskId) ?? 0) + 1);
    return bus;
  }
}

const app = express();
const base = await listenWorker(app);
const buses = new CountingEventBusManager();
const requestHandler = new DefaultRequestHandler(buildAgentCard(base), new InMemoryTaskStore(), new DemoAgentExecutor(),
                                                 buses);
app.get("/_peer/joins/:taskId", (req, res) => {
  res.json({ taskId: req.params.taskId, joins: buses.joins.get(req.params.taskId) ?? 0 });
});
const userBuilder = UserBuilder.noAuthentication;
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }));
app.use(DEMO.restPath, restHandler({ requestHandler, userBuilder }));
app.use("/", jsonRpcHandler({ requestHandler, userBuilder }));
announceReady(base);
