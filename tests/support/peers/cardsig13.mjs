// @a2a-js/sdk 1.3's own Agent Card signature code, for byte-for-byte checks against the gateway.
//   node tests/support/peers/cardsig13.mjs < request.json
// The request is {"cards": {name: card}, "jwks": {"keys": [...]}, "sign": {name: privateJwk}}.
// Prints one JSON object: {"canonical": {name: canonicalizeAgentCard(card)},
//   "verified": {name: true | "<error>"}} — each card checked with verifyAgentCardSignature,
// keys taken from "jwks" by kid — and "signed": {name: card} for each card of "sign", signed with
// generateAgentCardSignature (protected header alg, kid, typ "JOSE").
import { readFileSync } from "node:fs";
import { canonicalizeAgentCard, generateAgentCardSignature, verifyAgentCardSignature } from "a2a-js-13";

const request = JSON.parse(readFileSync(0, "utf8"));
const keys = request.jwks?.keys ?? [];
const verify = verifyAgentCardSignature(async (kid) => {
  const jwk = keys.find((k) => k.kid === kid);
  if (!jwk) throw new Error(`unknown kid ${kid}`);
  return jwk;
});
const out = { canonical: {}, verified: {}, signed: {} };
console.debug = () => {}; // the verifier logs each failed entry
for (const [name, card] of Object.entries(request.cards ?? {})) {
  out.canonical[name] = canonicalizeAgentCard(card);
  try {
    await verify(card);
    out.verified[name] = true;
  } catch (err) {
    out.verified[name] = String(err?.message ?? err);
  }
}
for (const [name, jwk] of Object.entries(request.sign ?? {})) {
  const card = request.cards[name];
  out.signed[name] = await generateAgentCardSignature(jwk, { alg: jwk.alg, kid: jwk.kid, typ: "JOSE" })(card);
}
process.stdout.write(JSON.stringify(out));
