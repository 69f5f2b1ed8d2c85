// A genuine @a2a-js/sdk 0.3.x client (installed as the npm alias "a2a-js-03").
//   node tests/support/peers/client03.mjs CARD_URL < scenario.json
// The SDK's own ClientFactory reads the Agent Card at CARD_URL and talks to the URL the card
// names (card.url / additionalInterfaces); nothing here pins the RPC URL. It picks the card's
// preferredTransport, or the scenario's "transport" ("JSONRPC" / "HTTP+JSON") first when given
// (the factory's preferredTransports), falling back to the card's own order.
import { readFileSync } from "node:fs";
import {
  ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransport,
  RestTransportFactory,
} from "a2a-js-03/client";
import { newMessageId, runScenario } from "./common.mjs";

const { version } = JSON.parse(readFileSync(new URL("./node_modules/a2a-js-03/package.json", import.meta.url), "utf8"));

function message(step) {
  const msg = { kind: "message", messageId: step.messageId ?? newMessageId(), role: "user",
                parts: [{ kind: "text", text: step.text ?? "hi" }] };
  if (step.taskId) msg.taskId = step.taskId;
  if (step.contextId) msg.contextId = step.contextId;
  // non-blocking send: the SDK keeps an explicit configuration.blocking
  return step.blocking === false ? { message: msg, configuration: { blocking: false } } : { message: msg };
}

await runScenario({
  async connect(cardUrl, fetchImpl, scenario) {
    const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
      preferredTransports: scenario.transport ? [scenario.transport] : undefined,
    });
    const factory = new ClientFactory(options);
    const card = await factory.agentCardResolver.resolve(cardUrl, "");
    const client = await factory.createFromAgentCard(card);
    const transport = client.transport instanceof RestTransport ? RestTransportFactory.name : JsonRpcTransportFactory.name;
    return { client, info: { sdk: "@a2a-js/sdk", version, requestedTransport: scenario.transport ?? null, transport,
                             endpoint: client.transport.endpoint, preferredTransport: card.preferredTransport ?? null,
                             protocolVersion: card.protocolVersion } };
  },
  ops: {
    send: (client, step) => client.sendMessage(message(step)),
    stream: (client, step) => client.sendMessageStream(message(step)),
    resubscribe: (client, step) => client.resubscribeTask({ id: step.taskId }),
    get: (client, step) => client.getTask({ id: step.taskId }),
    cancel: (client, step) => client.cancelTask({ id: step.taskId }),
  },
  describe(item) {
    const out = { kind: item?.kind ?? null, raw: item };
    if (item?.kind === "task") {
      Object.assign(out, { taskId: item.id, contextId: item.contextId, state: item.status?.state });
    } else {
      Object.assign(out, { taskId: item?.taskId ?? null, contextId: item?.contextId ?? null });
      if (item?.kind === "status-update") Object.assign(out, { state: item.status?.state, final: item.final });
    }
    return out;
  },
});
