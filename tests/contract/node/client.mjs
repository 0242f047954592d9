// A zeromem client written from the published contract alone: schemas/asyncapi.yaml for
// subjects and headers, schemas/json for payloads, schemas/README.md for the rules. It
// drives every part of the contract against a running deployment and validates every
// reply it receives with Ajv in strict mode.
//
//   node client.mjs NATS_URL CREDS_FILE TENANT AGENT SCHEMAS_DIR
//
// One JSON line per check on stdout ({"check", "ok", "detail"}); exit status 1 if any
// check failed. tests/contract/test_node_client.py runs it and reads those lines.

import crypto from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import zlib from "node:zlib";

import { decode, encode } from "@msgpack/msgpack";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import { connect, credsAuthenticator, headers as natsHeaders } from "nats";
import YAML from "yaml";

const [url, credsFile, tenant, agent, schemasDir] = process.argv.slice(2);
if (!schemasDir) {
  console.error("usage: node client.mjs NATS_URL CREDS_FILE TENANT AGENT SCHEMAS_DIR");
  process.exit(2);
}

let failed = 0;
function report(check, ok, detail = "") {
  if (!ok) failed += 1;
  console.log(JSON.stringify({ check, ok, detail }));
}
function expect(condition, message) {
  if (!condition) throw new Error(message);
}
async function check(name, body) {
  try {
    const detail = await body();
    report(name, true, detail ?? "");
  } catch (error) {
    report(name, false, String(error?.stack ?? error));
  }
}

// --- the published documents -------------------------------------------------------------

const asyncapi = YAML.parse(fs.readFileSync(path.join(schemasDir, "asyncapi.yaml"), "utf8"));
const require = createRequire(import.meta.url);

const ajv = new Ajv2020({ strict: true, allErrors: true });
const jsonDir = path.join(schemasDir, "json");
for (const file of fs.readdirSync(jsonDir).sort()) {
  ajv.addSchema(JSON.parse(fs.readFileSync(path.join(jsonDir, file), "utf8")), file);
}

function validate(file, value) {
  const validator = ajv.getSchema(file);
  expect(validator, `no schema ${file}`);
  if (!validator(value)) {
    throw new Error(`${file}: ${ajv.errorsText(validator.errors)} in ${JSON.stringify(value)}`);
  }
  return value;
}

function conforms(file, value) {
  return ajv.getSchema(file)(value);
}

function address(channel, params) {
  const template = asyncapi.channels[channel].address;
  return template.replace(/\{(\w+)\}/g, (_, name) => {
    expect(name in params, `no value for {${name}} in ${template}`);
    return String(params[name]);
  });
}

// The header names, as the document declares them on its messages.
const messages = asyncapi.components.messages;
const MSG_ID = "Nats-Msg-Id";
const REPLY = "Zm-Reply";
const BATCH = "Zm-Batch";
const ERROR = "Zm-Error";

// --- the rules of README.md ----------------------------------------------------------------

// CRC-32 (ISO-HDLC, zlib's): reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF.
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(bytes) {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
const utf8 = new TextEncoder();
function ownerOf(key) {
  return key.split(":").slice(0, 2).join(":");
}
let shards = 0; // from the info query
function shardOf(key) {
  return crc32(utf8.encode(`${tenant}\0${ownerOf(key)}`)) % shards;
}

// ULIDs: 48-bit milliseconds, then 80 bits that count up within one millisecond.
const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
let lastMs = 0n;
let lastRandom = 0n;
function newId() {
  let ms = BigInt(Date.now());
  if (ms <= lastMs) {
    ms = lastMs;
    lastRandom += 1n;
  } else {
    lastMs = ms;
    lastRandom = BigInt(`0x${crypto.randomBytes(10).toString("hex")}`) >> 1n;
  }
  let value = (ms << 80n) | lastRandom;
  let out = "";
  for (let i = 0; i < 26; i++) {
    out = CROCKFORD[Number(value & 31n)] + out;
    value >>= 5n;
  }
  return out;
}

// Nats-Msg-Id: <tenant>.<agent>.<a hash of the command id keyed with the agent's secret>.
const credsText = fs.readFileSync(credsFile, "utf8");
const secret = credsText.match(/SU[A-Z0-9]{56}/)?.[0] ?? crypto.randomBytes(32).toString("hex");
function dedupeId(commandId) {
  const digest = crypto.createHmac("sha256", secret).update(commandId).digest("hex");
  return `${tenant}.${agent}.${digest.slice(0, 32)}`;
}

const inboxPrefix = `_INBOX.zm.${tenant}.${agent}`;

// --- the connection ----------------------------------------------------------------------

const nc = await connect({
  servers: url,
  authenticator: credsAuthenticator(utf8.encode(credsText)),
  inboxPrefix,
  name: "zeromem-node-conformance",
});

// Results of commands that asked for them (Zm-Reply), by command id.
const results = new Map();
const waiters = new Map();
const resultSub = nc.subscribe(`${inboxPrefix}.results.>`);
(async () => {
  for await (const msg of resultSub) {
    const result = decode(msg.data);
    results.set(result.command_id, result);
    waiters.get(result.command_id)?.(result);
  }
})();

function resultOf(commandId, timeoutMs = 5000) {
  if (results.has(commandId)) return Promise.resolve(results.get(commandId));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no result for ${commandId} in ${timeoutMs} ms`)),
      timeoutMs,
    );
    waiters.set(commandId, (result) => {
      clearTimeout(timer);
      resolve(result);
    });
  });
}

function command(op, key, fields = {}) {
  return { op, id: newId(), tenant, agent, ts: Date.now() / 1000, key, ...fields };
}

// A JetStream publish: a request on the command subject, answered by the stream's ack.
async function publish(subject, payload, headerValues) {
  const h = natsHeaders();
  for (const [name, value] of Object.entries(headerValues)) h.set(name, value);
  const ack = JSON.parse(new TextDecoder().decode((await nc.request(subject, payload, { headers: h, timeout: 5000 })).data));
  expect(!ack.error, `JetStream refused the publish: ${JSON.stringify(ack.error)}`);
  return ack;
}

async function send(cmd, { shard = shardOf(cmd.key), msgId = dedupeId(cmd.id) } = {}) {
  validate("command.v1.json", cmd);
  const subject = address("commands", { tenant, shard, agent });
  const bytes = encode(cmd);
  const ack = await publish(subject, bytes, {
    [MSG_ID]: msgId,
    [REPLY]: `${inboxPrefix}.results.${cmd.id}`,
  });
  return { ack, bytes, subject };
}

async function applied(cmd, options) {
  const { ack } = await send(cmd, options);
  expect(ack.stream === "ZM_COMMANDS" && ack.seq > 0, `unexpected ack ${JSON.stringify(ack)}`);
  return validate("result.v1.json", await resultOf(cmd.id));
}

async function query(kind, body) {
  validate(`${kind}_request.v1.json`, body);
  const msg = await nc.request(address(`${kind}Query`, { tenant, agent }), encode(body), {
    timeout: 5000,
  });
  const reply = decode(msg.data);
  if (msg.headers?.get(ERROR)) {
    validate("error_reply.v1.json", reply);
    return { error: msg.headers.get(ERROR), reply };
  }
  return { reply: validate(`${kind}_reply.v1.json`, reply) };
}

// --- the checks --------------------------------------------------------------------------

await check("documents", () => {
  const validateSpec = new Ajv({ strict: false, allErrors: true, validateFormats: false }).compile(
    require("@asyncapi/specs/schemas/3.0.0-without-$id.json"),
  );
  expect(validateSpec(asyncapi), `asyncapi.yaml: ${JSON.stringify(validateSpec.errors?.slice(0, 3))}`);
  for (const [name, message] of [
    [MSG_ID, messages.command],
    [REPLY, messages.command],
    [BATCH, messages.commandBatch],
    [ERROR, messages.errorReply],
  ]) {
    expect(name in message.headers.properties, `${name} is not declared`);
  }
  for (const message of Object.values(messages)) {
    const file = message.payload.schema.$ref.replace("./json/", "");
    expect(ajv.getSchema(file), `the document names ${file}, which is not in json/`);
  }
  return `${Object.keys(asyncapi.channels).length} channels, ${Object.keys(ajv.schemas).length} schemas`;
});

await check("crc32", () => {
  const vector = crc32(utf8.encode("acme\0user:u1"));
  expect(vector === 0xba91a01c, `crc32 vector: ${vector.toString(16)}`);
  if (zlib.crc32) expect(zlib.crc32("acme\0task:t42") === crc32(utf8.encode("acme\0task:t42")), "differs from zlib");
  return vector.toString(16);
});

await check("info", async () => {
  const { reply, error } = await query("info", { tenant });
  expect(!error, `refused: ${error}`);
  expect(reply.version === Number(asyncapi.info.version), `version ${reply.version}`);
  expect(reply.shards > 0, "no shard count");
  shards = reply.shards;
  return reply;
});

const pref = command("put", "user:u1:lang", {
  value: { lang: "fr" },
  content: "prefers answers in French",
  tags: ["profile"],
});
await check("put", async () => {
  const result = await applied(pref);
  expect(result.status === "applied" && result.version === 1, JSON.stringify(result));
  expect(result.item.value.lang === "fr", "the item is not the value put");
  return result.version;
});

await check("dedupe", async () => {
  // The same message again (same Nats-Msg-Id): stored once, no second result.
  const { ack } = await send(pref);
  expect(ack.duplicate === true, `not a duplicate: ${JSON.stringify(ack)}`);
  return ack;
});

await check("compare-and-set", async () => {
  const create = await applied(
    command("put", "user:u1:lang", { value: { lang: "de" }, content: "German", expected_version: 0 }),
  );
  expect(create.status === "conflict" && create.current_version === 1, JSON.stringify(create));
  const update = await applied(
    command("put", "user:u1:lang", {
      value: { lang: "fr", formal: true },
      content: "prefers answers in French, formal",
      expected_version: 1,
    }),
  );
  expect(update.status === "applied" && update.version === 2, JSON.stringify(update));
  const stale = await applied(command("delete", "user:u1:lang", { expected_version: 1 }));
  expect(stale.status === "conflict" && stale.current_version === 2, JSON.stringify(stale));
  return "conflict at 0, applied at 1, conflict on a stale delete";
});

await check("batch", async () => {
  const cmds = [0, 1, 2].map((i) =>
    command("put", `user:u2:note${i}`, { value: i, content: `note number ${i}` }),
  );
  const bad = { ...command("put", "user:u2:bad"), op: "explode" };
  const batch = [cmds[0], bad, cmds[1], cmds[2]];
  for (const cmd of cmds) validate("command.v1.json", cmd);
  expect(!conforms("command_batch.v1.json", batch), "the bad command passes the batch schema");
  validate("command_batch.v1.json", cmds);
  const ack = await publish(
    address("commands", { tenant, shard: shardOf("user:u2:x"), agent }),
    encode(batch),
    {
      [MSG_ID]: dedupeId(`${cmds[0].id}+${batch.length}`),
      [BATCH]: String(batch.length),
      [REPLY]: `${inboxPrefix}.results.batch`,
    },
  );
  const got = await Promise.all(batch.map((cmd) => resultOf(cmd.id)));
  for (const result of got) validate("result.v1.json", result);
  expect(got.map((r) => r.status).join() === "applied,rejected,applied,applied", got.map((r) => r.status).join());
  expect(got[1].op === "explode" && got[1].reason.startsWith("invalid"), JSON.stringify(got[1]));
  return `seq ${ack.seq}: ${got.map((r) => r.status).join(", ")}`;
});

await check("get", async () => {
  const { reply } = await query("get", { tenant, key: "user:u1:lang" });
  expect(reply.found && reply.item.version === 2 && reply.item.value.formal === true, JSON.stringify(reply));
  const missing = await query("get", { tenant, key: "user:u1:nothing" });
  expect(missing.reply.found === false, JSON.stringify(missing.reply));
  return reply.item.content;
});

await check("list", async () => {
  const first = await query("list", { tenant, prefix: "user:u2:", limit: 2 });
  expect(first.reply.keys.join() === "user:u2:note0,user:u2:note1", first.reply.keys.join());
  expect(first.reply.next_cursor, "no cursor on a first page");
  const rest = await query("list", { tenant, prefix: "user:u2:", limit: 2, cursor: first.reply.next_cursor });
  expect(rest.reply.keys.join() === "user:u2:note2" && !rest.reply.next_cursor, JSON.stringify(rest.reply));
  return [...first.reply.keys, ...rest.reply.keys];
});

await check("appended ids order", async () => {
  // A key without a name appends under the command id: time-ordered ids list in write order.
  const written = [];
  for (const step of ["plan", "search", "answer"]) {
    const result = await applied(command("put", "task:t1", { value: step, content: `step ${step}` }));
    written.push(result.key);
  }
  const { reply } = await query("list", { tenant, prefix: "task:t1:" });
  expect(reply.keys.join() === written.join(), `${reply.keys} vs ${written}`);
  expect(reply.items.map((i) => i.value).join() === "plan,search,answer", "values out of order");
  return reply.keys;
});

await check("recall", async () => {
  const { reply } = await query("recall", {
    tenant,
    query: "which language does the user prefer? French",
    scope: { owners: ["user:u1"] },
    k: 3,
    budget: 200,
  });
  expect(reply.memories.some((m) => m.key === "user:u1:lang"), JSON.stringify(reply));
  expect(reply.context.includes("French"), reply.context);
  return `${reply.memories.length} memories, ${reply.tokens} tokens`;
});

// The change feed: a pull consumer through the JetStream API subjects an agent may use.
async function openFeed(config) {
  const name = crypto.randomBytes(16).toString("base64url").slice(0, 22);
  const filter = `${address("changes", { tenant, shard: "*", namespace: "*", owner_id: "*" }).split(".*")[0]}.>`;
  const body = {
    stream_name: "ZM_CHANGES",
    config: { name, filter_subject: filter, ack_policy: "none", inactive_threshold: 30e9, ...config },
  };
  const reply = JSON.parse(
    new TextDecoder().decode(
      (await nc.request(`$JS.API.CONSUMER.CREATE.ZM_CHANGES.${name}.${filter}`, JSON.stringify(body), { timeout: 5000 })).data,
    ),
  );
  expect(!reply.error, `consumer refused: ${JSON.stringify(reply.error)}`);
  return name;
}

async function fetchAll(name, expires = 1e9) {
  const inbox = `${inboxPrefix}.feed.${name}`;
  const sub = nc.subscribe(inbox);
  const events = [];
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.ZM_CHANGES.${name}`, JSON.stringify({ batch: 500, expires }), { reply: inbox });
  for await (const msg of sub) {
    if (!msg.data.length && msg.headers?.code) break; // 404 / 408: nothing more now
    const seq = Number(msg.reply.split(".")[5]);
    const batched = msg.headers?.get(BATCH);
    const body = decode(msg.data);
    const list = batched ? validate("result_batch.v1.json", body) : [validate("result.v1.json", body)];
    if (batched) expect(list.length === Number(batched), "Zm-Batch count differs");
    for (const result of list) events.push({ seq, result });
  }
  sub.unsubscribe();
  return events;
}

await check("change feed resume", async () => {
  const first = await openFeed({ deliver_policy: "all" });
  const seen = await fetchAll(first);
  await nc.request(`$JS.API.CONSUMER.DELETE.ZM_CHANGES.${first}`, "", { timeout: 5000 });
  const ids = new Set(seen.map((e) => e.result.command_id));
  expect(ids.has(pref.id), "the first put is not on the feed");
  expect(seen.some((e) => e.result.status === "conflict"), "no conflict on the feed");
  const last = Math.max(...seen.map((e) => e.seq));

  const later = await applied(command("put", "user:u1:later", { value: 1, content: "written later" }));
  const resumed = await openFeed({ deliver_policy: "by_start_sequence", opt_start_seq: last + 1 });
  const fresh = await fetchAll(resumed);
  await nc.request(`$JS.API.CONSUMER.DELETE.ZM_CHANGES.${resumed}`, "", { timeout: 5000 });
  expect(fresh.length === 1 && fresh[0].result.command_id === later.command_id, JSON.stringify(fresh));
  return `${seen.length} events to seq ${last}, then resumed at ${last + 1}: ${fresh.length}`;
});

await check("dead-lettered command", async () => {
  const cmd = command("put", "user:u3:x", { value: 1, content: "on the wrong shard" });
  const { ack } = await send(cmd, { shard: (shardOf(cmd.key) + 1) % shards });
  expect(ack.seq > 0, "not stored");
  const result = validate("result.v1.json", await resultOf(cmd.id));
  expect(result.status === "rejected" && result.reason.startsWith("wrong_shard"), JSON.stringify(result));
  // Bytes that are no command at all: the reply subject's last token names it.
  const subject = address("commands", { tenant, shard: 0, agent });
  await publish(subject, new Uint8Array([0xc1, 0x00]), {
    [MSG_ID]: dedupeId("garbage"),
    [REPLY]: `${inboxPrefix}.results.garbage-1`,
  });
  const garbage = validate("result.v1.json", await resultOf("garbage-1"));
  expect(garbage.status === "rejected" && garbage.reason.startsWith("invalid"), JSON.stringify(garbage));
  return result.reason;
});

await check("shard past the count", async () => {
  // No stream captures a shard the deployment does not have: the publish fails at once.
  const cmd = command("put", "user:u4:x", { value: 1, content: "too far" });
  try {
    await send(cmd, { shard: shards });
  } catch (error) {
    expect(String(error.code) === "503", `not 'no responders': ${error}`);
    return "503 no responders";
  }
  throw new Error("a publish to a shard past the count was stored");
});

await check("error reply", async () => {
  const refused = await query("get", { tenant, key: "user:u1:lang", reader: "someone-else" });
  expect(refused.error === "bad_request" && refused.reply.code === "bad_request", JSON.stringify(refused));
  expect(!conforms("get_reply.v1.json", refused.reply), "an error reply passes as a get reply");
  // A request the schema itself refuses (limit over 1000) is refused by the service too.
  const body = { tenant, prefix: "user:", limit: 5000 };
  expect(!conforms("list_request.v1.json", body), "limit 5000 passes the schema");
  const msg = await nc.request(address("listQuery", { tenant, agent }), encode(body), { timeout: 5000 });
  expect(msg.headers?.get(ERROR) === "bad_request", "no Zm-Error header");
  validate("error_reply.v1.json", decode(msg.data));
  return refused.reply.error;
});

resultSub.unsubscribe();
await nc.close();
console.log(JSON.stringify({ done: true, failed }));
process.exit(failed ? 1 : 0);
