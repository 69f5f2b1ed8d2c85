// A genuine @a2a-js/sdk 1.3.x worker (npm alias "a2a-js-13"): the JS twin of demo/worker.py.
//   node tests/support/peers/worker13.mjs [--port 0] [--host 127.0.0.1]
//
// Everything on the wire is the SDK's own: DefaultRequestHandler over an InMemoryTaskStore,
// mounted with its express integration on one origin (BASE = http://HOST:PORT):
//   GET  BASE/.well-known/agent-card.json  the card (agentCardHandler, JSON.stringify of the
//                                           SDK's AgentCard object, ETag + Cache-Control)
//   POST BASE/                             JSON-RPC, v1.0 methods only (jsonRpcHandler)
//        BASE/rest/...                     HTTP+JSON v1.0 (restHandler: /rest/message:send, …)
// and one route that is no part of A2A, for tests to synchronise on (as in worker03.mjs):
//   GET  BASE/_peer/joins/{taskId}         {"taskId", "joins": n}: how many requests (a
//                                           SubscribeToTask, a CancelTask) joined the task's
//                                           live event bus
// The card advertises exactly those two interfaces, both protocolVersion "1.0", built from the
// port actually bound (--port 0 picks an ephemeral one); streaming true, pushNotifications
// false. No v0.3 compat is enabled, so a request without `A2A-Version: 1.0` is refused.
// With --sign-jwk FILE (a private JWK with "kid" and "alg") the card is signed with the SDK's own
// signer (generateAgentCardSignature; protected header alg, kid, typ "JOSE") before it is served.
//
// Once listening it prints one line on stdout, {"type":"ready","url":"BASE"}. It exits on
// SIGTERM / SIGINT and, when its stdin is a pipe or socket, as soon as that closes — so a
// parent holding the other end never leaves it behind.
//
// The user's message text picks the behaviour, as in demo/worker.py:
//   anything else  Task (SUBMITTED) -> WORKING ("working") -> artifact "hello <text>"
//                  (lastChunk) -> COMPLETED
//   "slow..."      Task -> WORKING, then parked until CancelTask, which ends it CANCELED
//   "ask..."       Task -> INPUT_REQUIRED ("Which date?"); a follow-up message with the same
//                  taskId completes it with the artifact "booked for <follow-up text>"
//   "fail..."      Task -> WORKING, then execute() throws; the SDK marks the task FAILED
//   "direct"       a direct Message reply "direct reply", no task
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import express from "express";
import {
  AGENT_CARD_PATH, AgentCard, Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
  generateAgentCardSignature,
} from "a2a-js-13";
import {
  AgentEvent, DefaultExecutionEventBusManager, DefaultRequestHandler, InMemoryTaskStore,
} from "a2a-js-13/server";
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from "a2a-js-13/server/express";
import { DEMO, announceReady, demoCardBasics, listenWorker, workerArgs } from "./common.mjs";

const { artifactName: ARTIFACT_NAME, askQuestion: ASK_QUESTION, directReply: DIRECT_REPLY,
        failMessage: FAIL_MESSAGE, restPath: REST_PATH } = DEMO;

function messageText(message) {
  return message.parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("\n").trim();
}

/** A status-update event; `text` becomes the status's agent message. */
function status(ids, state, text) {
  const message = text && { messageId: randomUUID(), role: "ROLE_AGENT", parts: [{ text }], ...ids };
  return AgentEvent.statusUpdate(TaskStatusUpdateEvent.fromJSON({
    ...ids, status: { state, timestamp: new Date().toISOString(), ...(message && { message }) },
  }));
}

/** The one artifact of a completed task: a single text/plain part, sent whole. */
function artifact(ids, text) {
  return AgentEvent.artifactUpdate(TaskArtifactUpdateEvent.fromJSON({
    ...ids, lastChunk: true,
    artifact: { artifactId: randomUUID(), name: ARTIFACT_NAME, parts: [{ text, mediaType: "text/plain" }] },
  }));
}

/**
 * The agent: behaviour by message text (see the header). A parked "slow" run waits on a
 * promise that cancelTask() resolves after publishing CANCELED. Every task's contextId is
 * remembered (as long as the in-memory task store keeps the task itself), because the SDK hands
 * cancelTask() the task id alone.
 */
class DemoAgentExecutor {
  #contexts = new Map(); // taskId -> contextId
  #parked = new Map(); // taskId -> release() of a parked "slow" run

  async execute(requestContext, eventBus) {
    const { task: current, taskId, contextId } = requestContext;
    const text = messageText(requestContext.userMessage);
    if (!current && text === "direct") {
      eventBus.publish(AgentEvent.message(Message.fromJSON({
        messageId: randomUUID(), role: "ROLE_AGENT", parts: [{ text: DIRECT_REPLY }], contextId,
      })));
      return;
    }
    // The SDK requires a Task as the first event of every execute(), follow-ups included.
    let task = current;
    if (!task) {
      task = Task.fromJSON({ id: taskId, contextId, status: { state: "TASK_STATE_SUBMITTED" } });
      task.history = [requestContext.userMessage];
    }
    eventBus.publish(AgentEvent.task(task));
    this.#contexts.set(taskId, contextId);
    const ids = { taskId, contextId };
    if (current?.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED) {
      eventBus.publish(status(ids, "TASK_STATE_WORKING", "got the date"));
      eventBus.publish(artifact(ids, `booked for ${text}`));
      eventBus.publish(status(ids, "TASK_STATE_COMPLETED"));
    } else if (text.startsWith("slow")) {
      eventBus.publish(status(ids, "TASK_STATE_WORKING", "working slowly until cancelled"));
      await new Promise((release) => this.#parked.set(taskId, release));
    } else if (text.startsWith("ask")) {
      eventBus.publish(status(ids, "TASK_STATE_INPUT_REQUIRED", ASK_QUESTION));
    } else if (text.startsWith("fail")) {
      eventBus.publish(status(ids, "TASK_STATE_WORKING", "about to fail"));
      throw new Error(FAIL_MESSAGE); // the SDK publishes FAILED and reports the error
    } else {
      eventBus.publish(status(ids, "TASK_STATE_WORKING", "working"));
      eventBus.publish(artifact(ids, `hello ${text}`));
      eventBus.publish(status(ids, "TASK_STATE_COMPLETED"));
    }
  }

  /** Called by the SDK's CancelTask while the task's event bus is open; it then drains it. */
  async cancelTask(taskId, eventBus) {
    eventBus.publish(status({ taskId, contextId: this.#contexts.get(taskId) ?? "" }, "TASK_STATE_CANCELED", "cancelled"));
    this.#parked.get(taskId)?.();
    this.#parked.delete(taskId);
  }
}

/** The card, as the SDK's own AgentCard type has it (AgentCard.fromJSON fills every member the
 * type requires: signatures [], securitySchemes {}, tenant "", …). */
function buildAgentCard(base) {
  return AgentCard.fromJSON({
    ...demoCardBasics("1.3"),
    supportedInterfaces: [
      { url: `${base}/`, protocolBinding: "JSONRPC", protocolVersion: "1.0" },
      { url: `${base}${REST_PATH}`, protocolBinding: "HTTP+JSON", protocolVersion: "1.0" },
    ],
  });
}

/** The SDK's bus manager, counting the requests that join a live task's bus (see the header):
 * its resubscribe and cancel look the bus up and subscribe to it in the same tick. */
class CountingEventBusManager extends DefaultExecutionEventBusManager {
  joins = new Map(); // taskId -> count

  getByTaskId(taskId, context) {
    const bus = super.getByTaskId(taskId, context);
    if (bus) this.joins.set(taskId, (this.joins.get(taskId) ?? 0) + 1);
    return bus;
  }
}

const app = express();
const base = await listenWorker(app);
const buses = new CountingEventBusManager();
let card = buildAgentCard(base);
if (workerArgs["sign-jwk"]) {
  const jwk = JSON.parse(readFileSync(workerArgs["sign-jwk"], "utf8"));
  card = await generateAgentCardSignature(jwk, { alg: jwk.alg, kid: jwk.kid, typ: "JOSE" })(card);
}
const requestHandler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new DemoAgentExecutor(), buses);
app.get("/_peer/joins/:taskId", (req, res) => {
  res.json({ taskId: req.params.taskId, joins: buses.joins.get(req.params.taskId) ?? 0 });
});
const userBuilder = UserBuilder.noAuthentication;
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }));
app.use(REST_PATH, restHandler({ requestHandler, userBuilder }));
app.use("/", jsonRpcHandler({ requestHandler, userBuilder })); // last: it guards every path's content type
announceReady(base);
