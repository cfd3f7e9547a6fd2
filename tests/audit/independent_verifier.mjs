// An audit-export verifier written from docs/audit-format.md alone: Node's standard library only,
// nothing from Governor. Usage: node independent_verifier.mjs [--public-key HEX] FILE...
// Prints one JSON line per file: {"file", "ok", "first_bad", "reason"}; first_bad is the chain
// index of the first bad event, "checkpoint" or "keys". Exit status 0 when every file verifies.

import { createHash, createPublicKey, verify as edVerify } from "node:crypto";
import { readFileSync } from "node:fs";

const ZERO = "0".repeat(64);

// Section 1: JCS. JSON.stringify already lays out strings and numbers as RFC 8785 requires; only
// the member order needs fixing (the default sort compares UTF-16 code units).
function jcs(value) {
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(value[k])).join(",") + "}";
  }
  if (typeof value === "number" && !Number.isFinite(value)) throw new Error("non-finite number");
  return JSON.stringify(value);
}

const utf8 = (s) => Buffer.from(s, "utf8");
const sha256 = (...parts) => createHash("sha256").update(Buffer.concat(parts)).digest();
const hex = (b) => b.toString("hex");

// Section 4: Ed25519 with a raw 32-byte public key (wrapped in its SPKI DER header for Node).
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
function ed25519Ok(publicHex, message, signatureHex) {
  if (typeof publicHex !== "string" || typeof signatureHex !== "string") return false;
  try {
    const key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, Buffer.from(publicHex, "hex")]), format: "der", type: "spki" });
    return edVerify(null, message, key, Buffer.from(signatureHex, "hex"));
  } catch {
    return false;
  }
}
const keyId = (publicHex) => hex(sha256(Buffer.from(publicHex, "hex"))).slice(0, 16);

function entryMessage(entry) {
  const body = { ...entry };
  delete body.signature;
  return utf8(`governor-audit/2 ${entry.type}\n` + jcs(body));
}

// Section 3: leaf and tree hashing.
const LEAF = ["v", "seq", "chain_index", "prev_hash", "at", "actor", "actor_id", "role", "action", "object_type",
  "object_id", "object_repr", "tenant_id", "before", "after", "reason", "evidence", "request_id", "client_address",
  "nonce", "key_id", "signature"];
const SIGNED = ["at", "actor", "actor_id", "role", "action", "object_type", "object_id", "object_repr", "tenant_id",
  "before", "after", "reason", "evidence", "request_id", "client_address", "nonce", "key_id"];
const pick = (event, names) => Object.fromEntries(names.map((n) => [n, event[n] === undefined ? null : event[n]]));

function leafHash(event) {
  return hex(sha256(Buffer.from([0]), utf8(jcs(pick(event, LEAF)))));
}
const node = (l, r) => sha256(Buffer.from([1]), l, r);

function root(leaves) {
  if (leaves.length === 0) return sha256(Buffer.alloc(0));
  if (leaves.length === 1) return leaves[0];
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return node(root(leaves.slice(0, k)), root(leaves.slice(k)));
}

// RFC 9162 2.1.3.2
function inclusionOk(index, size, leaf, path, rootHash) {
  if (!(index >= 0 && index < size)) return false;
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = node(p, r);
      if (fn % 2 === 0) while (fn !== 0 && fn % 2 === 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      r = node(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(rootHash);
}

// Section 4: an event's authentication.
function signatureProblem(event, keys) {
  if (event.signature === null || event.signature === undefined) {
    const capture = typeof event.action === "string" && event.action.startsWith("raw.") &&
      typeof event.actor === "string" && event.actor.startsWith("db:") && event.role === "database" &&
      (event.actor_id === null || event.actor_id === undefined) && (event.key_id ?? null) === null && (event.nonce ?? null) === null;
    return capture ? null : "unsigned and not a capture-trigger event";
  }
  const publicHex = keys.get(event.key_id);
  if (!publicHex) return `signed by unlisted key ${event.key_id}`;
  const message = utf8("governor-audit/2 event\n" + jcs({ ...pick(event, SIGNED), v: 2 }));
  return ed25519Ok(publicHex, message, event.signature) ? null : "signature does not verify";
}

function verifyExport(data, pinned) {
  const fail = (first_bad, reason) => ({ ok: false, first_bad, reason });
  if (data.format !== "governor-audit-export/2") return fail(null, "not a governor-audit-export/2 file");
  // 6.1 keys
  const keys = new Map();
  const entries = Array.isArray(data.keys) ? data.keys : [];
  if (entries.length === 0) return fail("keys", "no keys listed");
  for (const [i, entry] of entries.entries()) {
    if (entry.type !== "key" || keyId(entry.public_key ?? "") !== entry.introduces) return fail("keys", `keys[${i}] malformed`);
    const signer = i === 0 ? (entry.key_id === entry.introduces ? entry.public_key : undefined) : keys.get(entry.key_id);
    if (!signer || !ed25519Ok(signer, entryMessage(entry), entry.signature)) return fail("keys", `keys[${i}] signature`);
    if (i === 0 && pinned && entry.public_key !== pinned) return fail("keys", "first key is not the pinned key");
    keys.set(entry.introduces, entry.public_key);
  }
  // 6.2 checkpoint
  const cp = data.checkpoint;
  if (!cp || cp.type !== "checkpoint" || !ed25519Ok(keys.get(cp.key_id), entryMessage(cp), cp.signature)) {
    return fail("checkpoint", "checkpoint signature does not verify");
  }
  const events = data.events;
  const cpRoot = Buffer.from(cp.root, "hex");
  if (data.complete === true) {
    // 6.3
    const leaves = [];
    let prev = ZERO;
    for (const [i, event] of events.entries()) {
      if (event.chain_index !== i) return fail(i, `chain_index ${event.chain_index} where ${i} is expected`);
      if (event.prev_hash !== prev) return fail(i, "prev_hash does not link");
      if (event.v !== 2) return fail(i, "not a format-2 event");
      const h = leafHash(event);
      if (h !== event.hash) return fail(i, "leaf hash differs");
      const problem = signatureProblem(event, keys);
      if (problem) return fail(i, problem);
      leaves.push(Buffer.from(h, "hex"));
      prev = h;
    }
    if (events.length < cp.size) return fail(events.length, "events missing after the last one (truncated)");
    if (events.length > cp.size) return fail(cp.size, "events beyond the checkpoint");
    if (!root(leaves).equals(cpRoot) || (cp.size > 0 && prev !== cp.head)) return fail("checkpoint", "tree root differs");
    return { ok: true, first_bad: null, reason: `${events.length} events` };
  }
  // 6.4
  let last = -1;
  for (const event of events) {
    const i = event.chain_index;
    if (!Number.isInteger(i) || i <= last) return fail(i ?? null, "chain_index out of order");
    const h = leafHash(event);
    if (h !== event.hash) return fail(i, "leaf hash differs");
    const path = (event.inclusion_proof ?? []).map((p) => Buffer.from(p, "hex"));
    if (!inclusionOk(i, cp.size, Buffer.from(h, "hex"), path, cpRoot)) return fail(i, "inclusion proof does not verify");
    const problem = signatureProblem(event, keys);
    if (problem) return fail(i, problem);
    last = i;
  }
  return { ok: true, first_bad: null, reason: `${events.length} events` };
}

const args = process.argv.slice(2);
let pinned = null;
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--public-key") pinned = args[++i].toLowerCase();
  else files.push(args[i]);
}
let allOk = true;
for (const file of files) {
  let result;
  try {
    result = verifyExport(JSON.parse(readFileSync(file, "utf8")), pinned);
  } catch (err) {
    result = { ok: false, first_bad: null, reason: `unreadable: ${err.message}` };
  }
  allOk &&= result.ok;
  console.log(JSON.stringify({ file, ...result }));
}
process.exit(allOk ? 0 : 1);
