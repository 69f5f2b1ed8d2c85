// A genuine @a2a-js/sdk 1.3.x client (installed as the npm alias "a2a-js-13").
//   node tests/support/peers/client13.mjs CARD_URL < scenario.json
// The SDK's own ClientFactory reads the Agent Card at CARD_URL and picks an interface from its
// supportedInterfaces: the scenario's "transport" ("JSONRPC" or "HTTP+JSON") first when given
// (the factory's preferredTransports), else the card's order; nothing here pins the RPC URL.
import { readFileSync } from "node:fs";
import {
  ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory,
} from "a2a-js-13/client";
import {
  CancelTaskRequest, GetTaskRequest, ListTasksRequest, SendMessageRequest, StreamResponse, taskStateToJSON,
  verifyAgentCardSignature,
} from "a2a-js-13";
import { describeError, emit, newMessageId, runScenario } from "./common.mjs";

const { version } = JSON.parse(readFileSync(new URL("./node_modules/a2a-js-13/package.json", import.meta.url), "utf8"));

function request(step) {
  const msg = { messageId: step.messageId ?? newMessageId(), role: "ROLE_USER", parts: [{ text: step.text ?? "hi" }] };
  if (step.taskId) msg.taskId = step.taskId;
  if (step.contextId) msg.contextId = step.contextId;
  // non-blocking send: the SDK keeps an explicit configuration.returnImmediately
  return SendMessageRequest.fromJSON(step.blocking === false
    ? { message: msg, configuration: { returnImmediately: true } } : { message: msg });
}

/** A unary Task result, shaped like a stream event. */
const asEvent = (task) => ({ payload: { $case: "task", value: task } });

await runScenario({
  async connect(cardUrl, fetchImpl, scenario) {
    const factory = new ClientFactory({
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      preferredTransports: scenario.transport ? [scenario.transport] : undefined,
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    });
    let client;
    let verified = null;
    if (scenario.verify) {
      // as the SDK's docs show it: resolve the card, check its signatures with the SDK's own
      // verifier (keys from the JWKS the scenario names, by kid), then build the client from it
      const card = await new DefaultAgentCardResolver({ fetchImpl }).resolve(cardUrl, "");
      const jwks = await (await fetch(scenario.verify.jwksUrl)).json();
      const kids = [];
      try {
        await verifyAgentCardSignature(async (kid) => {
          const jwk = jwks.keys.find((k) => k.kid === kid);
          if (!jwk) throw new Error(`unknown kid ${kid}`);
          kids.push(kid);
          return jwk; // the SDK hands a JWK straight to jose
        })(card);
      } catch (err) {
        emit({ type: "card_refused", ...describeError(err) });
        throw err;
      }
      verified = { kids };
      client = await factory.createFromAgentCard(card);
    } else {
      client = await factory.createFromUrl(cardUrl, "");
    }
    return { client, info: { sdk: "@a2a-js/sdk", version, requestedTransport: scenario.transport ?? null,
                             transport: client.transport.protocolName, endpoint: client.transport.endpoint,
                             protocolVersion: client.protocolVersion, verified } };
  },
  ops: {
    // A non-streaming send answers a Task or a Message; shaped here like a stream event.
    send: async (client, step) => {
      const result = await client.sendMessage(request(step));
      return "messageId" in result ? { payload: { $case: "message", value: result } } : asEvent(result);
    },
    stream: (client, step) => client.sendMessageStream(request(step)),
    resubscribe: (client, step) => client.resubscribeTask({ tenant: "", id: step.taskId }),
    get: async (client, step) => asEvent(await client.getTask(GetTaskRequest.fromJSON({ id: step.taskId }))),
    cancel: async (client, step) => asEvent(await client.cancelTask(CancelTaskRequest.fromJSON({ id: step.taskId }))),
    list: async function* (client, step) {
      const { contextId, pageSize } = step;
      const response = await client.listTasks(ListTasksRequest.fromJSON({ contextId, pageSize }));
      yield* response.tasks.map(asEvent);
    },
  },
  describe(item) {
    const kind = item?.payload?.$case ?? null;
    const value = item?.payload?.value;
    const out = { kind, raw: StreamResponse.toJSON(item) };
    if (kind === "task") {
      Object.assign(out, { taskId: value.id, contextId: value.contextId, state: taskStateToJSON(value.status?.state) });
    } else if (value) {
      Object.assign(out, { taskId: value.taskId || null, contextId: value.contextId || null });
      if (kind === "statusUpdate") out.state = taskStateToJSON(value.status?.state);
    }
    return out;
  },
});
