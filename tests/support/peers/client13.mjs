// A genuine @a2a-js/sdk 1.3.x client (installed as the npm alias "a2a-js-13").
//   node tests/support/peers/client13.mjs CARD_URL < scenario.json
// The SDK's own ClientFactory reads the Agent Card at CARD_URL and picks its JSON-RPC 1.0
// interface (supportedInterfaces); nothing here pins the RPC URL.
import { readFileSync } from "node:fs";
import {
  ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory,
} from "a2a-js-13/client";
import { SendMessageRequest, StreamResponse, Task, taskStateToJSON } from "a2a-js-13";
import { newMessageId, runScenario } from "./common.mjs";

const { version } = JSON.parse(readFileSync(new URL("./node_modules/a2a-js-13/package.json", import.meta.url), "utf8"));

function request(step) {
  const msg = { messageId: step.messageId ?? newMessageId(), role: "ROLE_USER", parts: [{ text: step.text ?? "hi" }] };
  if (step.taskId) msg.taskId = step.taskId;
  if (step.contextId) msg.contextId = step.contextId;
  return SendMessageRequest.fromJSON({ message: msg });
}

await runScenario({
  async connect(cardUrl, fetchImpl) {
    const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    });
    const factory = new ClientFactory(options);
    const client = await factory.createFromUrl(cardUrl, "");
    return { client, info: { sdk: "@a2a-js/sdk", version, endpoint: client.transport.endpoint,
                             protocolVersion: client.protocolVersion } };
  },
  ops: {
    // A non-streaming send answers a Task or a Message; shaped here like a stream event.
    send: async (client, step) => {
      const result = await client.sendMessage(request(step));
      return { payload: "messageId" in result ? { $case: "message", value: result } : { $case: "task", value: result } };
    },
    stream: (client, step) => client.sendMessageStream(request(step)),
    resubscribe: (client, step) => client.resubscribeTask({ tenant: "", id: step.taskId }),
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
